"""What privacy-wins costs the host view (fresh round 14 c): the trusted dirs of the home (an import dir,
a PATH dir) are walked and judged as the rest of the home now, where they were shown whole, unwalked.
On a home holding a venv-like import dir (~/.local/lib/python3/site-packages: 600 packages of 3 dirs of
3 files each) and a ~/bin on PATH: the per-view cost with every listing cached (each walked directory
stat'ed), trusted dirs walked (now) against shown whole (before), and the first walk; and the per-view
read of the other gateways' state dirs (engine.commands.gatewaydirs, 8 recorded); against a plain
`sh -c true` spawn in the same run. Three rounds, interleaved.

Usage: .venv/bin/python -P bench/bench_trustedprivate.py [--packages 600] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, per_call_us, spawn_ms


def make_home(home: Path, packages: int) -> tuple[Path, Path]:
    """The import dir and the PATH dir made in `home`."""
    site = home / ".local" / "lib" / "python3" / "site-packages"
    for n in range(packages):
        pkg = site / f"pkg{n}"
        for sub in ("", "sub", "sub/deeper"):
            d = pkg / sub
            d.mkdir(parents=True, exist_ok=True)
            for f in range(3):
                (d / f"m{f}.py").write_text("")
    bin_dir = home / "bin"
    bin_dir.mkdir(mode=0o700)
    for n in range(40):
        (bin_dir / f"tool{n}").write_text("#!/bin/sh\n")
        (bin_dir / f"tool{n}").chmod(0o755)
    return site, bin_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--packages", type=int, default=600)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehtp-", dir="/tmp"))
    state, home = root / "s", root / "h"
    state.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    os.environ["HOME"] = str(home)
    from engine.commands import gatewaydirs, homeprivate

    try:
        site, bin_dir = make_home(home, args.packages)
        kept = [str(site), str(bin_dir)]
        for n in range(8):
            (root / f"g{n}").mkdir(mode=0o700)
            gatewaydirs.record(str(home), str(root / f"g{n}"))
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")

        def now() -> homeprivate.Found:  # trusted dirs walked and judged (privacy wins)
            return homeprivate.find(str(home), [], kept, (str(home), str(state)))

        def before() -> homeprivate.Found:  # trusted dirs shown whole, not walked (as before)
            return homeprivate.find(str(home), [], [], (str(home), str(state), *kept))

        def cold() -> float:
            homeprivate.clear()
            return per_call_us(now, 1, 1) / 1000

        now()
        before()
        walked = homeprivate.find(str(home), [], kept, (str(home), str(state))).walked
        print(f"directories stat'ed per view: {walked} now, {before().walked} before")
        res = interleaved(
            {
                "plain": lambda: spawn_ms(["/bin/sh", "-c", "true"], args.runs),
                "now": lambda: per_call_us(now, args.runs, 1) / 1000,
                "before": lambda: per_call_us(before, args.runs, 1) / 1000,
                "cold": cold,
                "gateways": lambda: (
                    per_call_us(lambda: gatewaydirs.others(str(home), str(state), []), args.runs * 10, 1)
                    / 1000
                ),
            }
        )
        compared(
            "trusted dirs judged: per view, listings cached (vs shown whole, before)", res, "now", "before"
        )
        compared("  the same (vs plain `sh -c true`)", res, "now", "plain")
        compared("  first walk of that home (vs plain `sh -c true`)", res, "cold", "plain")
        compared(
            "other gateways' state dirs read, 8 recorded (vs plain `sh -c true`)", res, "gateways", "plain"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
