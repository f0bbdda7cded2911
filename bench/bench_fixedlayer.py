"""What leaving out the fixed-ancestor binds inside a run's read-only layers costs a run's view (fresh round
16 a: a `--bind D D` inside a layer was put back over it writable): `view_args` with the run's layers (the
mount table read once more, each fixed ancestor checked against the layers and what is put back over them)
against `view_args` without them (the construction before), for a state dir in /opt whose directory is
fixed in place. µs per call, three rounds interleaved, same run.

Usage: .venv/bin/python -P bench/bench_fixedlayer.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, per_call_us, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ehf-", dir="/tmp"))
    team = Path(tempfile.mkdtemp(prefix="ehf-", dir="/opt" if os.access("/opt", os.W_OK) else "/tmp"))
    try:
        team.chmod(0o755)
        state = team / "s"  # its directory (team) fixed in place: /opt is the gateway user's to rename in
        state.mkdir(mode=0o700)
        (home / ".gitconfig").write_text("[user]\n\tname = op\n")
        os.environ["OPENCLAW_STATE_DIR"] = str(state)
        os.environ["HOME"] = str(home)
        from engine.commands import hostview

        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        layers = hostview.run_layers(str(state), kept=True)
        with_layers = hostview.view_args(str(state), layers=layers)
        without = hostview.view_args(str(state))
        binds = (without.count(str(team)), with_layers.count(str(team)))
        print(f"layers {len(layers)}; fixed binds of {team}: {binds[0]} -> {binds[1]}")
        res = interleaved(
            {
                "layers": functools.partial(
                    per_call_us, lambda: hostview.view_args(str(state), layers=layers), args.runs, 1
                ),
                "none": functools.partial(per_call_us, lambda: hostview.view_args(str(state)), args.runs, 1),
            }
        )
        from engine.commands import homelayer

        fixed = ["/opt/x", str(team)]
        check_us = per_call_us(
            lambda: homelayer.outside_layers(fixed, layers, [str(state), *homelayer.mount_points()]),
            args.runs * 10,
            3,
        )
        record(
            "the check alone (the mount points read, each fixed ancestor against the layers)",
            f"{check_us:.0f} µs",
        )
        compared(
            "a view made, no fixed ancestor inside a run's layers (vs every one bound over itself)",
            res, "layers", "none", unit="µs",
        )  # fmt: skip
    finally:
        shutil.rmtree(team, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
