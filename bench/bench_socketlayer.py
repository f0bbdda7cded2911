"""What layering a hidden socket's directory costs a gateway-host run (engine.commands.hostroots.
socket_dirs, fresh round 9 y: the gateway's own ssh-agent in a 0700 dir of a world-writable tree, no tree
layer holding it): the kept view's `sh -c true` with that directory a layer of its own, against the same
kept view without it; and the layers found per run (hostview.run_layers) with the socket hidden, against
none hidden. p50 per spawn, three rounds interleaved, same run.

Usage: .venv/bin/python -P bench/bench_socketlayer.py [--runs N]
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
    root = Path(tempfile.mkdtemp(prefix="ehk-", dir="/tmp"))
    (root / "s").mkdir(mode=0o700)
    home = root / "h"
    (home / "work").mkdir(parents=True)
    agent = root / "ssh-AbC"
    agent.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(agent / "agent.1"))
    server.listen(4)
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(home)
    from engine.commands import hostkeeper, hostoutside, hostview
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
        hidden = hostoutside.Outside(writable=(str(home / "work"),), hidden=(str(agent / "agent.1"),))
        plain = hostoutside.Outside(writable=(str(home / "work"),))
        true = ["/bin/sh", "-c", "true"]
        kept = pinned_view(None, host=True, outside=hidden)
        layered = kept.wrap(true)
        assert layered[1] == "enter" and str(agent) in layered, layered
        without = [w for w in layered if w != str(agent)]
        res = interleaved(
            {
                "with": functools.partial(spawn_ms, layered, args.runs // 3, kept.fds),
                "without": functools.partial(spawn_ms, without, args.runs // 3, kept.fds),
            }
        )
        kept.close()
        compared(
            "kept view `sh -c true`, the hidden socket's dir a layer of its own (vs the same view without)",
            res, "with", "without",
        )  # fmt: skip
        state = str(root / "s")
        with_us = per_call_us(lambda: hostview.run_layers(state, hidden, kept=True), args.runs, 3)
        none_us = per_call_us(lambda: hostview.run_layers(state, plain, kept=True), args.runs, 3)
        record(
            "the layers found per run (hostview.run_layers, one socket hidden vs none)",
            f"{with_us:.0f} us", f"{none_us:.0f} us", ratio(with_us, none_us),
        )  # fmt: skip
    finally:
        server.close()
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
