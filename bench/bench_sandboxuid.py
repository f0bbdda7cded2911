"""What a root gateway's bwrap sandbox start pays to run as a uid of its own (engine.sandbox.sandboxuid):
the staging namespace (unshare, a tmpfs, one bind per private source), setpriv and bwrap as that uid, against
the raw baseline of the same bwrap as root, in the same run, three repeats interleaved.

Run (as root): .venv/bin/python bench/bench_sandboxuid.py [--n N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.sandbox import sandboxuid
from engine.sandbox import supervisor as sv


def _bwrap(sources: list[str]) -> list[str]:
    argv = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"]
    argv += ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
    argv += ["--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev"]
    for i, source in enumerate(sources):
        argv += ["--bind", source, f"/s{i}"]
    return [*argv, "--", "/usr/bin/true"]


def _time(argv: list[str], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the construction applies to root gateways only")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)  # as a state dir: not searchable by the sandbox's uid
        uid = sandboxuid.BASE + 12345
        sources = []
        for name in ("workspace", "ctl", "bin", "egress"):  # what a sandbox binds from the state dir
            path = Path(tmp, name)
            path.mkdir()
            os.chown(path, uid, uid)
            sources.append(str(path))
        raw = _bwrap(sources)
        busybox = sv.find_static_busybox() or ""
        variants = {"host sh and mount": "", "static busybox": busybox} if busybox else {"host sh": ""}
        for label, bb in variants.items():
            own = sandboxuid.stage([*sandboxuid.drop_to(uid), *_bwrap(sources)], "bwrap", bb)
            at = own.index("bwrap") + 1
            own[at : at + 1] = ["--unshare-user", "--uid", "0"]  # (its root inside is the uid outside)
            for repeat in range(3):
                # ABBA: neither goes first every time
                base_1, mine_1 = _time(raw, args.n), _time(own, args.n)
                mine_2, base_2 = _time(own, args.n), _time(raw, args.n)
                base, mine = (base_1 + base_2) / 2, (mine_1 + mine_2) / 2
                record(
                    f"bwrap start as its own uid, 4 sources staged, {label} (vs as root), run {repeat + 1}",
                    f"{mine:.2f} ms",
                    f"{base:.2f} ms",
                    ratio(mine, base),
                )


if __name__ == "__main__":
    main()
