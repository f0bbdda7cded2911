"""What reading output as a terminal would (engine.termtext) costs per MB, against decoding it alone (the
floor: every view decodes): the text view (`plain`, what an agent and the CLI read), the console's line
view, and the filter between an attached session and the operator's terminal. Three rounds, same run.

Usage: .venv/bin/python bench/bench_termtext.py [--mb N]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved
from engine.termtext import TerminalFilter, line_view, plain

LINE = "step 12 of 40: compiling module_name.c with\tflags -O2 \x1b[32mok\x1b[0m (0.31 s) ünïcødé 日本\n"
KINDS = {"ascii": LINE.encode("ascii", "ignore").decode().replace("\x1b[32m", "").replace("\x1b[0m", ""),
         "sgr+utf8": LINE}  # fmt: skip


def ms_per_mb(fn: Callable[[bytes], object], data: bytes) -> float:
    start = time.perf_counter()
    fn(data)
    return (time.perf_counter() - start) * 1000 / (len(data) / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=4.0)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
    for kind, line in KINDS.items():
        data = (line * int(args.mb * 1e6 / len(line.encode()))).encode()
        ways: dict[str, Callable[[bytes], object]] = {
            "decode": lambda b: b.decode(),
            "plain": lambda b: plain(b.decode()),
            "line view": lambda b: [line_view(x) for x in b.decode().split("\n")],
            "terminal": lambda b: TerminalFilter().feed(b.decode()),
        }
        res = interleaved({name: functools.partial(ms_per_mb, way, data) for name, way in ways.items()})
        for name in ("plain", "line view", "terminal"):
            compared(
                f"termtext {name}, {kind} output (per MB, vs decoding alone)", res, name, "decode", "ms/MB"
            )


if __name__ == "__main__":
    main()
