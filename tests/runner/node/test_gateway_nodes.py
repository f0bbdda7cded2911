"""host=node through a real gateway and real sshd nodes: the node's own policy, relayed asks, events."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from engine import principals
from engine.protocol.frames import RemoteError
from tests.helpers.gateway import connect, gateway, listed, wait_until
from tests.helpers.sshd import EXECHOST, SshdNode

GATEWAY_FULL = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


def gateway_config(state_dir: Path, nodes: list[SshdNode], exec_table: str) -> None:
    (state_dir / "config.toml").write_text(exec_table + "".join(n.config_toml() for n in nodes))


def node_cli(node: SshdNode, *args: str) -> None:
    """The node operator's own CLI, in the node's own state dir."""
    env = {"OPENCLAW_STATE_DIR": str(node.state_dir), "PATH": "/usr/bin:/bin", "HOME": str(node.root)}
    subprocess.run([EXECHOST, *args], env=env, check=True, capture_output=True)


async def test_allowlisted_command_on_a_node_runs(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "off"\n')
    node_cli(alpha, "approvals", "allowlist", "add", "/usr/bin/printf")
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        ok = await agent.request("exec", {"command": "/usr/bin/printf 'on %s' node", "node": "alpha"})
        assert ok["text"] == "on node\n(ran on: node alpha)" and ok["details"]["ranOn"] == "node alpha"
        assert ok["details"]["host"] == "node" and ok["details"]["node"] == "alpha"
        assert ok["details"]["exitCode"] == 0
        # A miss on the node, with ask=off there: denied by the node, with its reason.
        with pytest.raises(RemoteError, match="SYSTEM_RUN_DENIED"):
            await agent.request("exec", {"command": "/usr/bin/id", "node": "alpha"})
        await agent.close()
    # The use is recorded on the node, in the node's file (off the node's loop, a moment after the run).
    approvals = alpha.state_dir / "exec-approvals.json"
    for _ in range(250):
        entries = json.loads(approvals.read_text())["agents"]["*"]["allowlist"]
        if entries[0].get("lastUsedAt"):
            break
        await asyncio.sleep(0.02)
    assert entries[0].get("lastUsedAt")


async def test_node_policy_tighter_than_the_gateways_wins(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha, beta = sshd_nodes
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "deny"\n')
    (beta.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        with pytest.raises(RemoteError, match=r"SYSTEM_RUN_DENIED: .*security=deny"):
            await agent.request("exec", {"command": "echo nope", "node": "alpha"})
        ok = await agent.request("exec", {"command": "echo yes", "node": "beta"})
        assert ok["text"].splitlines()[0] == "yes"
        await agent.close()


async def test_gateway_policy_tighter_than_the_nodes_wins(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    beta = sshd_nodes[1]
    (beta.state_dir / "config.toml").write_text(NODE_FULL)
    subprocess.run(
        [EXECHOST, "approvals", "allowlist", "add", "/usr/bin/id"], check=True, capture_output=True
    )
    gateway_config(
        state_dir, sshd_nodes, '[tools.exec]\nhost = "node"\nsecurity = "allowlist"\nask = "off"\n'
    )
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        # The gateway's own allowlist passes it; its security=allowlist rides along, and the node (full
        # itself) may not broaden that: the node's (empty) allowlist decides there.
        with pytest.raises(RemoteError, match="SYSTEM_RUN_DENIED"):
            await agent.request("exec", {"command": "/usr/bin/id -u", "node": "beta"})
        await agent.close()
        assert server.services.nodes.links["beta"].state == "connected"
    gateway_config(state_dir, sshd_nodes, '[tools.exec]\nhost = "node"\nsecurity = "deny"\n')
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        with pytest.raises(RemoteError, match="security=deny"):
            await agent.request("exec", {"command": "echo x", "node": "beta"})
        await agent.close()
        assert all(link.state == "down" for link in server.services.nodes.links.values())  # never dialled


async def test_node_ask_is_relayed_and_bound_to_its_node(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    beta = sshd_nodes[1]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        # One command for both; its marker is the node's own, beside its HOME (read-only to its commands).
        command = 'touch "$HOME-ran"; echo from-a'
        on_a = asyncio.ensure_future(agent.request("exec", {"command": command, "node": "alpha"}))
        on_b = asyncio.ensure_future(agent.request("exec", {"command": command, "node": "beta"}))
        pending = await wait_until(
            lambda: len(server.services.approvals.pending()) == 2 and server.services.approvals.pending()
        )
        ids = {link.name: link.hello.node_id for link in server.services.nodes.links.values() if link.hello}
        by_node = {r.request.node_id: r for r in pending}
        assert set(by_node) == {ids["alpha"], ids["beta"]}  # same command, two asks: never coalesced
        assert all(r.request.host == "node" for r in pending)
        # Each ask names the node-side approval it answers in its own field; env_hash is a real env hash.
        assert len({r.request.node_approval_id for r in pending}) == 2 and all(
            r.request.node_approval_id and len(r.request.env_hash) == 64 for r in pending
        )
        assert {r.view()["nodeApprovalId"] for r in pending} == {r.request.node_approval_id for r in pending}
        await operator.request("approve", {"id": by_node[ids["alpha"]].id, "decision": "allow-once"})
        done_a = await on_a
        assert done_a["text"].splitlines()[0] == "from-a" and done_a["details"]["node"] == "alpha"
        await asyncio.sleep(0.3)
        assert not on_b.done()  # A's approval ran on A only
        await operator.request("approve", {"id": by_node[ids["beta"]].id, "decision": "deny"})
        denied = await on_b
        assert denied["details"]["status"] == "denied" and denied["details"]["reason"] == "user-denied"
        await agent.close()
        await operator.close()
    assert Path(f"{sshd_nodes[0].root}-ran").exists() and not Path(f"{beta.root}-ran").exists()


async def test_no_approver_means_pending_in_the_inbox(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Issue 22: without any approver the node's ask waits in the gateway's inbox (it used to fall back to
    approval-timeout at once); the agent is answered approval-pending and the result follows as an event."""
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text(
        '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n'
    )
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        res = await agent.request("exec", {"command": "echo hi", "node": "alpha", "sessionKey": "s9"})
        assert res["details"]["status"] == "approval-pending"
        [record] = server.services.approvals.pending()
        assert record.id == res["details"]["approvalId"] and record.request.host == "node"
        operator = await connect(state_dir, "operator")
        await operator.request("approve", {"id": record.id, "decision": "allow-once"})
        events = await wait_until(lambda: server.services.events.peek("agent:main:s9"), timeout=30)
        assert events == [f"Exec finished (node=alpha gateway id={record.id}, code 0)\nhi"]
        await agent.close()
        await operator.close()


async def test_fifty_concurrent_commands_across_two_nodes(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        jobs = [(i, sshd_nodes[i % 2].name) for i in range(50)]
        results = await asyncio.gather(
            *(
                agent.request("exec", {"command": f'echo "{name}-{i}-$HOME"', "node": name})
                for i, name in jobs
            )
        )
        by_name = {n.name: n for n in sshd_nodes}
        for (i, name), res in zip(jobs, results, strict=True):
            # each node's own HOME (its login's): host runs inherit no exechost variable
            assert res["text"].splitlines()[0] == f"{name}-{i}-{by_name[name].root}"
            assert res["details"]["node"] == name
        await agent.close()


async def test_lifecycle_events_use_the_reference_texts(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        res = await agent.request(
            "exec", {"command": "echo out; exit 3", "node": "alpha", "sessionKey": "s1"}
        )
        assert res["details"]["exitCode"] == 3
        run_id = res["details"]["runId"]
        events = await wait_until(lambda: server.services.events.peek("agent:main:s1"))
        # The reference's shape with the node's name where it puts the id (issue 30: names everywhere; the
        # parenthesised part stays free of `)`, so OpenClaw's follow-up regexes still parse it).
        assert f"Exec finished (node=alpha id={run_id}, code 3)\nout" in events
        await agent.close()


async def test_background_session_on_a_node(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A background run on a node, then poll, write, log, kill and list through the gateway's `process`."""
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL + listed("ops"))
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        started = await agent.request(
            "exec",
            {"command": "echo up; read line; echo got-$line; sleep 30", "node": "alpha", "background": True},
        )
        sid = started["details"]["sessionId"]
        assert started["details"]["status"] == "running" and sid.startswith("node:alpha:")
        assert sid in started["text"]
        await agent.request("process", {"action": "write", "sessionId": sid, "data": "hello\n"})
        log = await wait_until(lambda: _log_has(agent, sid, "got-hello"), timeout=15)
        assert "up" in log
        shown = await agent.request("process", {"action": "list", "node": "alpha"})
        assert [s["sessionId"] for s in shown["details"]["sessions"]] == [sid]
        # Without node=, the list merges this gateway's sessions with every connected node's.
        merged = await agent.request("process", {"action": "list"})
        assert [(s["sessionId"], s["node"]) for s in merged["details"]["sessions"]] == [(sid, "alpha")]
        assert sid in merged["text"]
        killed = await agent.request("process", {"action": "kill", "sessionId": sid})
        assert killed["details"]["sessionId"] == sid
        with pytest.raises(RemoteError, match="No session found"):
            await agent.request("process", {"action": "poll", "sessionId": "node:gamma:x"})
        # Another agent (its own credential) does not see it, nor reach it by id.
        principals.mint(state_dir, "ops")
        ops = await connect(state_dir, "ops", operator=False, agent="ops")
        other = await ops.request("process", {"action": "list", "node": "alpha"})
        assert other["details"]["sessions"] == []
        await ops.close()
        await agent.close()


async def _log_has(agent: object, sid: str, needle: str) -> str | None:
    res = await agent.request("process", {"action": "log", "sessionId": sid})  # type: ignore[attr-defined]
    text = str(res["text"])
    return text if needle in text else None


async def test_pty_session_on_a_node(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """pty=true on a node: a real terminal there; send-keys, paste and write reach it through `process`."""
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        fg = await agent.request(
            "exec", {"command": "test -t 0 && test -t 1 && echo tty-yes", "node": "alpha", "pty": True}
        )
        assert fg["text"].splitlines()[0] == "tty-yes"
        started = await agent.request(
            "exec",
            {
                "command": 'echo ready; read -r a; echo "keys:$a"; read -r b; echo "paste:$b"; '
                'read -r c; echo "write:$c"; sleep 30',
                "node": "alpha",
                "background": True,
                "pty": True,
            },
        )
        sid = started["details"]["sessionId"]
        await wait_until(lambda: _log_has(agent, sid, "ready"), timeout=15)
        await agent.request(
            "process", {"action": "send-keys", "sessionId": sid, "literal": "hi", "keys": ["Enter"]}
        )
        await wait_until(lambda: _log_has(agent, sid, "keys:hi"), timeout=15)
        await agent.request(
            "process", {"action": "paste", "sessionId": sid, "text": "pasted\r", "bracketed": False}
        )
        await wait_until(lambda: _log_has(agent, sid, "paste:pasted"), timeout=15)
        await agent.request("process", {"action": "write", "sessionId": sid, "data": "raw\r"})
        await wait_until(lambda: _log_has(agent, sid, "write:raw"), timeout=15)
        listed = await agent.request("process", {"action": "list", "node": "alpha"})
        assert [s.get("pty") for s in listed["details"]["sessions"] if s["sessionId"] == sid] == [True]
        # ^C goes through the node's line discipline: the shell dies of SIGINT.
        await agent.request("process", {"action": "send-keys", "sessionId": sid, "keys": ["C-c"]})
        polled = await wait_until(lambda: _exited(agent, sid), timeout=15)
        assert polled["details"]["status"] != "running"
        await agent.close()


async def _exited(agent: object, sid: str) -> dict[str, object] | None:
    res = await agent.request("process", {"action": "poll", "sessionId": sid})  # type: ignore[attr-defined]
    return res if res["details"].get("status") != "running" else None


async def test_node_down_mid_command_then_back(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """sshd dies under a running command: the agent gets a clear error; after a restart the same gateway
    reaches the node again without anyone touching it."""
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        running = asyncio.ensure_future(agent.request("exec", {"command": "sleep 30", "node": "alpha"}))
        link = await wait_until(lambda: server.services.nodes.links.get("alpha"))
        await wait_until(lambda: link.status()["calls"].get("system.run") == 1)
        alpha.stop()
        with pytest.raises(RemoteError, match=r"node alpha: link lost .*outcome on the node is unknown"):
            await running
        alpha.start()
        await wait_until(lambda: link.state == "connected", timeout=30)
        ok = await agent.request("exec", {"command": "echo again", "node": "alpha"})
        assert ok["text"].splitlines()[0] == "again"
        await agent.close()


def test_version_mismatch_names_what_to_install(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    script = alpha.root / "future-exechost"
    hello = {
        "type": "hello",
        "protocol": 99,
        "nodeId": "n",
        "displayName": "n",
        "version": "9.0",
        "platform": "linux",
        "caps": [],
        "pathEnv": "",
    }
    script.write_text(f"#!/bin/sh\necho '{json.dumps(hello)}'\ncat >/dev/null\n")
    script.chmod(0o700)
    text = (
        (state_dir / "config.toml")
        .read_text()
        .replace(f'exechost = "{EXECHOST}"', f'exechost = "{script}"', 1)
    )
    (state_dir / "config.toml").write_text(text)
    proc = subprocess.run([EXECHOST, "nodes", "ping", "alpha"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "exechost 9.0 there speaks node protocol 99, this gateway speaks 2" in proc.stdout
    assert "install the same exechost version on the node" in proc.stdout


async def test_nodes_status_over_the_control_socket(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    beta = sshd_nodes[1]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    beta.stop()
    async with gateway(state_dir):
        client = await connect(state_dir, "console")
        before = (await client.request("nodes.status"))["nodes"]
        assert [(n["name"], n["state"]) for n in before] == [("alpha", "down"), ("beta", "down")]
        after = {n["name"]: n for n in (await client.request("nodes.status", {"ping": True}))["nodes"]}
        assert (
            after["alpha"]["state"] == "connected"
            and after["alpha"]["rttMs"] > 0
            and after["alpha"]["nodeId"]
        )
        assert after["beta"]["state"] == "down" and "cannot connect" in after["beta"]["lastError"]
        await client.close()


async def test_a_console_on_the_node_is_asked_first(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """The node operator's own console (on the node's exec-approvals.sock) answers before the gateway."""
    from engine.approvals.socket.server import ApprovalSocketServer
    from engine.approvals.socket.wire import PromptRequest
    from engine.approvals.store import ApprovalsStore

    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, GATEWAY_FULL)
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    path, token = ApprovalsStore(alpha.state_dir / "exec-approvals.json").socket_info()
    asked: list[PromptRequest] = []

    async def decide(req: PromptRequest) -> str:
        asked.append(req)
        return "allow-once"

    console = ApprovalSocketServer(path, token, decider=decide)
    await console.start()
    try:
        async with gateway(state_dir) as server:
            agent = await connect(state_dir, "agent", operator=False)
            ok = await agent.request("exec", {"command": "echo local-ok", "node": "alpha"})
            assert ok["text"].splitlines()[0] == "local-ok"
            assert [(r.command, r.host) for r in asked] == [("echo local-ok", "node")]
            assert server.services.approvals.pending() == []  # the gateway's inbox never saw it
            await agent.close()
    finally:
        await console.close()


async def test_process_list_merges_local_and_node_sessions(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes, '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n')
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        local = await agent.request("exec", {"command": "sleep 30", "host": "gateway", "background": True})
        remote = await agent.request(
            "exec", {"command": "sleep 30", "host": "node", "node": "alpha", "background": True}
        )
        merged = await agent.request("process", {"action": "list"})
        rows = {s["sessionId"]: s["node"] for s in merged["details"]["sessions"]}
        assert rows == {local["details"]["sessionId"]: None, remote["details"]["sessionId"]: "alpha"}
        # Another scope sees neither.
        other = await agent.request("process", {"action": "list", "sessionKey": "agent:main:other"})
        assert other["details"]["sessions"] == []
        for sid in rows:
            await agent.request("process", {"action": "kill", "sessionId": sid})
        await agent.close()
