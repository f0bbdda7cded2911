"""Fresh attacks on principals, ambient authority, per-principal limits and crashes (issues 27, 34)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.protocol import client as client_mod
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config
from tests.helpers.hostile_node import Hostile, event
from tests.helpers.sshd import SshdNode


async def test_ambient_authority_agent_token_in_child_env(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent a's MCP server (EXECHOST_AGENT_TOKEN in its env) autostarts the gateway: the daemon inherits
    that env, and every host command of agent b inherited a's credential — b became a."""
    write_config(state_dir, FULL + listed("a", "b"))
    tok_a = principals.mint(state_dir, "a")
    tok_b = principals.mint(state_dir, "b")
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN", tok_a)
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN_FILE", str(principals.agents_dir(state_dir) / "a.json"))
    async with gateway(state_dir):
        b = await connect(state_dir, "b", operator=False, credential=tok_b)
        try:
            assert b.agent == "b"
            result = await b.request("exec", {"command": "env; echo END-OF-ENV", "timeout": 20})
        finally:
            await b.close()
    text = str(result)
    assert "END-OF-ENV" in text
    assert tok_a not in text
    assert "EXECHOST_AGENT_TOKEN" not in text


def test_ambient_authority_autostart_passes_no_credential(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client that starts the gateway daemon hands it no agent credential of its own."""
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN", "exa_secret-of-agent-a")
    monkeypatch.setenv("EXECHOST_AGENT_TOKEN_FILE", "/somewhere/a.json")
    seen: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            seen.update(kwargs)

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    client_mod.spawn_gateway(state_dir)
    env = seen["env"]
    assert "EXECHOST_AGENT_TOKEN" not in env
    assert "EXECHOST_AGENT_TOKEN_FILE" not in env


async def test_limits_per_principal_event_queues(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event store's queue cap was one number for the whole gateway, evicting the queue written to
    longest ago: agent evil, running background commands under fresh session keys, pushed agent ops's
    undelivered `Exec completed … SECRET` notice out before ops read it. (The cap is scaled down so the
    test runs few commands; the rule is what is attacked, not the number.)"""
    from engine.sessions import events as events_mod

    monkeypatch.setattr(events_mod, "MAX_KEYS", 12)
    monkeypatch.setattr(events_mod, "MAX_KEYS_PER_OWNER", 8, raising=False)
    write_config(state_dir, FULL + listed("ops", "evil"))
    tok_ops = principals.mint(state_dir, "ops")
    tok_evil = principals.mint(state_dir, "evil")
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, "ops", operator=False, credential=tok_ops)
        evil = await connect(state_dir, "evil", operator=False, credential=tok_evil)
        told: list[str] = []
        server.services.events.subscribe(lambda key, _text: told.append(key))
        try:
            await ops.request("exec", {"command": "echo OPS-SECRET", "background": True, "sessionKey": "s1"})
            await wait_until(lambda: len(told) == 1)
            for i in range(16):
                await evil.request("exec", {"command": "echo x", "background": True, "sessionKey": f"k{i}"})
                await wait_until(lambda: len(told) == i + 2)  # noqa: B023 - awaited within the iteration
            got = await ops.request("events", {})
        finally:
            await ops.close()
            await evil.close()
    assert any("OPS-SECRET" in e["text"] for e in got["events"]), got


async def test_limits_per_principal_request_bytes_in_flight(state_dir: Path) -> None:
    """Bytes were capped on the way out, not on the way in: a connection could hold 512 requests of up to
    1 MiB each in flight (a `process poll` waits up to 120 s, and keeps its params, junk included), so one
    agent with 64 connections pinned ~32 GiB of gateway memory. Requests in flight are counted in bytes
    per connection, and past the budget the next one is not read until some finish (nothing is lost)."""
    from runner.gateway import limits

    write_config(state_dir, FULL + listed("evil"))
    tok = principals.mint(state_dir, "evil")
    junk = "j" * (900 * 1024)
    async with gateway(state_dir) as server:
        evil = await connect(state_dir, "evil", operator=False, credential=tok)
        op = await connect(state_dir, "op")
        try:
            started = await evil.request("exec", {"command": "sleep 60", "background": True})
            sid = started["details"]["sessionId"]
            mine = next(c for c in server.connections if c.agent == "evil" and not c.operator)
            polls = [
                asyncio.ensure_future(
                    evil.request(
                        "process", {"action": "poll", "sessionId": sid, "timeout": 60000, "junk": junk}
                    )
                )
                for _ in range(60)
            ]
            await wait_until(lambda: len(mine.tasks) >= 60 or getattr(mine, "intake_full", False), timeout=60)
            held = len(mine.tasks)
            await op.request("process", {"action": "kill", "sessionId": sid, "agentId": "evil"})
            answers = await asyncio.wait_for(asyncio.gather(*polls), 120)
        finally:
            await evil.close()
            await op.close()
    assert held * len(junk) <= getattr(limits, "MAX_REQUEST_BYTES_IN_FLIGHT", 0) + (1 << 20), held
    assert len(answers) == 60  # every request was read and answered once there was room


async def test_compromised_node_takes_another_nodes_name(state_dir: Path, sshd_nodes: list[SshdNode]) -> None:
    """A node's hello says its own display name, and selection matched display names as well as it matched
    the configured names (a tie going to whichever was connected). Compromised node beta said it was
    "alpha": once beta had been used, agent ops's `node=alpha` run (command, env, cwd) went to beta."""
    _alpha, beta = sshd_nodes
    hostile = Hostile(beta, state_dir, node_id="beta-node-id")
    hello = json.loads((beta.root / "hello.json").read_text())
    (beta.root / "hello.json").write_text(json.dumps({**hello, "displayName": "alpha"}))
    config = (state_dir / "config.toml").read_text()
    write_config(
        state_dir, config + '\n[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    tok = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        ops = await connect(state_dir, "ops", operator=False, credential=tok)
        try:
            first = asyncio.ensure_future(ops.request("exec", {"command": "echo via-beta", "node": "beta"}))
            await hostile.answer(await hostile.next_run())
            await asyncio.wait_for(first, 60)
            second = asyncio.ensure_future(
                ops.request(
                    "exec", {"command": "echo ALPHA-ONLY", "node": "alpha", "env": {"TOKEN": "ops-secret"}}
                )
            )
            done = await wait_until(
                lambda: (
                    second.done() or len([f for f in hostile.seen() if f.get("method") == "system.run"]) > 1
                ),
                timeout=60,
            )
            assert done
            runs = [f for f in hostile.seen() if f.get("method") == "system.run"]
            assert len(runs) == 1, runs[1:]
            result = second.result()
        finally:
            await ops.close()
    assert "ALPHA-ONLY" in str(result)


async def test_compromised_node_grows_the_watch_list(state_dir: Path, sshd_nodes: list[SshdNode]) -> None:
    """Every `session.started` a node sends, while a console takes every session's output, put its id in
    the gateway's watch list (and asked the node to push it); nothing but the node's own `session.exited`
    removed it, so a node sending fresh ids grew the gateway's memory without bound. The list keeps at
    most as many of one node's sessions as its byte totals do."""
    from runner.gateway.node_output import MAX_NODE_SESSIONS

    _alpha, beta = sshd_nodes
    hostile = Hostile(beta, state_dir, node_id="beta-node-id")
    config = (state_dir / "config.toml").read_text()
    write_config(state_dir, config + '\n[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n')
    flood = MAX_NODE_SESSIONS + 300
    async with gateway(state_dir) as server:
        op = await connect(state_dir, "op")
        seen: list[str] = []
        op.add_listener(lambda ev: seen.append(ev.event) if ev.event == "session.started" else None)
        try:
            await op.subscribe(["sessions"])
            first = asyncio.ensure_future(op.request("exec", {"command": "echo hi", "node": "beta"}))
            await hostile.answer(await hostile.next_run())
            await asyncio.wait_for(first, 60)
            rows = [
                event("session.started", session={"sessionId": f"s{i}", "command": "x", "status": "running"})
                for i in range(flood)
            ]
            await hostile.inject(*rows)
            await wait_until(lambda: len(seen) >= flood, timeout=60)
            watching = [s for s in server.services.nodes.feed._watching if s.startswith("node:beta:")]
        finally:
            await op.close()
    assert len(watching) <= MAX_NODE_SESSIONS


async def test_crash_loses_another_agents_undelivered_event(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event spool (what survives a crash) kept the queues written to last and trimmed bytes from the
    first-longest queue, whoever owned it: agent evil writing events under fresh keys after ops's left
    ops's undelivered notice off the disk, and the gateway's restart lost it. (Caps scaled down.)"""
    from engine.sessions import spool as spool_mod

    monkeypatch.setattr(spool_mod, "MAX_KEYS", 6)
    write_config(state_dir, FULL + listed("ops", "evil"))
    tok_ops = principals.mint(state_dir, "ops")
    tok_evil = principals.mint(state_dir, "evil")
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, "ops", operator=False, credential=tok_ops)
        evil = await connect(state_dir, "evil", operator=False, credential=tok_evil)
        told: list[str] = []
        server.services.events.subscribe(lambda key, _text: told.append(key))
        try:
            await ops.request("exec", {"command": "echo OPS-SECRET", "background": True, "sessionKey": "s1"})
            await wait_until(lambda: len(told) == 1)
            for i in range(8):
                await evil.request("exec", {"command": "echo x", "background": True, "sessionKey": f"k{i}"})
                await wait_until(lambda: len(told) == i + 2)  # noqa: B023 - awaited within the iteration
        finally:
            await ops.close()
            await evil.close()
    async with gateway(state_dir):  # the next gateway: what the spool kept
        ops = await connect(state_dir, "ops", operator=False, credential=tok_ops)
        try:
            got = await ops.request("events", {})
        finally:
            await ops.close()
    assert any("OPS-SECRET" in e["text"] for e in got["events"]), got


async def test_compromised_node_floods_a_runs_agent_with_starts(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """A run's end is taken once, its start was taken every time: 150 `exec.started` frames for one run of
    agent ops filled ops's queue (100 kept, oldest dropped), pushing out ops's undelivered notices."""
    _alpha, beta = sshd_nodes
    hostile = Hostile(beta, state_dir, node_id="beta-node-id")
    config = (state_dir / "config.toml").read_text()
    write_config(
        state_dir, config + '\n[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    tok = principals.mint(state_dir, "ops")
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, "ops", operator=False, credential=tok)
        told: list[str] = []
        server.services.events.subscribe(lambda key, _text: told.append(key))
        try:
            call = asyncio.ensure_future(ops.request("exec", {"command": "echo hi", "node": "beta"}))
            run = await hostile.next_run()
            run_id = run["params"]["runId"]
            await hostile.inject(*[event("exec.started", runId=run_id) for _ in range(150)])
            await hostile.answer(run)
            await asyncio.wait_for(call, 60)
            await wait_until(lambda: server.services.nodes.dropped >= 149 or len(told) >= 150, timeout=30)
            got = await ops.request("events", {})
        finally:
            await ops.close()
    starts = [e for e in got["events"] if e["text"].startswith("Exec started")]
    assert len(starts) <= 1, len(starts)


async def test_compromised_node_floods_a_key_with_notices(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """A node may tell its runs' agents about their background sessions (`system.event` under a key the
    gateway gave it), but as often as it liked: 150 notices filled agent ops's queue (100 places) and
    pushed out ops's own undelivered events. A node's notices now take at most a few of a queue's places."""
    from runner.gateway import node_limits

    most = getattr(node_limits, "MAX_NODE_EVENTS_PER_KEY", 16)
    _alpha, beta = sshd_nodes
    hostile = Hostile(beta, state_dir, node_id="beta-node-id")
    config = (state_dir / "config.toml").read_text()
    write_config(
        state_dir, config + '\n[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    tok = principals.mint(state_dir, "ops")
    async with gateway(state_dir) as server:
        ops = await connect(state_dir, "ops", operator=False, credential=tok)
        try:
            call = asyncio.ensure_future(ops.request("exec", {"command": "echo hi", "node": "beta"}))
            run = await hostile.next_run()
            notices = [event("system.event", sessionKey="agent:ops", text=f"n{i}") for i in range(150)]
            await hostile.inject(*notices)
            await hostile.answer(run)
            await asyncio.wait_for(call, 60)
            last = "[node beta] n149"
            await wait_until(lambda: last in server.services.events.peek("agent:ops"), timeout=30)
            got = await ops.request("events", {})
        finally:
            await ops.close()
    from_node = [e for e in got["events"] if e["text"].startswith("[node beta]")]
    assert len(from_node) <= most, len(from_node)
