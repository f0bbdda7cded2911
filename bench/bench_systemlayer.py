"""What layering every tree outside the writable roots costs a gateway-host run (engine.commands.homelayer,
fresh round 14 c: no socket outside the writable roots connectable): the kept view's `sh -c true` with
every top-level directory of `/` and every filesystem below one layered, against the same view with the
home alone layered (the construction before) and against `sh -c true` spawned plainly; a run's own bwrap
the same way; the layers found per run; and the view made per change, now without the socket-free copy
of a hidden socket's directory (/run, holding the Docker engine's), against the view made with it. p50
per spawn, three rounds interleaved, same run.

Usage: .venv/bin/python -P bench/bench_systemlayer.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, per_call_us, ratio, record, spawn_ms

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehs-", dir="/tmp"))
    (root / "s").mkdir(mode=0o700)
    home = root / "h"
    (home / "work").mkdir(parents=True)
    (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(home)
    from engine.commands import homelayer, hostkeeper, hostoutside, hostview
    from engine.commands.pinned import pinned_view

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        if shutil.which("bwrap") is None or shutil.which("cc") is None:
            print("needs bwrap and cc")
            return
        helper = str(root / "hostenter")
        sources = sorted(str(c) for c in (ROOT / "engine" / "commands" / "hostenter").glob("*.c"))
        subprocess.run(["cc", "-O2", "-Wall", "-o", helper, *sources], check=True)
        os.environ[hostkeeper.HELPER_ENV] = helper
        hostkeeper.stop()
        outside = hostoutside.Outside(writable=(str(home / "work"),))
        true = ["/bin/sh", "-c", "true"]
        kept = pinned_view(None, host=True, outside=outside)
        layered = kept.wrap(true)
        cut = layered.index("--")
        every = layered[6:cut]
        assert layered[1] == "enter" and "/usr" in every and str(home) in every, layered
        home_only = [
            *layered[:6],
            *(d for d in every if d == str(home) or d.startswith(f"{home}/")),
            *layered[cut:],
        ]
        real_kept = hostview.kept_prefix
        hostview.kept_prefix = lambda *_a, **_k: None  # type: ignore[assignment]
        own = pinned_view(None, host=True, outside=outside)
        assert "own-pts" in own.prefix and "/usr" in own.prefix, own.prefix
        real_layers = hostview.run_layers

        def home_layers(
            state: str, out: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE, *, kept: bool
        ) -> list[str]:
            return [
                d for d in real_layers(state, out, kept=kept) if d == str(home) or d.startswith(f"{home}/")
            ]

        hostview.run_layers = home_layers  # type: ignore[assignment]
        own_home = pinned_view(None, host=True, outside=outside)
        hostview.run_layers, hostview.kept_prefix = real_layers, real_kept  # type: ignore[assignment]
        print(f"layers: every tree {len(every)}, the home's {len(home_only) - len(layered) + len(every)}")
        argvs = {
            "kept every": (layered, kept.fds),
            "kept home": (home_only, kept.fds),
            "plain": (true, ()),
            "own every": (own.wrap(true), own.fds),
            "own home": (own_home.wrap(true), own_home.fds),
        }
        n = args.runs // 3
        res = interleaved({k: functools.partial(spawn_ms, a, n, f) for k, (a, f) in argvs.items()})
        for view in (kept, own, own_home):
            view.close()
        compared(
            "kept view `sh -c true`, every tree layered per run (vs the same view, the home alone layered)",
            res, "kept every", "kept home",
        )  # fmt: skip
        compared(
            "kept view `sh -c true`, every tree layered (vs `sh -c true` spawned plainly)",
            res,
            "kept every",
            "plain",
        )
        compared(
            "a run's own bwrap, every tree layered by own-pts (vs the home alone layered)",
            res, "own every", "own home",
        )  # fmt: skip
        skip = [str(root / "s")]
        every_us = per_call_us(lambda: homelayer.layers(str(home), skip, system=True), args.runs, 3)
        home_us = per_call_us(lambda: homelayer.layers(str(home), skip), args.runs, 3)
        record(
            "the layers found per run (homelayer.layers, every tree vs the home's)",
            f"{every_us:.0f} us", f"{home_us:.0f} us", ratio(every_us, home_us),
        )  # fmt: skip
        if os.path.exists("/run/docker.sock"):
            hidden = hostoutside.Outside(writable=(str(home / "work"),), hidden=("/run/docker.sock",))
            state = str(root / "s")
            made_us = per_call_us(lambda: hostview.view_args(state, outside=hidden), 20, 3)
            real_helper = hostkeeper.helper_path
            hostkeeper.helper_path = lambda: None  # type: ignore[assignment]
            try:  # the view as it was: /run a socket-free copy of its entries
                copy_us = per_call_us(lambda: hostview.view_args(state, outside=hidden), 20, 3)
            finally:
                hostkeeper.helper_path = real_helper  # type: ignore[assignment]
            record(
                "a view made, /run/docker.sock hidden (vs /run as a socket-free copy)",
                f"{made_us:.0f} us", f"{copy_us:.0f} us", ratio(made_us, copy_us),
            )  # fmt: skip
    finally:
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
