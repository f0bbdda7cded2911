"""What the home's per-run layer costs a gateway-host run (engine.commands.homelayer, fresh round 11 a):
the kept view's `sh -c true` with the home and a linked ~/.cache layered (a new overlay each, the kept
mounts below carried over) against the same words without layers, and against spawning `sh -c true`
plainly; a run's own bwrap with its layers made by own-pts against one with the home bound and its
sockets listed (the construction before). p50 per spawn, three rounds interleaved, same run.

Usage: .venv/bin/python bench/bench_homelayer.py [--runs N]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socket
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
    root = Path(tempfile.mkdtemp(prefix="ehl-", dir="/tmp"))
    (root / "s").mkdir(mode=0o700)
    home = root / "h"
    (home / "work").mkdir(parents=True)
    (root / "disk" / "cache").mkdir(parents=True)
    (home / ".cache").symlink_to(root / "disk" / "cache")  # a second layer, outside the home
    (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(home)
    master = socket.socket(socket.AF_UNIX)
    master.bind(str(home / "cm"))  # one socket the list would cover
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
        assert layered[1] == "enter" and str(home) in layered, layered
        cut = layered.index("--")
        bare = [*layered[:6], *layered[cut:]]  # the same kept view, no layers
        real_kept = hostview.kept_prefix
        hostview.kept_prefix = lambda *_a, **_k: None  # type: ignore[assignment]
        own = pinned_view(None, host=True, outside=outside)
        assert "own-pts" in own.prefix and str(home) in own.prefix, own.prefix
        real_layers = hostview.run_layers
        hostview.run_layers = lambda *_a, **_k: []  # type: ignore[assignment]
        listed = pinned_view(None, host=True, outside=outside)
        hostview.run_layers, hostview.kept_prefix = real_layers, real_kept  # type: ignore[assignment]
        argvs = {
            "kept layered": (layered, kept.fds),
            "kept bare": (bare, kept.fds),
            "plain": (true, ()),
            "own layered": (own.wrap(true), own.fds),
            "own listed": (listed.wrap(true), listed.fds),
        }
        n = args.runs // 3
        res = interleaved({k: functools.partial(spawn_ms, a, n, f) for k, (a, f) in argvs.items()})
        for view in (kept, own, listed):
            view.close()
        compared(
            "kept view `sh -c true`, home + linked ~/.cache layered per run (vs the same view, no layers)",
            res, "kept layered", "kept bare",
        )  # fmt: skip
        compared(
            "kept view `sh -c true`, layered (vs `sh -c true` spawned plainly)", res, "kept layered", "plain"
        )
        compared(
            "a run's own bwrap, layers made by own-pts (vs the home bound, its sockets listed)",
            res, "own layered", "own listed",
        )  # fmt: skip
        # which directories are layered, found per run (the home's entries read, XDG dirs resolved)
        skip = [str(root / "s")]
        layers_us = per_call_us(lambda: homelayer.layers(str(home), skip), args.runs, 3)
        whole_us = per_call_us(lambda: hostview.view_args(str(root / "s"), outside=outside), 20, 3)
        record(
            "the layers found (homelayer.layers), per run (vs view_args whole)",
            f"{layers_us:.0f} us", f"{whole_us:.0f} us", ratio(layers_us, whole_us),
        )  # fmt: skip
    finally:
        master.close()
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
