"""Cost of reading git's argv against the allowlist grammar (engine/commands/gitopts.py, via
gitargv.argv_programs) on every host git decision, against a raw baseline: splitting the same text."""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import record
from engine.commands import gitargv

COMMANDS = (
    "git status --short",
    "git log --oneline -n 20 --format=%H%x09%s -- src/",
    "git diff --cached -U3 --stat HEAD~1",
    "git commit -q -m 'fix: the thing' --allow-empty",
    "git push -u origin master",
    "git stash show -p stash@{0}",
    "git rebase --exec=x master",  # asks: the first unknown word ends the read
)


def per_call_us(fn: object, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    argvs = [shlex.split(c) for c in COMMANDS]

    def grammar() -> None:
        for argv in argvs:
            gitargv.argv_programs(argv[1], argv[2:])

    def baseline() -> None:
        for command in COMMANDS:
            shlex.split(command)

    grammar()
    runs = [per_call_us(grammar, args.rounds) / len(COMMANDS) for _ in range(5)]
    base = [per_call_us(baseline, args.rounds) / len(COMMANDS) for _ in range(5)]
    print(f"{len(COMMANDS)} argvs x {args.rounds} rounds, 5 runs")
    print(f"baseline: shlex.split of the text   p50 {statistics.median(base):7.2f} µs per command")
    print(f"git argv grammar (argv_programs)    p50 {statistics.median(runs):7.2f} µs per command")
    record(
        "git argv grammar per command, p50",
        f"{statistics.median(runs):.2f} µs",
        f"{statistics.median(base):.2f} µs",
    )


if __name__ == "__main__":
    main()
