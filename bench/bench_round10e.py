"""What fresh round 10 e's checks add to one decision: content.bind with the built-command and
stdin-program readings (and the perl #! switches) against the same bind with them switched off, in the
same run; and engine.display.visible's allow-list on a non-ASCII command."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import display
from engine.commands import content, pyenvpin
from engine.commands.allowlist import evaluate_allowlist
from engine.commands.analysis import analyze_command

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~")}
COMMANDS = [
    "sh s.sh a b",
    "cat s.sh | sh",
    "git log | grep x | wc -l",
    "env -i PATH=/bin sh s.sh",
    "perl x.pl",
]


def micros(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "s.sh").write_text("echo hi\n" * 100)
        Path(tmp, "x.pl").write_text("#!/usr/bin/perl -w\n" + 'print "hi\\n";\n' * 100)
        real = (content.built_command, content.stdin_program_refusal, content.unproven_sources)
        for command in COMMANDS:
            analysis = analyze_command(command)
            result = evaluate_allowlist(analysis, [], cwd=tmp, env=ENV)

            def decide(
                analysis: object = analysis, result: object = result, command: str = command
            ) -> object:
                return content.bind(analysis, result, tmp, ENV, command=command)  # type: ignore[arg-type]

            now = micros(decide, args.runs)
            content.built_command = lambda _words: ""  # type: ignore[assignment]
            content.stdin_program_refusal = lambda _text: ""  # type: ignore[assignment]
            before = micros(decide, args.runs)
            content.built_command, content.stdin_program_refusal, _ = real
            print(f"{command:<30} bind p50 without {before:8.1f} µs   with {now:8.1f} µs")
    shim = shutil.which("python3") or ""
    if "/shims/" in shim:  # what a decision through a pyenv shim adds: the shim read, the version found
        cost = micros(lambda: pyenvpin.pyenv_version(shim, os.getcwd(), {}), args.runs)
        print(f"{'pyenv_version(shim)':<30} p50 {cost:8.1f} µs")
    text = "sh ./scripts/déploiement-Привет-日本.sh --flag=✓ " * 4
    old = micros(lambda: _old_visible(text), args.runs)
    new = micros(lambda: display.visible(text), args.runs)
    print(f"{'visible(non-ASCII, 180 chars)':<30} deny-list p50 {old:8.1f} µs   allow-list {new:8.1f} µs")


# The deny-list visible() this branch replaced (its fast path for non-ASCII text), as the baseline.
_OLD_HIDDEN = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f\ud800-\udfff]"
)


def _old_visible(s: str) -> str:
    s = _OLD_HIDDEN.sub(lambda m: repr(m.group()), s)
    s.replace("\n", "").isprintable()  # what it checked next (True for this text)
    return s


if __name__ == "__main__":
    main()
