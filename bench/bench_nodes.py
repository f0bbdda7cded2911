"""Node benchmarks: exec `true` on a node over the kept link (node policy included; in-process and through a
`node run` service) against `ssh host true`, ssh with ControlMaster and a raw asyncssh `conn.run('true')`, in
the same run on one real loopback sshd.

Usage: .venv/bin/python bench/bench_nodes.py [--runs N] [--concurrent N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import asyncssh  # noqa: E402

from bench.table import ratio, record  # noqa: E402
from engine.config.model import NodeConfig  # noqa: E402
from engine.nodes.link import NodeLink  # noqa: E402
from tests.helpers.sshd import EXECHOST, SshdNode, _keygen, _user, make_node  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def line(label: str, samples: list[float]) -> str:
    return (
        f"{label:<58} p50 {pct(samples, 0.5):7.2f} ms   p95 {pct(samples, 0.95):7.2f} ms   n={len(samples)}"
    )


def ssh_args(node: SshdNode) -> list[str]:
    return [
        "ssh",
        "-p",
        str(node.port),
        "-i",
        str(node.client_key),
        "-o",
        f"UserKnownHostsFile={node.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        f"{_user()}@{node.addr}",
    ]


def timed_runs(argv: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - started)
    return samples


async def main(runs: int, concurrent: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    client_key = root / "id_ed25519"
    _keygen(client_key)
    known_hosts = root / "known_hosts"
    known_hosts.touch(mode=0o600)
    node = make_node(root, "bench", "127.0.0.2", client_key, known_hosts)
    node.start()
    node.trust()
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(node.state_dir)}
    (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "off"\n')
    subprocess.run(
        [EXECHOST, "approvals", "allowlist", "add", "/usr/bin/true"], env=env, check=True, capture_output=True
    )
    cfg = NodeConfig(
        name="bench",
        host=node.addr,
        port=node.port,
        user=_user(),
        identity_file=str(client_key),
        known_hosts=str(known_hosts),
        exechost=EXECHOST,
    )
    link = NodeLink(cfg)
    try:
        await link.ensure()
        params = {"command": ["/bin/sh", "-lc", "true"], "rawCommand": "true"}
        for _ in range(10):  # warm-up
            assert (await link.call("system.run", params)).ok
        node_samples = []
        for _ in range(runs):
            started = time.perf_counter()
            res = await link.call("system.run", params)
            node_samples.append(time.perf_counter() - started)
            assert res.ok, res.error
        print(line("node exec `true` (kept link, node allowlist policy)", node_samples))

        # The same through a `node run` service: serve --stdio only relays bytes to node.sock.
        service = node.run_service()
        via = NodeLink(cfg)
        try:
            await via.ensure()
            assert via.hello is not None and via.hello.mode == "service"
            for _ in range(10):
                assert (await via.call("system.run", params)).ok
            relayed = []
            for _ in range(runs):
                started = time.perf_counter()
                res = await via.call("system.run", params)
                relayed.append(time.perf_counter() - started)
                assert res.ok, res.error
            print(line("node exec `true` via the `node run` service (relayed)", relayed))
        finally:
            await via.close()
            service.terminate()
            service.wait()

        async with asyncssh.connect(
            node.addr,
            port=node.port,
            username=_user(),
            client_keys=[str(client_key)],
            known_hosts=str(known_hosts),
        ) as conn:
            raw = []
            for _ in range(runs):
                started = time.perf_counter()
                await conn.run("true", check=True)
                raw.append(time.perf_counter() - started)
        print(line("raw asyncssh conn.run('true') (kept connection)", raw))
        record(
            "node exec `true` p50 (vs raw asyncssh conn.run)",
            f"{pct(node_samples, 0.5):.2f} ms",
            f"{pct(raw, 0.5):.2f} ms",
            ratio(pct(node_samples, 0.5), pct(raw, 0.5)),
            "≤ 1.5×",
        )

        plain = timed_runs([*ssh_args(node), "true"], max(5, runs // 10))
        print(line("ssh host true (new connection each time)", plain))
        sock = root / "cm.sock"
        subprocess.run([*ssh_args(node)[:-1], "-M", "-S", str(sock), "-fN", ssh_args(node)[-1]], check=True)
        try:
            cm = timed_runs([*ssh_args(node)[:-1], "-S", str(sock), ssh_args(node)[-1], "true"], runs)
            print(line("ssh -S (ControlMaster) host true", cm))
        finally:
            subprocess.run(["ssh", "-S", str(sock), "-O", "exit", "x"], capture_output=True)

        async def one() -> float:
            started = time.perf_counter()
            res = await link.call("system.run", params)
            assert res.ok, res.error
            return time.perf_counter() - started

        began = time.perf_counter()
        lat = await asyncio.gather(*(one() for _ in range(concurrent)))
        wall = time.perf_counter() - began
        print(line(f"{concurrent} concurrent node execs: latency", list(lat)))
        print(f"{concurrent} concurrent node execs: throughput {concurrent / wall:8.1f} /s")
    finally:
        await link.close()
        node.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=100)
    a = ap.parse_args()
    asyncio.run(main(a.runs, a.concurrent))
