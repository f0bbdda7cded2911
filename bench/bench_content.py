"""What content binding adds to one exec: the digests at decision time plus the check at the spawn."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.commands.allowlist import evaluate_allowlist, pinned_command
from engine.commands.analysis import analyze_command
from engine.commands.content import bind
from engine.commands.verified import verify

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~")}


def micros(fn: Callable[[], object], n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9)]


def case(label: str, command: str, cwd: str, n: int) -> None:
    analysis = analyze_command(command)
    result = evaluate_allowlist(analysis, [], cwd=cwd, env=ENV)
    pinned = pinned_command(analysis, result)

    def decide() -> object:
        return bind(analysis, result, cwd, ENV)

    binding = bind(analysis, result, cwd, ENV)

    def spawn_side() -> None:
        verify(binding, pinned or command, pinned).close()

    d50, d90 = micros(decide, n)
    s50, s90 = micros(spawn_side, n)
    print(f"{label:<44} decide p50 {d50:7.1f} µs p90 {d90:7.1f}", end="   ")
    print(f"spawn check p50 {s50:7.1f} µs p90 {s90:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "s.sh").write_text("echo hi\n" * 100)
        shutil.copy(shutil.which("ls") or "/bin/ls", Path(tmp, "mybin"))
        case("`true` (system-owned, digest cached)", "true", tmp, args.runs)
        case("`sh s.sh` (agent-writable 800 B script)", "sh s.sh", tmp, args.runs)
        size = Path(tmp, "mybin").stat().st_size
        case(f"`./mybin` (agent-writable ELF, {size // 1024} KiB)", "./mybin", tmp, args.runs // 4)


if __name__ == "__main__":
    main()
