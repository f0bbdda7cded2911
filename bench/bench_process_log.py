"""`process log` of a settled session's disk log: time and peak memory of the streamed read (what the gateway
does now) against the whole-text read it replaced (kept here as the reference) and a raw baseline (reading
the file's bytes once), for a 4 MiB and a 64 MiB log of short lines (the worst case for a line list).

Usage: .venv/bin/python bench/bench_process_log.py [--sizes 4,64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from engine.sessions.logframes import spool_text  # noqa: E402
from engine.sessions.logread import cleaned, lines_window, log_text  # noqa: E402
from engine.sessions.outtext import sanitize  # noqa: E402

TAIL = 200  # process log's default window (engine.sessions.actions.LOG_TAIL_LINES)
FRAME = 65536


def write_log(path: Path, size: int) -> None:
    """`yes ab | head -c size` as a session log: spool frames of 64 KiB."""
    data = (b"ab\n" * (size // 3 + 1))[:size]
    with open(path, "wb") as fh:
        for at in range(0, size, FRAME):
            chunk = data[at : at + FRAME]
            fh.write(b"\x00" + len(chunk).to_bytes(4, "big") + chunk)


def before(path: Path) -> tuple[str, int]:
    """The read this replaced: the whole text, cleaned, every line in a list, the last 200 kept."""
    text = sanitize(spool_text(path)).replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines[-TAIL:]), len(lines)


def after(path: Path) -> tuple[str, int]:
    return lines_window(cleaned(log_text(path)), None, None, TAIL)


def raw(path: Path) -> tuple[str, int]:
    return "", len(path.read_bytes())


def measure(call: Callable[[Path], Any], path: Path) -> tuple[float, float]:
    start = time.perf_counter()
    call(path)
    took = time.perf_counter() - start
    tracemalloc.start()
    try:
        call(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return took, peak / 2**20


def main(sizes: list[int], repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for mib in sizes:
            path = Path(tmp) / f"{mib}.log"
            write_log(path, mib << 20)
            assert before(path) == after(path)
            for run in range(1, repeats + 1):
                new_s, new_mib = measure(after, path)
                old_s, old_mib = measure(before, path)
                raw_s, raw_mib = measure(raw, path)
                record(
                    f"process log {mib} MiB log, time (run {run}; before {old_s * 1000:.0f} ms)",
                    f"{new_s * 1000:.0f} ms",
                    f"{raw_s * 1000:.0f} ms (read the file)",
                    ratio(new_s, raw_s),
                )
                record(
                    f"process log {mib} MiB log, peak memory (run {run}; before {old_mib:.0f} MiB)",
                    f"{new_mib:.2f} MiB",
                    f"{raw_mib:.0f} MiB (read the file)",
                    ratio(new_mib, raw_mib),
                    "independent of the log's size",
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4,64")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    main([int(s) for s in args.sizes.split(",")], args.repeats)
