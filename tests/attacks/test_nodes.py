"""Attacks on host=node: a man in the middle, argv smuggling, hostile env, and a hostile node."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config.loader import load_config
from engine.nodes.link import NodeError, NodeLink
from engine.protocol.frames import Event, RemoteError
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
GATEWAY_FULL = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'


def _link(state_dir: Path, name: str) -> NodeLink:
    return NodeLink(load_config(state_dir / "config.toml").nodes[name], reconnect=False)


def _hostile_exechost(node: SshdNode, body: str) -> Path:
    """A stand-in for `exechost` on a compromised node: a script that speaks the protocol its own way."""
    script = node.root / "hostile.py"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n{body}\n")
    script.chmod(stat.S_IRWXU)
    return script


def _use_exechost(state_dir: Path, node: SshdNode, path: Path) -> None:
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        config.replace(
            node.config_toml(),
            node.config_toml().replace(node.config_toml().split("exechost = ")[1], f'"{path}"\n'),
        )
    )


async def test_mitm_with_another_host_key_runs_nothing(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """An attacker answering on the node's address has a different host key: refused before auth."""
    alpha = sshd_nodes[0]
    alpha.stop()
    subprocess.run(["rm", "-f", str(alpha.host_key), f"{alpha.host_key}.pub"], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(alpha.host_key)], check=True)
    alpha.start()  # same address, same port, new key (known_hosts still has the old one)
    link = _link(state_dir, "alpha")
    with pytest.raises(NodeError, match="ssh-keyscan"):
        await link.call("system.run", {"command": ["/bin/sh", "-lc", "touch /tmp/pwned-by-mitm"]})
    assert not (alpha.state_dir / "node.json").exists()
    await link.close()


async def test_smuggled_argv_prelude_is_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """`env BASH_ENV=… bash -lc id` displayed as `id`: the node refuses argv that is not what was shown."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    marker = alpha.marks / "smuggled"
    link = _link(state_dir, "alpha")
    try:
        res = await link.call(
            "system.run",
            {"command": ["/usr/bin/env", f"X=$(touch {marker})", "/bin/sh", "-lc", "id"], "rawCommand": "id"},
        )
        assert not res.ok and res.error is not None and res.error["code"] == "RAW_COMMAND_MISMATCH"
        res = await link.call(
            "system.run", {"command": ["/bin/sh", "-lc", f"touch {marker}", "x"], "rawCommand": "true"}
        )
        assert not res.ok and res.error is not None and res.error["code"] == "RAW_COMMAND_MISMATCH"
    finally:
        await link.close()
    assert not marker.exists()


async def test_hostile_env_is_refused_on_the_node(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + alpha.config_toml())
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        for env in ({"LD_PRELOAD": "/tmp/evil.so"}, {"BASH_ENV": "/tmp/evil.sh"}, {"PATH": "/tmp/evil"}):
            with pytest.raises(RemoteError, match="SYSTEM_RUN_DENIED"):
                await agent.request("exec", {"command": "true", "node": "alpha", "env": env})
        await agent.close()


async def test_ids_that_walk_paths_are_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    link = _link(state_dir, "alpha")
    try:
        for key in ("agentId", "sessionKey", "runId"):
            res = await link.call("system.run", {"command": ["/bin/sh", "-lc", "true"], key: "../../etc"})
            assert (
                not res.ok and res.error is not None and res.error["message"] == f"INVALID_REQUEST: bad {key}"
            )
    finally:
        await link.close()


async def test_hostile_node_garbage_drops_only_its_link(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A node that answers with garbage: its calls fail with a clear error, the gateway lives on."""
    alpha, beta = sshd_nodes
    (beta.state_dir / "config.toml").write_text(NODE_FULL)
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "evil",
        "displayName": "evil",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run"],
        "pathEnv": "",
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\nsys.stdin.readline()\n"
        'print(\'{"type": "res", "id": [1]}\', flush=True)\nsys.stdin.read()',
    )
    _use_exechost(state_dir, alpha, script)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        with pytest.raises(RemoteError, match="node alpha: link lost \\(protocol error"):
            await agent.request("exec", {"command": "true", "node": "alpha"})
        ok = await agent.request("exec", {"command": "echo fine", "node": "beta"})
        assert ok["text"].splitlines()[0] == "fine"
        await agent.close()


async def test_node_claiming_anothers_id_is_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A compromised node copies another node's id to pass its asks off as that node's."""
    alpha, beta = sshd_nodes
    (beta.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        await agent.request("exec", {"command": "true", "node": "beta"})
        beta_id = server.services.nodes.links["beta"].hello.node_id
        await agent.close()
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": beta_id,
        "displayName": "beta",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run"],
        "pathEnv": "",
    }
    ask = {
        "type": "req",
        "id": "n1",
        "method": "approval.request",
        "params": {"approvalId": "x", "request": {"command": "rm -rf /", "cwd": "/", "nodeId": beta_id}},
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\nprint(json.dumps({ask!r}), flush=True)\n"
        "for line in sys.stdin:\n    print(line.strip(), file=sys.stderr)\n",
    )
    _use_exechost(state_dir, alpha, script)
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        await agent.request("exec", {"command": "true", "node": "beta"})
        with pytest.raises(RemoteError, match="claims node id"):
            await agent.request("exec", {"command": "true", "node": "alpha"})
        await asyncio.sleep(0.3)
        assert server.services.approvals.pending() == []  # the forged ask never reached the inbox
        await agent.close()
        await operator.close()


async def test_approved_flags_in_system_run_are_ignored(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Reference §5.6: `approved`/`approvalDecision` on the wire mean nothing; only the node's own record."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "off"\n')
    marker = alpha.marks / "approved-by-flag"
    link = _link(state_dir, "alpha")
    try:
        res = await link.call(
            "system.run",
            {
                "command": ["/bin/sh", "-lc", f"touch {marker}"],
                "approved": True,
                "approvalDecision": "allow-always",
                "security": "full",  # a per-call value can only tighten the node's policy
                "ask": "off",
            },
        )
        assert not res.ok and res.error is not None and "SYSTEM_RUN_DENIED" in res.error["message"]
    finally:
        await link.close()
    assert not marker.exists()
    approvals = alpha.state_dir / "exec-approvals.json"
    assert not approvals.exists() or "touch" not in approvals.read_text()  # nothing persisted as allow-always


async def test_relayed_answer_outside_the_offer_is_no_approval() -> None:
    """A gateway (or a forged frame) answering allow-always where only allow-once was offered, or answering
    with junk, approves nothing: the node applies askFallback."""
    from engine.approvals.request import ApprovalRequest
    from runner.node.approvals import RelayedApprovals

    for answer in (
        {"decision": "allow-always"},
        {"decision": ["allow-once"]},
        {"decision": "ALLOW-ONCE "},
        {},
    ):

        async def relay(_id: str, _view: dict, answer: dict = answer) -> dict:
            return answer

        manager = RelayedApprovals(relay)
        record, _ = manager.register(
            ApprovalRequest(command="x", cwd="/", allowed_decisions=("allow-once", "deny"))
        )
        assert await asyncio.wait_for(manager.wait(record), 5) is None
        manager.close()


async def test_endless_line_from_a_node_is_cut_off(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A node streaming a frame with no newline: the gateway stops at the frame ceiling, drops the link."""
    alpha = sshd_nodes[0]
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "big",
        "displayName": "big",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run"],
        "pathEnv": "",
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\nsys.stdin.readline()\n"
        "chunk = 'x' * 1048576\nwhile True:\n    sys.stdout.write(chunk)\n",
    )
    _use_exechost(state_dir, alpha, script)
    link = _link(state_dir, "alpha")
    with pytest.raises(NodeError, match="link lost \\(protocol error: frame longer than"):
        await link.call("ping", {}, timeout=120)
    await link.close()


async def test_a_node_flooding_the_inbox_is_capped(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A compromised node sends 100 asks at once, for no run of the gateway's: none reaches the inbox
    (asks for runs in flight count against the node's cap and the run's agent's: test_hostile_node.py)."""
    cap = 0

    alpha = sshd_nodes[0]
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "flood",
        "displayName": "flood",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run"],
        "pathEnv": "",
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\n"
        "for i in range(100):\n"
        "    ask = {'type': 'req', 'id': f'n{i}', 'method': 'approval.request',\n"
        "           'params': {'approvalId': f'a{i}', 'request': {'command': f'id {i}', 'cwd': '/'}}}\n"
        "    print(json.dumps(ask), flush=True)\n"
        "refused = 0\n"
        "for line in sys.stdin:\n"
        "    if '\"decision\":null' in line.replace(' ', ''):\n"
        "        refused += 1\n"
        "        open(sys.argv[0] + '.refused', 'w').write(str(refused))\n",
    )
    _use_exechost(state_dir, alpha, script)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        await server.services.nodes.sync()["alpha"].ensure()
        refused = Path(f"{script}.refused")
        for _ in range(400):
            if refused.exists() and refused.read_text() == str(100 - cap):
                break
            await asyncio.sleep(0.05)
        assert refused.read_text() == str(100 - cap)
        assert len(server.services.approvals.pending()) == cap
        await operator.close()


async def test_a_malformed_node_approval_id_is_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A node's ask whose approvalId is not an id (too long, spaces, control characters) never reaches
    the inbox; the node gets INVALID_REQUEST back."""
    alpha = sshd_nodes[0]
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "odd",
        "displayName": "odd",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run"],
        "pathEnv": "",
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\n"
        "for i, bad in enumerate(['a b', 'x' * 500, 'id\\x1b[2J', 7]):\n"
        "    ask = {'type': 'req', 'id': f'n{i}', 'method': 'approval.request',\n"
        "           'params': {'approvalId': bad, 'request': {'command': 'id', 'cwd': '/'}}}\n"
        "    print(json.dumps(ask), flush=True)\n"
        "refused = 0\n"
        "for line in sys.stdin:\n"
        "    if 'INVALID_REQUEST' in line:\n"
        "        refused += 1\n"
        "        open(sys.argv[0] + '.refused', 'w').write(str(refused))\n",
    )
    _use_exechost(state_dir, alpha, script)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        await server.services.nodes.sync()["alpha"].ensure()
        refused = Path(f"{script}.refused")
        for _ in range(400):
            if refused.exists() and refused.read_text() == "4":
                break
            await asyncio.sleep(0.05)
        assert refused.read_text() == "4"
        assert server.services.approvals.pending() == []
        await operator.close()


async def test_an_agent_cannot_read_node_sessions_of_other_scopes(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The operator's session view of a node (every scope there) is the console's, not an agent's."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir):
        owner = await connect(state_dir, "agent", operator=False)
        started = await owner.request(
            "exec",
            {
                "command": "echo secret-out; sleep 30",
                "node": "alpha",
                "background": True,
                "sessionKey": "a:1",
            },
        )
        sid = started["details"]["sessionId"]
        other = await connect(state_dir, "agent", operator=False)
        seen: list[object] = []
        other.add_listener(seen.append)
        await other.request("subscribe", {"topics": ["sessions"]})
        console = await connect(state_dir, "console")  # the operator sees what the agent must not
        console_seen: list[object] = []
        console.add_listener(console_seen.append)
        await console.request("subscribe", {"topics": ["sessions"]})
        await owner.request(
            "exec", {"command": "echo second", "node": "alpha", "background": True, "sessionKey": "a:1"}
        )
        listed = await other.request("sessions.list")
        assert sid not in [r["sessionId"] for r in listed["sessions"]]
        with pytest.raises(RemoteError, match="needs the operator role"):
            await other.request("sessions.output", {"sessionId": sid})
        theirs = await other.request("process", {"action": "log", "sessionId": sid, "sessionKey": "a:2"})
        assert "No session found" in theirs["text"] and "secret-out" not in str(theirs)
        await wait_until(lambda: [e for e in console_seen if "node:alpha:" in str(e)])
        assert not [e for e in seen if "node:alpha:" in str(e)]
        assert sid in [r["sessionId"] for r in (await console.request("sessions.list"))["sessions"]]
        out = await wait_until(lambda: _output_has(console, sid, "secret-out"))
        assert out["sessionId"] == sid
        await owner.request("process", {"action": "kill", "sessionId": sid, "sessionKey": "a:1"})
        for client in (owner, other, console):
            await client.close()


async def _output_has(client: object, sid: str, needle: str) -> dict[str, object] | None:
    out = await client.request("sessions.output", {"sessionId": sid})  # type: ignore[attr-defined]
    return out if needle in out["data"] else None


async def test_node_env_values_cannot_inject_shell(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """A `[nodes.<name>] env` value (or stateDir) full of shell syntax reaches the node as one literal
    value: the remote command line sshd hands the login shell quotes every word."""
    alpha = sshd_nodes[0]
    pwned = alpha.marks / "pwned"
    value = f"'; touch {pwned}; echo '$(touch {pwned})`touch {pwned}`"
    # the node's host runs inherit EVIL from its service only when its operator lists it (inheritEnv)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL + 'inheritEnv = ["EVIL"]\n')
    config = (
        (state_dir / "config.toml")
        .read_text()
        .replace("[nodes.alpha]\n", f"[nodes.alpha]\nenv = {{EVIL = {_toml_str(value)}}}\n", 1)
    )
    (state_dir / "config.toml").write_text(GATEWAY_FULL + config)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        res = await agent.request("exec", {"command": 'printf "%s" "$EVIL"', "node": "alpha"})
        assert res["text"].splitlines()[0] == value
        await agent.close()
    assert not pwned.exists()


def _toml_str(value: str) -> str:
    import json

    return json.dumps(value)  # a JSON string is a valid TOML basic string


async def test_a_hostile_nodes_output_frames_stay_its_own(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Output frames and totals from a node are filed under that node's name whatever ids they carry, and
    malformed ones are dropped."""
    from engine.nodes.wire import NodeEvent

    (state_dir / "config.toml").write_text(GATEWAY_FULL + "".join(n.config_toml() for n in sshd_nodes))
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)
    async with gateway(state_dir) as server:
        hub = server.services.nodes
        beta = hub.sync()["beta"]
        await beta.ensure()
        totals = {"x": 5, "alpha:y": 9, "z": -1, "w": "3"}
        hub._on_event(beta, NodeEvent("session.offsets", {"sessions": totals}))
        assert hub.feed.offsets() == {"node:beta:x": 5}
        console = await connect(state_dir, "console")
        frames: list[Event] = []
        console.add_listener(frames.append)
        await console.subscribe(["sessions"])
        smuggled = {"sessionId": "node:alpha:q", "data": "x", "offset": 0}
        hub._on_event(beta, NodeEvent("session.output", smuggled))
        hub._on_event(beta, NodeEvent("session.output", {"sessionId": "x", "data": "hi", "offset": -4}))
        hub._on_event(beta, NodeEvent("session.output", {"sessionId": "x", "data": "hi", "offset": 0}))
        got = await wait_until(lambda: [f.data for f in frames if f.event == "session.output"], timeout=10)
        assert got == [{"sessionId": "node:beta:x", "offset": 0, "stream": "stdout", "data": "hi"}]
        await console.close()


async def test_a_node_cannot_attach_its_ask_to_another_nodes_run(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """beta relays an ask naming alpha's waiting run: refused (no run of beta's), never in the inbox, and
    alpha's caller is not told of it."""
    from engine.nodes.wire import Request

    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    (state_dir / "config.toml").write_text(GATEWAY_FULL + (state_dir / "config.toml").read_text())
    async with gateway(state_dir) as server:
        hub = server.services.nodes
        operator = await connect(state_dir, "operator")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        waiting: list[dict] = []
        agent.add_listener(lambda ev: waiting.append(ev.data) if ev.event == "exec.waiting" else None)
        call = asyncio.ensure_future(agent.request("exec", {"command": "echo a", "node": "alpha"}))
        [(key, run)] = await wait_until(lambda: [(k, r) for k, r in hub._runs.items() if r.records])
        beta = hub.sync()["beta"]
        await beta.ensure()
        forged = {"approvalId": "forged-1", "request": {"command": "id", "cwd": "/", "runId": key[1]}}
        asked = await hub._on_request(beta, Request("x", "approval.request", forged))
        assert asked["decision"] is None and asked["resolvedBy"] == "no-such-run"  # not beta's run: refused
        assert len(server.services.approvals.pending()) == 1 and len(run.records) == 1  # alpha's own ask only
        assert not call.done()
        assert [w["approvalId"] for w in waiting] == [run.records[0].id]
        await operator.request("approve", {"id": run.records[0].id, "decision": "deny"})
        assert (await asyncio.wait_for(call, 20))["details"]["status"] == "denied"
        await agent.close()
        await operator.close()


async def test_a_limited_yes_to_a_node_ask_stays_limited(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """The operator answered a node's ask with allow-always for 1 use; the node heard a bare allow-always
    and saved the pattern to its permanent allowlist: every later run went through without asking."""
    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(GATEWAY_FULL + "".join(n.config_toml() for n in sshd_nodes))
    (alpha.state_dir / "config.toml").write_text(
        '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n'
    )
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        params = {"command": "echo limited", "agentId": "main", "sessionKey": "agent:main", "node": "alpha"}
        first = asyncio.ensure_future(agent.request("exec", params))
        await wait_until(lambda: server.services.approvals.pending(), timeout=60)
        slug = server.services.approvals.pending()[0].slug
        grant = {"forMs": None, "uses": 1, "sessionOnly": False}
        await operator.request("approve", {"id": slug, "decision": "allow-always", "grant": grant})
        assert (await asyncio.wait_for(first, 60))["details"]["status"] == "completed"
        approvals = alpha.state_dir / "exec-approvals.json"
        assert not approvals.exists() or "/echo" not in approvals.read_text()  # nothing permanent there
        # One more run is what the grant allows (the node counts it), then the same command asks again.
        assert (await asyncio.wait_for(agent.request("exec", params), 60))["details"]["status"] == "completed"
        second = asyncio.ensure_future(agent.request("exec", params))
        await wait_until(lambda: server.services.approvals.pending(), timeout=60)
        await operator.request(
            "approve", {"id": server.services.approvals.pending()[0].id, "decision": "deny"}
        )
        assert (await asyncio.wait_for(second, 60))["details"]["status"] == "denied"
        await agent.close()
        await operator.close()
