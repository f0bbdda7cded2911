"""Issue 27 (class 2): a node named its ask's approval id `socket:X`, the id a console socket client's ask
gets, so that client's withdraw of X ended the node's ask (and the two shared one allow-once slot). Each
source now has ids of its own, made by the gateway, never taken from a frame."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.attacks.test_hostile_node import _agents, _setup
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.hostile_node import ask
from tests.helpers.sshd import SshdNode


async def test_a_nodes_approval_id_never_lands_in_the_socket_namespace(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        run = await hostile.next_run()
        frame = ask("n1", run["params"]["runId"])
        frame["params"]["approvalId"] = "socket:victim"
        await hostile.inject(frame)
        manager = server.services.approvals
        pending = await wait_until(lambda: manager.pending() or None, timeout=30)
        ids = {r["nodeApprovalId"] for r in pending[0].requesters}
        assert not any(str(i).startswith("socket:") for i in ids), ids
        operator = await connect(state_dir, "operator")
        # The console's socket client "victim" gives up: only its own asks may end.
        assert (await operator.request("approvals.relay", {"id": "victim", "withdraw": True}))[
            "withdrawn"
        ] == 0
        assert [r.id for r in manager.pending()] == [pending[0].id]
        await hostile.answer(run)
        await asyncio.wait_for(call, 30)
        for client in (ops, evil, operator):
            await client.close()
