"""Cost of round 10 d's checks (issue 27 §4): a vet read refusing a file inside the state dir (one
readlink of the opened fd per file read), and a chain's priorwrites order (per decision), against a raw
open+read of the same file and no order at all."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands import priorwrites
from engine.commands.regular import read_regular


def per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("OPENCLAW_STATE_DIR", os.path.join(tmp, "state"))
        path = os.path.join(tmp, "package.json")
        Path(path).write_text('{"name": "p", "scripts": {"test": "true"}}\n' * 20)

        def raw() -> bytes:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return os.read(fd, 1 << 20)
            finally:
                os.close(fd)

        chain = [(("git", "checkout", "x", "--", "package.json"), False), (("npm", "test"), False)]
        base = statistics.median(per_call_us(raw, args.n) for _ in range(5))
        vet = statistics.median(per_call_us(lambda: read_regular(path, 1 << 20), args.n) for _ in range(5))
        order = statistics.median(
            per_call_us(lambda: priorwrites.after_writes(chain), args.n) for _ in range(5)
        )
    print(
        f"raw open+read {base:.2f} us; vet read (with the state-dir check) {vet:.2f} us; order {order:.2f} us"
    )
    record(
        "vet read of one file (regular + state-dir check), per file",
        f"{vet:.2f} µs",
        f"{base:.2f} µs",
        ratio(vet, base),
    )
    record("priorwrites order of a two-command chain, per decision", f"{order:.2f} µs")


if __name__ == "__main__":
    main()
