"""Principals benchmark: what proving an agent's identity costs per connection (issue 18 §1).

A real `exechost gateway run` daemon in a throwaway state dir with N minted agent credentials; times the
handshake with the gateway token alone (agent main) and with a credential (looked up on disk each time).
Usage: .venv/bin/python bench/bench_principals.py [--agents N] [--connects N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_gateway import FULL, line, start_daemon  # noqa: E402
from engine import principals  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402


async def _connects(state: Path, n: int, credential: str | None) -> list[float]:
    samples: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        client = await ControlClient.connect(state, client="bench", autostart=False, credential=credential)
        samples.append(time.perf_counter() - t0)
        await client.close()
    return samples


async def run(state: Path, agents: int, connects: int) -> None:
    # A credential connects only for an agent [[agents.list]] names; minted once the gateway made its state
    # dir (it refuses one it did not record that already holds its files).
    listed = "".join(f'\n[[agents.list]]\nid = "agent{i}"\n' for i in range(agents))
    proc = start_daemon(state, FULL + listed)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                await (await ControlClient.connect(state, autostart=False)).close()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        tokens = [principals.mint(state, f"agent{i}") for i in range(agents)]
        print(line("handshake, gateway token only (agent main)", await _connects(state, connects, None)))
        last = tokens[-1] if tokens else None
        label = f"handshake with a credential ({agents} on disk)"
        print(line(label, await _connects(state, connects, last)))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--connects", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    state = root / "s"
    state.mkdir(mode=0o700)
    try:
        asyncio.run(run(state, args.agents, args.connects))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
