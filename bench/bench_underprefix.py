"""What finding the roots that hold a path by its prefixes saves a run's view (perf18): `homelayer.layers`
with `system=True` (every host mount point against the layers' tops, per view) and `outside_layers` (each
fixed dir against every host mount point, twice per fixed ancestor per view), with `_Under` (a dict lookup
per prefix of the path) against the same with each root tried in turn (`_inside` per root: the code
before), swapped in the same process. µs per call, three rounds interleaved, same run.

Usage: .venv/bin/python -P bench/bench_underprefix.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, per_call_us
from engine.commands import homelayer


class _EachInTurn:
    """The code before: every root tried against the path."""

    def __init__(self, roots: Iterable[str]) -> None:
        self._roots = set(roots)

    def holders(self, path: str) -> Iterator[str]:
        return (r for r in self._roots if homelayer._inside(path, r))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ehu-", dir="/tmp"))
    try:
        points = homelayer.mount_points()
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        layers = homelayer.layers(str(home), system=True)
        fixed = ["/opt/x", "/opt/x/y", str(home / "w")]
        print(f"{len(points)} mount points, {len(layers)} layers")
        prefixes = homelayer._Under

        def timed(kind: type, fn: functools.partial[object]) -> float:
            homelayer._Under = kind  # type: ignore[misc]
            try:
                return per_call_us(fn, args.runs, 1)
            finally:
                homelayer._Under = prefixes  # type: ignore[misc]

        lay = functools.partial(homelayer.layers, str(home), system=True)
        out = functools.partial(homelayer.outside_layers, fixed, layers, [str(home), *points])
        # (the same answers: tests/engine/commands/test_homelayer.py's property test; not compared here,
        # where other processes' mounts come and go between two calls)
        res = interleaved(
            {
                "layers": functools.partial(timed, prefixes, lay),
                "layers, each": functools.partial(timed, _EachInTurn, lay),
                "outside": functools.partial(timed, prefixes, out),
                "outside, each": functools.partial(timed, _EachInTurn, out),
            }
        )
        for name, us in res.items():
            print(f"{name:<14} " + " · ".join(f"{u:8.1f}" for u in us) + " us per call")
        compared(
            "homelayer.layers(system=True) per view, roots by prefix (vs each tried)",
            res,
            "layers",
            "layers, each",
            "us",
        )
        compared(
            "homelayer.outside_layers, 3 fixed dirs vs every mount (vs each tried)",
            res,
            "outside",
            "outside, each",
            "us",
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
