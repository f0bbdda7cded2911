"""Cost of a host `git` decision: vetting the repository's config (engine/commands/gitvet.py) at the
decision and again at the spawn, with its parse cache warm and cleared, against a bare `git` process."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import record
from engine.commands import gitvet
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.treecode import tree_vet

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
ENTRIES = [AllowlistEntry("/usr/bin/git", arg_pattern=r"(status|log)( .*)?")]


def make_repo(root: Path, submodules: int) -> Path:
    """A repository with `submodules` absorbed submodules (each one more config file git would read)."""
    work = root / "work"
    subprocess.run(["git", "init", "-q", str(work)], env=GIT_ENV, check=True)
    for index in range(submodules):
        modules = work / ".git" / "modules" / f"sub{index}"
        subprocess.run(["git", "init", "-q", "--bare", str(modules)], env=GIT_ENV, check=True)
    return work


def decide(work: str) -> None:
    """What a host exec of `git status` does: analysis, allowlist, tree vet, and the spawn's re-vet."""
    analysis = analyze_command("git status --short")
    result = evaluate_allowlist(analysis, ENTRIES, cwd=work, env={"PATH": "/usr/bin:/bin"})
    vet = tree_vet(analysis, result, work, [])
    assert vet.problem() is None


def timings(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--submodules", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = str(make_repo(Path(tmp), args.submodules))
        decide(work)  # warm imports and the path caches

        def cold() -> None:
            parsed = getattr(gitvet, "_PARSED", None)
            if parsed is not None:
                parsed.clear()
            decide(work)

        def bare_git() -> None:
            subprocess.run(
                ["git", "-C", work, "config", "--list"], env=GIT_ENV, capture_output=True, check=True
            )

        rows = [
            ("baseline: one `git config --list` process", timings(bare_git, args.runs)),
            ("git decision + spawn re-vet, parse cache cleared", timings(cold, args.runs)),
            ("git decision + spawn re-vet, parse cache warm", timings(lambda: decide(work), args.runs)),
        ]
    print(f"{args.runs} runs, repository with {args.submodules} absorbed submodule(s), pid {os.getpid()}")
    for label, values in rows:
        q = statistics.quantiles(values, n=10)
        print(f"{label:52s} p50 {statistics.median(values):8.3f} ms  p90 {q[-1]:8.3f} ms")
    warm = statistics.median(rows[2][1])
    record(
        "git decision (vet + spawn re-vet), p50", f"{warm:.3f} ms", f"{statistics.median(rows[0][1]):.3f} ms"
    )


if __name__ == "__main__":
    main()
