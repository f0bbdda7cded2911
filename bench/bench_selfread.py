"""Cost of running every approved script from its mirror (issue 27 §5, round 10 w): `sh s.sh` and `python3
s.py` handed their sealed copy by path in the read-only mirror of their directory (engine/commands/verified.py
Mirror) against the copy read from `/proc/self/fd/N` by `sh -c '. COPY'` / the Python loader in the same
pinned view (what ran before) and the script run plainly; and a recipe's `$(MAKE)` through the view's
sub-make program (engine/commands/submake.py) against make run directly. Interleaved."""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands import submake
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.content import bind
from engine.commands.pinned import pinned_view
from engine.commands.rendering import pinned_command
from engine.commands.verified import read_words, verify

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
SCRIPTS = {
    "sh": ("sh s.sh a b", "s.sh", 'echo "$1 $2"\n', "/usr/bin/dash"),
    "python": ("python3 s.py a b", "s.py", "import sys\nprint(*sys.argv[1:])\n", "/usr/bin/python3"),
}


def timings(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _run(argv: list[str], work: Path, fds: tuple[int, ...] = (), env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=work, env={**ENV, **(env or {})}, pass_fds=fds, check=True, capture_output=True, text=True
    )
    return done.stdout


def bench_script(kind: str, work: Path, runs: int, where: str) -> None:
    command, name, body, program = SCRIPTS[kind]
    (work / name).write_text(body)
    analysis = analyze_command(command)
    entries = [AllowlistEntry(os.path.realpath(program))]
    result = evaluate_allowlist(analysis, entries, cwd=str(work), env=ENV)
    binding = bind(analysis, result, str(work), ENV, command=command)
    pinned = pinned_command(analysis, result)
    assert pinned is not None

    def plain() -> None:
        assert _run(["/bin/sh", "-c", command], work) == "a b\n"

    def mirrored() -> None:  # what runs now: the copy by path, in its mirror
        verified = verify(binding, pinned, pinned)
        view = pinned_view(None, verified.rereads, mirrors=verified.mirrors)
        try:
            argv = view.argv("/bin/sh", verified.command)
            assert argv is not None and verified.mirrors
            assert _run(argv, work, (*verified.fds, *view.fds), view.env) == "a b\n"
        finally:
            view.close()
            verified.close()

    def by_fd() -> None:  # what ran before: the copy read from /proc/self/fd/N, a copy bound at its path
        verified = verify(binding, pinned, pinned)
        copy = f"/proc/self/fd/{verified.fds[0]}"
        words = [os.path.realpath(program), *read_words(kind, copy, name), "a", "b"]
        view = pinned_view(None, verified.rereads)
        try:
            argv = view.argv("/bin/sh", shlex.join(words))
            assert argv is not None
            assert _run(argv, work, (*verified.fds, *view.fds), view.env) == "a b\n"
        finally:
            view.close()
            verified.close()

    base, old, new = _interleaved((plain, by_fd, mirrored), runs)
    _report(
        f"`{command}`", where, base, old, new, "copy by /proc/self/fd (before)", "copy in its mirror (now)"
    )


def bench_submake(work: Path, runs: int, where: str) -> None:
    (work / "Makefile").write_text("all:\n\t@$(MAKE) -s second\nsecond:\n\t@echo second\n")
    text = submake.program("/usr/bin/make", [submake.Held(0, 0, "Makefile", b"", True)], "/usr/bin/make")
    assert text is not None
    program = work.parent / "make-0"
    program.write_bytes(text)
    program.chmod(0o500)

    def plain() -> None:
        assert _run(["make", "-s"], work) == "second\n"

    def through_program() -> None:  # `$(MAKE)` is the view's program: it parses, then execs make
        assert _run(["make", "-s"], work, env={"MAKE": str(program)}) == "second\n"

    base, _old, new = _interleaved((plain, plain, through_program), runs)
    _report("make with one `$(MAKE)`", where, base, None, new, "", "sub-make through the program (now)")


def _interleaved(fns: tuple[Callable[[], None], ...], runs: int) -> tuple[list[float], ...]:
    for fn in fns:
        fn()
    out: tuple[list[float], ...] = tuple([] for _ in fns)
    for _ in range(runs):  # interleaved, so load drift hits each alike
        for fn, values in zip(fns, out, strict=True):
            values += timings(fn, 1)
    return out


def _report(
    what: str,
    where: str,
    base: list[float],
    old: list[float] | None,
    new: list[float],
    old_label: str,
    label: str,
) -> None:
    rows = [("plain", base), *([(old_label, old)] if old is not None else []), (label, new)]
    for name, values in rows:
        q = statistics.quantiles(values, n=10)
        print(f"{what:24s} {name:40s} p50 {statistics.median(values):8.3f} ms  p90 {q[-1]:8.3f} ms")
    n, b = statistics.median(new), statistics.median(base)
    if old is not None:
        o = statistics.median(old)
        record(
            f"approved {what} in {where}: {label} vs {old_label}, p50",
            f"{n:.2f} ms",
            f"{o:.2f} ms",
            ratio(n, o),
        )
    record(f"approved {what} in {where}: {label} vs plain, p50", f"{n:.2f} ms", f"{b:.2f} ms", ratio(n, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where the script's tree is made (default: $TMPDIR)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        os.environ["OPENCLAW_STATE_DIR"] = str(Path(tmp) / "state")
        os.makedirs(os.environ["OPENCLAW_STATE_DIR"], mode=0o700)
        work = Path(tmp) / "w"
        work.mkdir()
        for i in range(20):
            (work / f"f{i}.txt").write_text(f"{i}\n")
        where = args.dir or tempfile.gettempdir()
        crowd = len(os.listdir(where))
        print(f"{args.runs} runs each, interleaved, pid {os.getpid()}, tree in {where} ({crowd} entries)")
        for kind in SCRIPTS:
            bench_script(kind, work, args.runs, where)
        bench_submake(work, args.runs, where)


if __name__ == "__main__":
    main()
