"""What holding sessions costs: exec `true` through a real daemon with and without the session host (vs
subprocess.run), and what each idle background session costs the host (fds, RSS) and the gateway (RSS).

Usage: python bench/bench_holders.py [--runs N] [--idle N] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402
from engine.protocol.frames import socket_path  # noqa: E402
from engine.unixsock import socket_is_live  # noqa: E402

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


def p50(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2] * 1000


class Daemon:
    def __init__(self, host: bool) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
        self.state = self.root / "s"
        self.state.mkdir(mode=0o700)
        (self.state / "config.toml").write_text(CONFIG)
        os.chmod(self.state / "config.toml", 0o600)
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(self.state), "PYTHONPATH": str(REPO)}
        env["EXECHOST_SESSION_HOLDERS"] = "1" if host else "0"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "gateway", "run"],
            env=env,
            cwd=str(REPO),
            stderr=subprocess.DEVNULL,
        )

    async def connect(self) -> ControlClient:
        while not socket_is_live(socket_path(self.state)):
            await asyncio.sleep(0.05)
        return await ControlClient.connect(
            self.state, autostart=False, operator=True, client="bench", name="b"
        )

    async def stop(self, client: ControlClient) -> None:
        with_sessions = {"killSessions": True}
        with contextlib.suppress(Exception):  # the daemon may close the connection as it goes
            await client.request("shutdown", with_sessions)
        await client.close()
        self.proc.wait(timeout=120)
        shutil.rmtree(self.root, ignore_errors=True)


async def exec_true(host: bool, runs: int) -> list[float]:
    daemon = Daemon(host)
    client = await daemon.connect()
    try:
        for _ in range(20):
            await client.request("exec", {"command": "true"})
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            result = await client.request("exec", {"command": "true"})
            times.append(time.perf_counter() - start)
            assert result["details"]["status"] == "completed", result
        return times
    finally:
        await daemon.stop(client)


def baseline(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["true"], check=True)
        times.append(time.perf_counter() - start)
    return times


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def idle_sessions(n: int) -> dict[str, float]:
    daemon = Daemon(True)
    client = await daemon.connect()
    try:
        await client.request("exec", {"command": "true"})  # warm
        host = (await client.request("status"))["sessionHost"]["pid"]
        gw = daemon.proc.pid
        before = (_fds(host), _rss_kib(host), _rss_kib(gw), _fds(gw))
        started = 0
        refused = ""
        for first in range(0, n, 50):
            batch = [
                client.request("exec", {"command": "exec sleep 3600", "background": True})
                for _ in range(first, min(n, first + 50))
            ]
            for res in await asyncio.gather(*batch):
                if res["details"]["status"] == "running":
                    started += 1
                elif not refused:
                    refused = res["text"][:300]
        if refused:
            print(f"{n - started} session(s) not started, e.g.: {refused}")
        await asyncio.sleep(1)
        # Past one host's open-file limit the sessions go to more hosts (engine.sessions.hosts): a host
        # started for them counts whole (its own baseline included) against the sessions.
        rows = (await client.request("status"))["sessionHost"]["hosts"]
        more = [r["pid"] for r in rows if r["pid"] != host]
        print(f"{started} sessions in {len(rows)} session host(s): {[r['sessions'] for r in rows]}")
        after = (
            sum(_fds(p) for p in [host, *more]),
            sum(_rss_kib(p) for p in [host, *more]),
            _rss_kib(gw),
            _fds(gw),
        )
        return {
            "hosts": len(rows),
            "sessions": started,
            "host_fds": (after[0] - before[0]) / started,
            "host_kib": (after[1] - before[1]) / started,
            "gateway_kib": (after[2] - before[2]) / started,
            "gateway_fds": after[3] - before[3],
        }
    finally:
        await daemon.stop(client)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hosted, plain, base, idle = [], [], [], []
    for _ in range(args.repeats):  # interleaved, so load changes hit all three alike
        hosted.append(p50(await exec_true(True, args.runs)))
        plain.append(p50(await exec_true(False, args.runs)))
        base.append(p50(baseline(args.runs)))
    for _ in range(args.repeats if args.idle else 0):
        idle.append(await idle_sessions(args.idle))
    fmt = " / ".join
    print(f"exec `true` p50, session host:   {fmt(f'{t:.2f} ms' for t in hosted)}")
    print(f"exec `true` p50, plain children: {fmt(f'{t:.2f} ms' for t in plain)}")
    print(f"subprocess.run(['true']) p50:    {fmt(f'{t:.2f} ms' for t in base)}")
    record(
        "exec `true` p50 through the daemon's session host (vs subprocess.run)",
        fmt(f"{t:.2f} ms" for t in hosted),
        fmt(f"{t:.2f} ms" for t in base),
        fmt(ratio(h, b) for h, b in zip(hosted, base, strict=True)),
        "≤ 1.2 ms and ≤ 1.6×",
    )
    for row in idle:
        print(
            f"{row['sessions']:.0f} idle sessions in {row['hosts']:.0f} host(s): "
            f"{row['host_fds']:.2f} fds and "
            f"{row['host_kib']:.1f} KiB each, gateway {row['gateway_kib']:.1f} KiB each and "
            f"{row['gateway_fds']:.0f} fds in all"
        )
    if idle:
        record(
            f"idle background sessions ({args.idle}): running, hosts, fds and host+gateway RSS each",
            fmt(
                f"{r['sessions']:,.0f} in {r['hosts']:.0f} host(s), {r['host_fds']:.2f} fds, "
                f"{r['host_kib'] + r['gateway_kib']:.1f} KiB"
                for r in idle
            ),
            "—",
            "—",
            "≤ 2 fds, ≤ 100 KB",
        )


if __name__ == "__main__":
    asyncio.run(main())
