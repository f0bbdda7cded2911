"""SIGKILL with the pending asks spread over a snapshot and its journal (a compaction happened mid-way):
every ask still waiting comes back once, nothing denied or run comes back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine.approvals.durable import COMPACT_MIN_BYTES, JOURNAL_SUFFIX, PENDING_NAME
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, cli, connect, write_config


async def test_asks_across_a_compaction_survive_sigkill(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    with Daemon(state_dir) as daemon:
        approver = await connect(state_dir, "op")
        await approver.request("approvals.attach")

        answers: set[asyncio.Future[dict]] = set()

        def deny(event: tuple[str, dict]) -> None:
            name, data = event
            if name == "approval.requested" and "denied-" in data["command"]:
                answer = asyncio.ensure_future(
                    approver.request("approve", {"id": data["id"], "decision": "deny"})
                )
                answers.add(answer)
                answer.add_done_callback(answers.discard)

        approver.add_listener(deny)
        agent = await connect(state_dir, "agent", operator=False)
        journal = state_dir / (PENDING_NAME + JOURNAL_SUFFIX)
        n = 0
        written = 0
        # Until the journal was folded into the snapshot at least once (it shrank), and then some.
        while n < 2000:
            res = await agent.request("exec", {"command": f"echo denied-{n}", "agentId": "main"})
            assert res["details"]["status"] == "denied", res
            n += 1
            size = journal.stat().st_size
            if size < written:
                break
            written = size
        assert n < 2000 and written > COMPACT_MIN_BYTES // 2
        await approver.close()  # no approver: the next asks wait, reported pending
        waiting = []
        for k in range(3):
            res = await agent.request("exec", {"command": f"echo waiting-{k}", "agentId": "main"})
            assert res["details"]["status"] == "approval-pending", res
            waiting.append(res["details"]["approvalId"])
        await agent.close()
        daemon.restart()  # SIGKILL, then a new gateway
        rows = json.loads(cli(state_dir, "approvals", "pending", "--json").stdout)["details"]["approvals"]
        assert sorted(r["id"] for r in rows) == sorted(waiting)
        assert all(r["command"].startswith("echo waiting-") for r in rows)
