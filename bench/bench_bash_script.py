"""Cost of running an approved bash script as a script (issue 27 §5, round 8 p): its sealed copy handed to
bash by path in a read-only mirror of its directory (engine/commands/verified.py Mirror) against the copy
sourced from `bash --norc -c '. COPY' s.sh` in the same pinned view (what ran before), and `bash s.sh`
run plainly: verify, view build and spawn, interleaved."""

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
from engine.commands.content import bind
from engine.commands.pinned import pinned_view
from engine.commands.rendering import pinned_command
from engine.commands.verified import read_words, verify

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
COMMAND = "bash s.sh a b"


def timings(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    # The mirror links every entry of each directory from / down to the script's (at most 1,024 a level):
    # a crowded parent (/tmp) costs more than a project's usual path.
    parser.add_argument("--dir", default=None, help="where the script's tree is made (default: $TMPDIR)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        os.environ["OPENCLAW_STATE_DIR"] = str(Path(tmp) / "state")
        os.makedirs(os.environ["OPENCLAW_STATE_DIR"], mode=0o700)
        work = Path(tmp) / "w"
        work.mkdir()
        for i in range(20):
            (work / f"f{i}.txt").write_text(f"{i}\n")
        (work / "s.sh").write_text('if (return 0 2>/dev/null); then echo sourced; else echo "$1 $2"; fi\n')
        analysis = analyze_command(COMMAND)
        entries = [AllowlistEntry(os.path.realpath("/usr/bin/bash"))]
        result = evaluate_allowlist(analysis, entries, cwd=str(work), env=ENV)
        binding = bind(analysis, result, str(work), ENV, command=COMMAND)
        pinned = pinned_command(analysis, result)
        assert pinned is not None

        def run(argv: list[str], fds: tuple[int, ...], env: dict[str, str]) -> str:
            done = subprocess.run(argv, cwd=work, env={**ENV, **env}, pass_fds=fds, check=True,
                                  capture_output=True, text=True)  # fmt: skip
            return done.stdout

        def plain() -> None:
            assert run(["/bin/sh", "-c", COMMAND], (), {}) == "a b\n"

        def mirrored() -> None:  # what runs now: the copy by path, in its mirror
            verified = verify(binding, pinned, pinned)
            view = pinned_view(None, verified.rereads, mirrors=verified.mirrors)
            try:
                argv = view.argv("/bin/sh", verified.command)
                assert argv is not None and verified.mirrors
                assert run(argv, (*verified.fds, *view.fds), view.env) == "a b\n"
            finally:
                view.close()
                verified.close()

        def sourced() -> None:  # what ran before: the copy sourced from -c (takes the sourced branch)
            verified = verify(binding, pinned, pinned)
            copy = f"/proc/self/fd/{verified.fds[0]}"
            words = ["bash", "--norc", *read_words("sh", copy, "s.sh"), "a", "b"]
            command = " ".join(f"'{w}'" for w in words)
            view = pinned_view(None, verified.rereads)
            try:
                argv = view.argv("/bin/sh", command)
                assert argv is not None
                assert run(argv, (*verified.fds, *view.fds), view.env) == "sourced\n"
            finally:
                view.close()
                verified.close()

        for fn in (plain, mirrored, sourced):
            fn()
        base: list[float] = []
        old: list[float] = []
        new: list[float] = []
        for _ in range(args.runs):  # interleaved, so load drift hits each alike
            base += timings(plain, 1)
            old += timings(sourced, 1)
            new += timings(mirrored, 1)
    b, o, n = statistics.median(base), statistics.median(old), statistics.median(new)
    where = args.dir or tempfile.gettempdir()
    crowd = len(os.listdir(where))
    print(f"{args.runs} runs each, interleaved, pid {os.getpid()}, tree in {where} ({crowd} entries)")
    for label, values in (("plain bash s.sh", base), ("sealed copy sourced from -c (before)", old),
                          ("sealed copy in its mirror (now)", new)):  # fmt: skip
        q = statistics.quantiles(values, n=10)
        print(f"{label:40s} p50 {statistics.median(values):8.3f} ms  p90 {q[-1]:8.3f} ms")
    metric = f"approved `bash s.sh` in {where}: sealed copy in its mirror vs sourced from -c, p50"
    record(metric, f"{n:.2f} ms", f"{o:.2f} ms", ratio(n, o))
    record(
        f"approved `bash s.sh` in {where}: vs plain `bash s.sh`, p50",
        f"{n:.2f} ms",
        f"{b:.2f} ms",
        ratio(n, b),
    )


if __name__ == "__main__":
    main()
