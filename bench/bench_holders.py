"""What holding sessions costs: sequential `exec echo hi` against a real daemon, with and without holders.

Usage: python bench/bench_holders.py [N]   (prints the median and p90 per exec for both)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.protocol.client import ControlClient  # noqa: E402
from engine.protocol.frames import socket_path  # noqa: E402
from engine.unixsock import socket_is_live  # noqa: E402

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


async def measure(holders: bool, n: int) -> list[float]:
    state = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp")) / "s"
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text(CONFIG)
    os.chmod(state / "config.toml", 0o600)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state)}
    env["EXECHOST_SESSION_HOLDERS"] = "1" if holders else "0"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "runner", "gateway", "run"], env=env, cwd=str(REPO), stderr=subprocess.DEVNULL
    )
    try:
        while not socket_is_live(socket_path(state)):
            await asyncio.sleep(0.05)
        client = await ControlClient.connect(state, autostart=False)
        times = []
        for _ in range(n + 10):
            start = time.perf_counter()
            result = await client.request("exec", {"command": "echo hi", "agentId": "main"})
            times.append((time.perf_counter() - start) * 1000)
            assert result["details"]["status"] == "completed", result
        await client.close()
        return times[10:]  # warm-up dropped
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(state.parent, ignore_errors=True)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    for holders in (False, True):
        times = sorted(asyncio.run(measure(holders, n)))
        print(
            f"holders={'on ' if holders else 'off'}: median {statistics.median(times):.1f} ms, "
            f"p90 {times[int(len(times) * 0.9)]:.1f} ms per `exec echo hi` ({n} runs)"
        )


if __name__ == "__main__":
    main()
