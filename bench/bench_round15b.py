"""What fresh round 15 b costs a host view: besides the other exechost services' state dirs (a node's now
too: one more recorded entry each), every view reads the recorded sandbox workspace roots and lstats each
one the config no longer names (engine.commands.gatewaydirs.old_roots); and every workspace made records
its root once per process (gatewaydirs.record_root: a set lookup after the first); and every view hides what
the other gateways' configs name (gatewaydirs.others_secrets: a node key, an engine's client key dir, each
stat'ed per view). Against the same read of the state dirs alone (before) and a plain `sh -c true` spawn,
same run. Three rounds, interleaved.

Usage: .venv/bin/python -P bench/bench_round15b.py [--roots 8] [--runs 30]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, per_call_us, spawn_ms


def main() -> None:
    from engine.commands import gatewaydirs

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--roots", type=int, default=8, help="old workspace roots (and other state dirs) recorded"
    )
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="eh-b15b-"))
    try:
        home, state, now_root = root / "h", root / "s", root / "sbx-now"
        for d in (home, state, now_root):
            d.mkdir(mode=0o700)
        for n in range(args.roots):
            (root / f"g{n}").mkdir(mode=0o700)
            (root / f"w{n}").mkdir(mode=0o700)
            gatewaydirs.record(str(home), str(root / f"g{n}"))
            gatewaydirs.record_root(str(home), str(root / f"w{n}"))
            (root / f"k{n}").mkdir(mode=0o700)
            (root / f"k{n}" / "id").touch(mode=0o600)
            gatewaydirs.record_secrets(str(home), [str(root / f"k{n}" / "id")], [str(root / f"c{n}")])
            (root / f"c{n}").mkdir(mode=0o700)
        gatewaydirs.record_root(str(home), str(now_root))
        named = [str(now_root)]

        def before() -> object:
            return gatewaydirs.others(str(home), str(state), [])

        def now() -> object:
            return before(), gatewaydirs.old_roots(str(home), str(state), [], named)

        def secrets() -> object:
            return gatewaydirs.others_secrets(str(home), str(state), [])

        assert len(now()[1]) == args.roots
        assert tuple(map(len, gatewaydirs.others_secrets(str(home), str(state), []))) == (args.roots,) * 2
        calls = args.runs * 10
        res = interleaved(
            {
                "plain": lambda: spawn_ms(["/bin/sh", "-c", "true"], args.runs),
                "now": lambda: per_call_us(now, calls, 1) / 1000,
                "before": lambda: per_call_us(before, calls, 1) / 1000,
                "secrets": lambda: per_call_us(secrets, calls, 1) / 1000,
                "record": lambda: (
                    per_call_us(lambda: gatewaydirs.record_root(str(home), str(now_root)), calls, 1) / 1000
                ),
            }
        )
        label = f"{args.roots} other state dirs and {args.roots} old workspace roots"
        compared(
            f"recorded places read per view, {label} (vs state dirs alone, before)", res, "now", "before"
        )
        compared("  the same (vs plain `sh -c true`)", res, "now", "plain")
        compared(
            f"other gateways' config secrets hidden per view, {args.roots} keys and {args.roots} key dirs "
            "(vs plain `sh -c true`)",
            res,
            "secrets",
            "plain",
        )
        compared(
            "a workspace's root recorded, per workspace ensured (vs plain `sh -c true`)",
            res,
            "record",
            "plain",
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
