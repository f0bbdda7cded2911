"""Node session output to a console: the time from a line printed on the node to its `session.output` frame
at a following console connection (pushed through the gateway's fan-out; the console used to poll every
0.25 s), on one real loopback sshd.

Usage: .venv/bin/python bench/bench_node_output.py [--lines N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.protocol.frames import Event  # noqa: E402
from tests.helpers.gateway import connect, gateway, wait_until  # noqa: E402
from tests.helpers.sshd import _keygen, make_node  # noqa: E402


async def main(lines: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    state = root / "gw"
    state.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    client_key = root / "id_ed25519"
    _keygen(client_key)
    known_hosts = root / "known_hosts"
    known_hosts.touch(mode=0o600)
    node = make_node(root, "bench", "127.0.0.2", client_key, known_hosts)
    node.start()
    node.trust()
    (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    (state / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n' + node.config_toml()
    )
    fifo = node.root / "lines"
    os.mkfifo(fifo)
    try:
        async with gateway(state):
            agent = await connect(state, "agent", operator=False)
            res = await agent.request(
                # Held open read-write: the loop never sees EOF between the bench's writes (none is lost).
                "exec",
                {"command": f'exec 3<> {fifo}; while read -r x <&3; do echo "L$x"; done', "background": True},
            )
            sid = res["details"]["sessionId"]
            console = await connect(state, "console")
            seen: dict[str, float] = {}

            def on(ev: Event) -> None:
                if ev.event == "session.output" and ev.data.get("sessionId") == sid:
                    for word in str(ev.data.get("data") or "").split():
                        seen.setdefault(word, time.perf_counter())

            console.add_listener(on)
            await console.subscribe(["sessions"])
            await console.request("sessions.follow", {"sessionId": sid, "only": True})
            await asyncio.sleep(0.5)  # the node's watch is in place
            samples = []
            for i in range(lines):
                started = time.perf_counter()
                await asyncio.to_thread(fifo.write_text, f"{i}\n")
                await wait_until(lambda i=i: f"L{i}" in seen, timeout=10, interval=0.001)
                samples.append(seen[f"L{i}"] - started)
            samples.sort()
            p50 = samples[len(samples) // 2] * 1000
            p95 = samples[min(len(samples) - 1, int(0.95 * len(samples)))] * 1000
            print(f"node line → console frame (pushed)   p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   n={lines}")
            print("before: the console polled sessions.output every 250 ms (mean wait 125 ms + a round trip)")
            await agent.request("process", {"action": "kill", "sessionId": sid})
            await console.close()
            await agent.close()
    finally:
        node.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=50)
    asyncio.run(main(parser.parse_args().lines))
