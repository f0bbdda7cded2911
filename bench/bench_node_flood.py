"""A hostile node's flood against a gateway daemon: its RSS before and after (issue 34).

One real loopback sshd runs the hostile node (tests/helpers/hostile_node.py) in place of `exechost`. Agent
evil starts a run there and keeps it in flight; the node then sends, as fast as the channel takes it:
20 system.event frames of 8 MiB for that run (accepted, cut to the cap), 20 exec.finished frames of 8 MiB
naming another agent's key (dropped), 2,000 asks naming no run (refused), 100 asks for the run (8 kept),
and 5,000 small events. The baseline is the same gateway's RSS before the flood, in the same run; after the
flood, evil reads its whole queue (paged) and the time and page count are reported too.

Usage: .venv/bin/python bench/bench_node_flood.py [--big N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from engine import principals  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402
from tests.helpers.daemon import Daemon  # noqa: E402
from tests.helpers.gateway import wait_until  # noqa: E402
from tests.helpers.hostile_node import Hostile, ask, event  # noqa: E402
from tests.helpers.sshd import _keygen, make_node  # noqa: E402

CONFIG = (
    '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
    '[[agents.list]]\nid = "ops"\n[[agents.list]]\nid = "evil"\n'
)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def read_all(client: ControlClient) -> tuple[int, int]:
    """(events, pages) of the caller's whole queue."""
    count = pages = 0
    params: dict[str, object] = {}
    while True:
        page = await client.request("events", params)
        count, pages = count + len(page["events"]), pages + 1
        if page.get("next") is None:
            return count, pages
        params = {"cursor": page["next"]}


async def flood(big: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="ehf-", dir="/tmp"))
    state = root / "s"
    state.mkdir(mode=0o700)
    key = root / "id_ed25519"
    _keygen(key)
    known = root / "known_hosts"
    known.touch(mode=0o600)
    node = make_node(root, "alpha", "127.0.0.2", key, known)
    node.start()
    node.trust()
    daemon = None
    try:
        (state / "config.toml").write_text(CONFIG + node.config_toml())
        hostile = Hostile(node, state)
        evil_token = principals.mint(state, "evil")
        ops_token = principals.mint(state, "ops")
        daemon = Daemon(state).start()
        evil = await ControlClient.connect(state, client="bench", autostart=False, credential=evil_token)
        ops = await ControlClient.connect(state, client="bench", autostart=False, credential=ops_token)
        call = asyncio.ensure_future(
            evil.request("exec", {"command": "echo hi", "node": "alpha", "sessionKey": "s"})
        )
        run = await hostile.next_run()
        run_id, skey = run["params"]["runId"], run["params"]["sessionKey"]
        await hostile.inject(event("system.event", sessionKey=skey, runId=run_id, text="warm"))

        async def warm() -> object:
            return (await evil.request("events"))["events"]

        await wait_until(warm, timeout=30)
        before = rss_kib(daemon.pid)
        text = "B" * (8 << 20)
        started = time.perf_counter()
        for _ in range(big):
            await hostile.inject(event("system.event", sessionKey=skey, runId=run_id, text=text))
            await hostile.inject(
                event("exec.finished", sessionKey="agent:ops:s1", runId="x", exitCode=1, output=text)
            )
        await hostile.inject(*(ask(f"x{i}", None, agentId="ops") for i in range(2000)))
        await hostile.inject(*(ask(f"y{i}", run_id, agentId="ops") for i in range(100)))
        await hostile.inject(
            *(event("system.event", sessionKey=skey, runId=run_id, text=f"e{i}") for i in range(5000))
        )
        await hostile.inject(event("system.event", sessionKey=skey, runId=run_id, text="flood-end"))

        async def ended() -> bool:
            page = await evil.request("events", {"cursor": 0})
            seen = [e["text"] for e in page["events"]]
            while page.get("next") is not None:
                page = await evil.request("events", {"cursor": page["next"]})
                seen += [e["text"] for e in page["events"]]
            return any(t.endswith("flood-end") for t in seen)

        await wait_until(ended, timeout=600, interval=0.2)
        flood_s = time.perf_counter() - started
        after = rss_kib(daemon.pid)
        read_started = time.perf_counter()
        count, pages = await read_all(evil)
        read_ms = (time.perf_counter() - read_started) * 1000
        ops_events = len((await ops.request("events"))["events"])
        await hostile.answer(run)
        await asyncio.wait_for(call, 60)
        for client in (evil, ops):
            await client.close()
        return {
            "before": before / 1024,
            "after": after / 1024,
            "flood_s": flood_s,
            "sent_mib": big * 2 * 8 + 1,
            "events": count,
            "pages": pages,
            "read_ms": read_ms,
            "ops_events": ops_events,
        }
    finally:
        if daemon is not None:
            daemon.stop()
        node.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=20, help="8 MiB frames of each kind (default 20)")
    args, _ = parser.parse_known_args()
    got = asyncio.run(flood(args.big))
    print(json.dumps(got))
    record(
        f"hostile node flood (~{got['sent_mib']:.0f} MiB sent): gateway RSS after vs before",
        f"{got['after']:.0f} MB",
        f"{got['before']:.0f} MB",
        ratio(got["after"], got["before"]),
        "bounded (issue 34: was 48 → 256 MB)",
    )
    record(
        f"after the flood: evil's queue read whole ({got['events']:.0f} events, {got['pages']:.0f} pages)",
        f"{got['read_ms']:.1f} ms",
        goal="pages, never a frame-too-large",
    )
    if got["ops_events"]:
        print(f"!! ops received {got['ops_events']:.0f} event(s) from the hostile node", file=sys.stderr)
        os._exit(1)


if __name__ == "__main__":
    main()
