"""A compromised node (issue 34): a script on a real sshd that speaks the node wire itself, steered by the
test through a control socket, against a gateway with two agents, ops and evil."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.hostile_node import Hostile, ask, event
from tests.helpers.sshd import SshdNode

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
AGENTS = (
    '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
    '[[agents.list]]\nid = "ops"\n[[agents.list]]\nid = "evil"\n'
)


async def _agents(state_dir: Path) -> tuple[ControlClient, ControlClient]:
    ops = await connect(state_dir, "ops", operator=False, credential=principals.mint(state_dir, "ops"))
    evil = await connect(state_dir, "evil", operator=False, credential=principals.mint(state_dir, "evil"))
    return ops, evil


def _setup(sshd_nodes: list[SshdNode], state_dir: Path, extra: str = "") -> Hostile:
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)
    hostile = Hostile(sshd_nodes[0], state_dir)
    (state_dir / "config.toml").write_text(AGENTS + extra + (state_dir / "config.toml").read_text())
    return hostile


async def _all_events(client: ControlClient) -> list[dict[str, Any]]:
    """Every event the caller may read, page by page."""
    out: list[dict[str, Any]] = []
    cursor: Any = None
    while True:
        params = {} if cursor is None else {"cursor": cursor}
        page = await client.request("events", params)
        out += page["events"]
        cursor = page.get("next")
        if cursor is None:
            return out


async def test_events_naming_another_agents_key_never_reach_it(
    sshd_nodes: list[SshdNode], state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """exec.finished, system.event and exec.denied naming ops's session key, from a node ops never used:
    nothing reaches ops; what evil's own run sends is filed under evil's key; the rest is logged."""
    hostile = _setup(sshd_nodes, state_dir)
    caplog.set_level(logging.WARNING, "exechost.gateway.nodes")
    async with gateway(state_dir):
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(
            evil.request("exec", {"command": "echo hi", "node": "alpha", "sessionKey": "s1"})
        )
        run = await hostile.next_run()
        run_id = run["params"]["runId"]
        assert run["params"]["sessionKey"] == "agent:evil:s1"
        forged = []
        for rid in (run_id, "no-such-run", None):
            extra = {"runId": rid} if rid is not None else {}
            forged += [
                event(
                    "exec.finished", sessionKey="agent:ops:s1", exitCode=1, output="INJECTED-BY-NODE", **extra
                ),
                event("system.event", sessionKey="agent:ops:s1", text="INJECTED-SYSEVENT", **extra),
                event("exec.denied", sessionKey="agent:ops:s1", command="x", reason="INJECTED-DENY", **extra),
                event("system.event", sessionKey="agent:ops", text="INJECTED-MAIN-KEY", **extra),
                event("system.event", sessionKey="s1", text="INJECTED-PLAIN", **extra),
            ]
        await hostile.inject(*forged)
        await hostile.answer(run)
        assert (await asyncio.wait_for(call, 30))["details"]["status"] == "completed"
        theirs = await _all_events(ops)
        assert not [e for e in theirs if "INJECTED" in e["text"]]
        mine = await _all_events(evil)
        assert mine and {e["sessionKey"] for e in mine} == {"agent:evil:s1"}  # its own run, its own key
        operator = await connect(state_dir, "operator")
        every = await _all_events(operator)
        assert {e["sessionKey"] for e in every} == {"agent:evil:s1"}  # nothing under ops, node-…, or "s1"
        assert "dropped" in caplog.text and "node alpha" in caplog.text
        for client in (ops, evil, operator):
            await client.close()


async def test_asks_filed_as_another_agent_count_against_the_run_that_asked(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """40 asks claiming agent ops: none is filed as ops, asks naming no run of this node are refused, and
    ops's own next ask is not locked out."""
    from engine.approvals.room import MAX_PENDING_PER_AGENT

    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        run = await hostile.next_run()
        run_id = run["params"]["runId"]
        asks = [ask(f"x{i}", None, agentId="ops", sessionKey="agent:ops:s1") for i in range(20)]
        asks += [ask(f"y{i}", run_id, agentId="ops", sessionKey="agent:ops:s1") for i in range(40)]
        await hostile.inject(*asks)
        refused = await wait_until(
            lambda: (
                [a for a in hostile.answers() if a["id"].startswith("x")]
                if len(hostile.answers()) >= 20
                else None
            ),
            timeout=30,
        )
        assert len(refused) == 20 and all(not (a.get("payload") or {}).get("decision") for a in refused)
        pending = server.services.approvals.pending()
        assert pending and all(r.request.agent_id == "evil" for r in pending)
        assert all(r.request.session_key == "agent:evil" for r in pending)
        assert len(pending) <= MAX_PENDING_PER_AGENT
        # ops, on its own run on the gateway, is asked as usual (not `already has 32 approvals waiting`).
        own = await ops.request(
            "exec", {"command": "echo mine", "host": "node", "node": "beta", "ask": "always"}
        )
        assert own["details"]["status"] in ("approval-pending", "completed"), own
        await hostile.answer(run)
        await asyncio.wait_for(call, 30)
        for client in (ops, evil):
            await client.close()


async def test_a_flood_of_huge_events_is_bounded_and_events_still_page(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """20 system.event frames of 8 MiB for the node's own run, then 3,000 small ones: each text is cut to
    the cap, the queue keeps its count cap, and `events` pages instead of failing."""
    from engine.sessions.events import MAX_EVENT_CHARS, MAX_EVENTS_PER_KEY

    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(
            evil.request("exec", {"command": "echo hi", "node": "alpha", "sessionKey": "s1"})
        )
        run = await hostile.next_run()
        run_id, key = run["params"]["runId"], run["params"]["sessionKey"]
        big = "B" * (8 << 20)
        for _ in range(20):
            await hostile.inject(event("system.event", sessionKey=key, runId=run_id, text=big))
        await hostile.inject(
            *(event("system.event", sessionKey=key, runId=run_id, text=f"e{i}") for i in range(3000))
        )
        await hostile.inject(event("system.event", sessionKey=key, runId=run_id, text="last"))
        await wait_until(lambda: "last" in " ".join(server.services.events.peek(key)), timeout=60)
        texts = server.services.events.peek(key)
        assert len(texts) <= MAX_EVENTS_PER_KEY and all(len(t) <= MAX_EVENT_CHARS for t in texts)
        for _ in range(20):  # the big ones again, now to read: still capped, and the read pages
            await hostile.inject(event("system.event", sessionKey=key, runId=run_id, text=big))
        await hostile.inject(event("system.event", sessionKey=key, runId=run_id, text="end"))
        await wait_until(lambda: "end" in " ".join(server.services.events.peek(key)), timeout=60)
        got = await _all_events(evil)
        assert [e["text"] for e in got] == server.services.events.peek(key)
        drained: list[str] = []
        while True:
            page = await evil.request("events", {"drain": True})
            drained += [e["text"] for e in page["events"]]
            if page.get("next") is None:
                break
        assert drained[-1].endswith("end") and server.services.events.peek(key) == []
        assert (await ops.request("events"))["events"] == []
        await hostile.answer(run)
        await asyncio.wait_for(call, 30)
        for client in (ops, evil):
            await client.close()


async def test_frames_for_a_finished_run_are_dropped(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        run = await hostile.next_run()
        run_id, key = run["params"]["runId"], run["params"]["sessionKey"] or "agent:evil"
        await hostile.answer(run)
        await asyncio.wait_for(call, 30)
        before = server.services.events.peek(key)
        await hostile.inject(
            event("exec.finished", sessionKey=key, runId=run_id, exitCode=1, output="LATE"),
            event("exec.denied", sessionKey=key, runId=run_id, command="x", reason="LATE"),
            ask("late", run_id),
        )
        answer = await wait_until(lambda: [a for a in hostile.answers() if a["id"] == "late"], timeout=30)
        assert not (answer[0].get("payload") or {}).get("decision")
        assert server.services.approvals.pending() == []
        assert server.services.events.peek(key) == before
        for client in (ops, evil):
            await client.close()


async def test_frames_for_another_nodes_run_are_dropped(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """ops waits on an ask of its run on beta; alpha sends events and an ask naming that run."""
    hostile = _setup(sshd_nodes, state_dir)
    (sshd_nodes[1].state_dir / "config.toml").write_text(
        '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n'
    )
    async with gateway(state_dir) as server:
        hub = server.services.nodes
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(
            ops.request("exec", {"command": "echo a", "node": "beta", "sessionKey": "s1"})
        )
        [(_, beta_run)] = await wait_until(
            lambda: [(k, r) for k, r in hub._runs.items() if r.records], timeout=60
        )
        await hub.sync()["alpha"].ensure()
        await hostile.inject(
            event(
                "exec.finished", sessionKey="agent:ops:s1", runId=beta_run.run_id, exitCode=1, output="X-NODE"
            ),
            event("system.event", sessionKey="agent:ops:s1", runId=beta_run.run_id, text="X-NODE"),
            ask("steal", beta_run.run_id, agentId="ops", sessionKey="agent:ops:s1"),
        )
        answer = await wait_until(lambda: [a for a in hostile.answers() if a["id"] == "steal"], timeout=30)
        assert not (answer[0].get("payload") or {}).get("decision")
        assert len(server.services.approvals.pending()) == 1 and len(beta_run.records) == 1
        assert not [t for t in server.services.events.peek("agent:ops:s1") if "X-NODE" in t]
        await operator.request("approve", {"id": beta_run.records[0].id, "decision": "deny"})
        assert (await asyncio.wait_for(call, 60))["details"]["status"] == "denied"
        for client in (ops, evil, operator):
            await client.close()


async def test_malformed_and_oversized_fields_are_capped_or_refused(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Asks and events whose fields have the wrong types or huge sizes: refused, or shortened to the caps;
    the ask shows the run's own command beside the node's."""
    from runner.gateway import node_limits

    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        run = await hostile.next_run()
        run_id = run["params"]["runId"]
        huge = {
            "command": "c" * (1 << 20),
            "cwd": "/" + "d" * 100_000,
            "env": {f"K{i}": "v" * 5000 for i in range(1000)},
            "warnings": ["w" * 20_000] * 100,
            "decision": {"nested": [[[[["x" * 100_000]]]]] * 20},
            "agentReason": "r" * 100_000,
            "resolvedPath": "/" + "p" * 100_000,
            "allowedDecisions": ["allow-once"] * 100_000,  # under the 16 MiB frame in all
        }
        await hostile.inject(
            ask("huge", run_id, **huge),
            ask("types", run_id, command=["rm", "-rf"], env=["x"], warnings="w", decision=7),
            event("exec.finished", sessionKey=[1], runId={"x": 1}, exitCode="1", output=["x"]),
            event("system.event", sessionKey=None, runId=None, text={"a": 1}),
        )
        await wait_until(lambda: len(server.services.approvals.pending()) >= 1, timeout=30)
        await asyncio.sleep(0)  # the second ask is read in the same burst
        records = server.services.approvals.pending()
        for record in records:
            req = record.request
            assert len(req.command) <= node_limits.COMMAND_CHARS and len(req.cwd) <= node_limits.PATH_CHARS
            assert len(req.env) <= node_limits.ENV_KEYS
            assert all(len(k) + len(v) <= node_limits.ENV_CHARS for k, v in req.env)
            assert len(req.warnings) <= node_limits.WARNINGS + 1
            assert all(len(w) <= node_limits.WARNING_CHARS for w in req.warnings)
            assert len(json.dumps(req.decision_json)) <= node_limits.DECISION_BYTES
            assert req.agent_reason is None or len(req.agent_reason) <= node_limits.REASON_CHARS
            assert req.agent_id == "evil"
            assert any("echo hi" in w for w in req.warnings)  # the run's own command, beside the node's
        assert server.services.events.keys() == []
        rows: list[dict[str, Any]] = []
        operator.add_listener(lambda ev: rows.append(ev.data) if ev.event == "session.started" else None)
        await operator.request("subscribe", {"topics": ["sessions"]})
        fat = {"sessionId": "s-1", "command": "c" * 1_000_000, "tail": ["t" * 100_000] * 50, "x": {"y": 1}}
        many = {"sessionId": "s-2", **{f"k{i}": i for i in range(10_000)}}
        await hostile.inject(
            event("session.started", session=fat),
            event("session.started", session=many),
            event("session.started", session={"sessionId": "x" * 1000}),
        )
        await wait_until(lambda: len(rows) >= 2, timeout=30)
        assert [r["sessionId"] for r in rows] == ["node:alpha:s-1", "node:alpha:s-2"]
        assert len(json.dumps(rows)) < 64 * 1024 and "x" not in rows[0]
        for record in records:
            await operator.request("approve", {"id": record.id, "decision": "deny"})
        await hostile.answer(run)
        await asyncio.wait_for(call, 30)
        # A line that is not JSON, then one longer than the frame ceiling: the link drops, the gateway lives.
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        await hostile.next_run()
        await hostile.inject(b"{not json\n")
        with pytest.raises(RemoteError, match="link lost"):
            await asyncio.wait_for(call, 30)
        ok = await ops.request("exec", {"command": "echo fine", "node": "beta"})
        assert ok["text"].splitlines()[0] == "fine"
        for client in (ops, evil, operator):
            await client.close()


async def test_an_oversized_frame_drops_only_that_link(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    from engine.nodes.wire import MAX_LINE

    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir):
        ops, evil = await _agents(state_dir)
        call = asyncio.ensure_future(evil.request("exec", {"command": "echo hi", "node": "alpha"}))
        await hostile.next_run()
        await hostile.inject(
            b'{"type":"event","event":"system.event","payload":{"text":"' + b"x" * (MAX_LINE + 10)
        )
        with pytest.raises(RemoteError, match="link lost"):
            await asyncio.wait_for(call, 60)
        ok = await ops.request("exec", {"command": "echo fine", "node": "beta"})
        assert ok["text"].splitlines()[0] == "fine"
        for client in (ops, evil):
            await client.close()


async def test_a_second_link_claiming_another_nodes_id_is_refused(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """alpha's hello presents beta's node id: refused at its hello (nothing it sends is read), while beta
    is connected and, the id being pinned to beta, while beta is down too."""
    hostile = _setup(sshd_nodes, state_dir)
    async with gateway(state_dir) as server:
        ops, evil = await _agents(state_dir)
        await ops.request("exec", {"command": "true", "node": "beta"})
        beta_id = server.services.nodes.links["beta"].hello.node_id
        hostile.hello(beta_id)
        with pytest.raises(RemoteError, match="claims node id"):
            await evil.request("exec", {"command": "true", "node": "alpha"})
        alpha = server.services.nodes.links["alpha"]
        assert alpha.state == "down" and "claims node id" in (alpha.last_error or "")
        assert [n["nodeId"] for n in server.services.nodes.status() if n["name"] == "alpha"] == [None]
        for client in (ops, evil):
            await client.close()
    # A later gateway, beta not connected (down, or not dialled yet): its id stays beta's.
    async with gateway(state_dir) as server:
        evil = await connect(state_dir, "evil", operator=False, credential=principals.mint(state_dir, "evil"))
        with pytest.raises(RemoteError, match="claims node id"):
            await evil.request("exec", {"command": "true", "node": "alpha"})
        assert server.services.nodes.links["beta"].state == "down"
        await evil.close()


async def test_main_reads_no_ownerless_key(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Issue 27 §1: agent main (the bare gateway token) received ops's node session output and drained its
    node events, filed under keys with no owner. Every key now names its owner; ownerless ones are the
    operator's."""
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(AGENTS + (state_dir / "config.toml").read_text())
    assert not principals.owns_key("main", "node-abc")
    assert not principals.owns_key("main", "\x00unknown")
    assert not principals.owns_key("main", "s1")
    assert principals.owns_key("main", "agent:main:s1")
    assert principals.own_key("main", "s1") == "agent:main:s1"
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, "ops", operator=False, credential=principals.mint(state_dir, "ops"))
        main = await connect(state_dir, "main", operator=False)
        seen: list[Any] = []
        main.add_listener(seen.append)
        await main.request("subscribe", {"topics": ["sessions", "events"]})
        started = await ops.request(
            "exec", {"command": "echo SECRET-OUT; exit 3", "node": "beta", "background": True}
        )
        sid = started["details"]["sessionId"]
        await ops.request("exec", {"command": "echo SECRET-FINISH; exit 1", "node": "beta"})
        await wait_until(
            lambda: [k for k in server.services.events.keys() if k.startswith("agent:ops")],  # noqa: SIM118
            timeout=30,
        )
        assert (await main.request("events"))["events"] == []
        assert (await main.request("events", {"drain": True}))["events"] == []
        listed = await main.request("sessions.list")
        assert sid not in [r["sessionId"] for r in listed["sessions"]]
        await main.request("exec", {"command": "echo mine", "node": "beta", "sessionKey": "s1"})
        assert all(k.startswith("agent:") for k in server.services.events.keys())  # noqa: SIM118
        assert "SECRET" not in json.dumps([getattr(e, "data", None) for e in seen])
        for client in (ops, main):
            await client.close()


async def test_the_operator_can_make_a_bare_token_nobody(state_dir: Path) -> None:
    """`[gateway] anonymous = "none"`: a connection that presents no credential (a credentialed agent that
    left its token out) is refused instead of becoming agent main."""
    (state_dir / "config.toml").write_text(
        '[gateway]\nanonymous = "none"\n[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
        '[[agents.list]]\nid = "ops"\n'
    )
    async with gateway(state_dir):
        with pytest.raises(RemoteError, match="present an agent credential"):
            await connect(state_dir, "bare", operator=False)
        ops = await connect(state_dir, "ops", operator=False, credential=principals.mint(state_dir, "ops"))
        assert (await ops.request("exec", {"command": "echo ok"}))["text"].startswith("ok")
        operator = await connect(state_dir, "operator")
        await operator.request("status")
        for client in (ops, operator):
            await client.close()


async def test_an_agent_uses_only_the_nodes_it_is_given(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """`[[agents.list]] nodes = ["beta"]`: ops cannot run on, list, or read sessions of alpha, and alpha's
    frames for ops's key (from a run of ops's before the change) are dropped."""
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
        '[[agents.list]]\nid = "ops"\nnodes = ["beta"]\n' + (state_dir / "config.toml").read_text()
    )
    async with gateway(state_dir):
        ops = await connect(state_dir, "ops", operator=False, credential=principals.mint(state_dir, "ops"))
        with pytest.raises(RemoteError, match="may not use node alpha"):
            await ops.request("exec", {"command": "true", "node": "alpha"})
        ok = await ops.request("exec", {"command": "echo fine", "node": "beta"})
        assert ok["text"].splitlines()[0] == "fine"
        with pytest.raises(RemoteError, match="may not use node alpha"):
            await ops.request("process", {"action": "list", "node": "alpha"})
        listed = await ops.request("process", {"action": "list"})
        assert all(r.get("node") != "alpha" for r in listed["details"].get("sessions") or [])
        await ops.close()
