"""Cost of issue 27's checks: a host `git status` run in the pinned view (engine/commands/pinned.py: the
spawn's re-vet keeping the bytes, a bwrap mount namespace, git over the sealed config) against the same
git run plainly; the inert-env check; reading interpreter options (engine/commands/interpoptions.py); the
tree vet of an unmodelled program (engine/commands/treesafe.py's inverse list) against a listed one; and a
make handed its vetted Makefile as a sealed copy (re-vet, memfd, rendering again) before the spawn."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.hostenv import foreign_env_keys
from engine.commands.interpoptions import program_source
from engine.commands.pinned import pinned_view, view_for
from engine.commands.rendering import pinned_command
from engine.commands.treecode import tree_vet
from engine.commands.verified import VerifiedRun

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
ENTRIES = [AllowlistEntry("/usr/bin/git")]


def make_repo(root: Path) -> Path:
    work = root / "work"
    subprocess.run(["git", "init", "-q", str(work)], env=GIT_ENV, check=True)
    for i in range(20):
        (work / f"f{i}.txt").write_text(f"{i}\n")
    subprocess.run(["git", "-C", str(work), "add", "."], env=GIT_ENV, check=True)
    return work


def timings(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPENCLAW_STATE_DIR"] = str(Path(tmp) / "state")
        os.makedirs(os.environ["OPENCLAW_STATE_DIR"], mode=0o700)
        work = str(make_repo(Path(tmp)))
        analysis = analyze_command("git status --short")
        result = evaluate_allowlist(analysis, ENTRIES, cwd=work, env={"PATH": "/usr/bin:/bin"})
        vet = tree_vet(analysis, result, work, [])

        def plain() -> None:
            subprocess.run(["/bin/sh", "-c", "git status --short"], cwd=work, env=GIT_ENV, check=True,
                           capture_output=True)  # fmt: skip

        def pinned() -> None:
            view = pinned_view(vet.pin())
            try:
                argv = view.argv("/bin/sh", "git status --short")
                assert argv is not None
                subprocess.run(argv, cwd=work, env={**GIT_ENV, **view.env}, pass_fds=view.fds, check=True,
                               capture_output=True)  # fmt: skip
            finally:
                view.close()

        plain()
        pinned()
        # interleaved, so load drift hits both alike
        base, ours = [], []
        for _ in range(args.runs):
            base += timings(plain, 1)
            ours += timings(pinned, 1)
        pin_only = timings(lambda: pinned_view(vet.pin()).close(), args.runs)
        tree_us = {c: _vet_us(c, work) for c in ("ls x.py", "mypy x.py")}
        (Path(work) / "Makefile").write_text("test:\n\t@true\n")
        make_ms = timings(lambda: _make_swap(work), args.runs)
    env = {"GNUMAKEFLAGS": "x", "LANG": "C", "TZ": "UTC"}
    # ms for 1,000 calls is µs per call
    env_us = statistics.median(timings(lambda: [foreign_env_keys(env) for _ in range(1000)], 20))
    argv = ("bash", "-e", "-o", "pipefail", "--norc", "x.sh")
    opt_us = statistics.median(timings(lambda: [program_source(argv) for _ in range(1000)], 20))
    b, o, p = statistics.median(base), statistics.median(ours), statistics.median(pin_only)
    print(f"{args.runs} runs each, interleaved, pid {os.getpid()}")
    for label, values in (("plain git status", base), ("pinned git status (re-vet + bwrap)", ours),
                          ("re-vet + view build only", pin_only)):  # fmt: skip
        q = statistics.quantiles(values, n=10)
        print(f"{label:40s} p50 {statistics.median(values):8.3f} ms  p90 {q[-1]:8.3f} ms")
    print(f"inert-env check (3 keys) {env_us:.2f} µs; interpreter options (5 words) {opt_us:.2f} µs")
    print(f"tree vet: ls x.py {tree_us['ls x.py']:.1f} µs, mypy x.py {tree_us['mypy x.py']:.1f} µs")
    m = statistics.median(make_ms)
    print(f"make test: re-vet + sealed Makefile + rendering again (no spawn) p50 {m:.3f} ms")
    record("host git status in the pinned view, p50", f"{o:.2f} ms", f"{b:.2f} ms", ratio(o, b))
    record("pinned view: re-vet + build (no spawn), p50", f"{p:.3f} ms")
    record("inert-env check, 3 keys", f"{env_us:.2f} µs")
    record("interpreter options, `bash -e -o pipefail --norc x.sh`", f"{opt_us:.2f} µs")
    record("tree vet, `mypy x.py` (unmodelled) in a writable tree", f"{tree_us['mypy x.py']:.1f} µs")
    record("tree vet, `ls x.py` (on TREE_SAFE)", f"{tree_us['ls x.py']:.1f} µs")
    record("make: re-vet + sealed Makefile + rendering (no spawn), p50", f"{m:.3f} ms")


def _vet_us(command: str, work: str) -> float:
    """µs per tree vet of `command` in `work` (writable): the decision's share of the inverse list."""
    (Path(work) / "x.py").write_text("x = 1\n")
    analysis = analyze_command(command)
    entries = [AllowlistEntry("/usr/bin/ls"), AllowlistEntry("**/mypy")]
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    result = evaluate_allowlist(analysis, entries, cwd=work, env={"PATH": path})
    assert result.segments[0].resolved_path, command
    vet = tree_vet(analysis, result, work, [])
    assert bool(vet.found) == (command.startswith("mypy")), vet.found
    # ms for 1,000 calls is µs per call
    return statistics.median(timings(lambda: [tree_vet(analysis, result, work, []) for _ in range(1000)], 10))


def _make_swap(work: str) -> None:
    analysis = analyze_command("make test")
    entries = [AllowlistEntry("/usr/bin/make")]
    result = evaluate_allowlist(analysis, entries, cwd=work, env={"PATH": "/usr/bin"})
    vet = tree_vet(analysis, result, work, [])
    run = VerifiedRun(pinned_command(analysis, result) or "")
    view = view_for(vet, run)
    assert "/proc/self/fd/" in run.command, run.command
    view.close()


if __name__ == "__main__":
    main()
