"""The engines' state dirs per host run (engine.tools.enginestate.state_dirs): with the mount table's names
kept until the kernel says the table changed (and every name re-verified by a stat), against the table read
and parsed per call (as every run did before) and the by-name lookup alone (before fresh round 17 a), the
three interleaved in the same run, three repeats of `--runs` calls each.

Usage: .venv/bin/python bench/bench_enginestate.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.tools import enginestate


def per_call(fn: Callable[[], object], n: int) -> float:
    """µs per call of `n` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1e6 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    home = os.path.realpath(os.path.expanduser("~"))
    with open(enginestate.MOUNTINFO, encoding="utf-8", errors="replace") as f:
        lines = len(f.read().splitlines())
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {load:.2f}, {lines} mounts")
    print(f"found: {enginestate.state_dirs()}")

    def uncached() -> object:
        enginestate._ALIASES.clear()  # (the mount table read and parsed, every name resolved: each call)
        return enginestate.state_dirs()

    kinds: dict[str, Callable[[], object]] = {
        "cached": enginestate.state_dirs,
        "uncached": uncached,
        "by name": lambda: enginestate.by_name(os.environ, home),
    }
    results: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(3):  # interleaved, so a change in load falls on all of them alike
        for name, fn in kinds.items():
            fn()  # (the cached one filled once, outside the timing)
            fills = enginestate._ALIASES.fills
            results[name].append(per_call(fn, args.runs))
            if name == "cached":  # (another process's mount between two calls: the table is read again)
                print(f"cached: {enginestate._ALIASES.fills - fills} of {args.runs} calls read the table")
    for name, us in results.items():
        print(f"{name:<9} " + " · ".join(f"{u:7.1f}" for u in us) + " us per call")
    med = {name: sorted(us)[1] for name, us in results.items()}
    fmt = {name: " · ".join(f"{u:.0f}" for u in us) for name, us in results.items()}
    record(
        "engine state dirs per host run, mount table's names cached (vs read per call), us, runs 1 · 2 · 3",
        fmt["cached"],
        fmt["uncached"],
        ratio(med["cached"], med["uncached"]),
    )
    record(
        "  engine state dirs per host run, cached (vs the by-name lookup alone), us, runs 1 · 2 · 3",
        fmt["cached"],
        fmt["by name"],
        ratio(med["cached"], med["by name"]),
    )


if __name__ == "__main__":
    main()
