"""Issue 18 §1: agent B, holding the gateway token and its own credential, tries to read, follow, drain,
write, kill, recreate and list agent A's things, and to act as A, over a raw socket, the CLI and MCP."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from engine import principals
from engine.errors import ExecHostError
from engine.protocol.client import ControlClient
from engine.protocol.frames import read_token
from tests.helpers.gateway import (
    FULL,
    IN_CHECKOUT,
    REPO,
    cli,
    connect,
    gateway,
    listed,
    wait_until,
    write_config,
)

VICTIM_KEY = "agent:victim:main"
SECRET = "VICTIM-SECRET-4711"
MISSING = "quiet-heron"  # a session id nobody has
AGENTS = listed("victim", "attacker", "temp")  # a credential connects only for an agent listed


async def _victim_session(state: Path) -> tuple[ControlClient, str]:
    """Agent victim, with its own credential, starts a background session and leaves a system event."""
    principals.mint(state, "victim")
    victim = await connect(state, "victim", operator=False, agent="victim")
    assert victim.agent == "victim"
    res = await victim.request(
        "exec",
        {"command": f"echo {SECRET}; sleep 60", "background": True, "sessionKey": VICTIM_KEY},
    )
    sid = res["details"]["sessionId"]
    await victim.request("exec", {"command": "echo done", "background": True, "sessionKey": VICTIM_KEY})
    await wait_until(lambda: _has_events(victim))
    return victim, sid


async def _has_events(client: ControlClient) -> bool:
    got = await client.request("events", {"sessionKey": VICTIM_KEY})
    return bool(got["events"])


async def _error(client: ControlClient, method: str, params: dict[str, Any]) -> str:
    with pytest.raises(ExecHostError) as info:
        await client.request(method, params)
    return str(info.value)


async def _attacker_sees_nothing(state: Path, attacker: ControlClient, sid: str) -> None:
    listed = await attacker.request("sessions.list", {})
    assert sid not in json.dumps(listed) and SECRET not in json.dumps(listed)
    listed = await attacker.request("sessions.list", {"sessionKey": VICTIM_KEY})
    assert listed["sessions"] == []
    # A guessed id reads exactly like an id that does not exist.
    for method in ("sessions.output", "sessions.follow"):
        theirs = await _error(attacker, method, {"sessionId": sid})
        nobody = await _error(attacker, method, {"sessionId": MISSING})
        assert theirs == nobody.replace(MISSING, sid)
    resize = await _error(attacker, "sessions.resize", {"sessionId": sid, "cols": 80, "rows": 24})
    assert resize == f"No session found for {sid}"
    for key in ("", VICTIM_KEY, "agent:victim", "agent:victim:"):
        for action, extra in (
            ("poll", {}),
            ("log", {}),
            ("write", {"data": "rm -rf ~\n"}),
            ("kill", {}),
            ("remove", {}),
        ):
            params = {"action": action, "sessionId": sid, "sessionKey": key, **extra}
            res = await attacker.request("process", params)
            assert SECRET not in json.dumps(res)
            nobody = await attacker.request("process", {**params, "sessionId": MISSING})
            assert res["text"] == nobody["text"].replace(MISSING, sid)
        listed = await attacker.request("process", {"action": "list", "sessionKey": key})
        assert sid not in json.dumps(listed)
    # Read and drain the victim's system events: nothing comes back, and nothing is taken.
    for params in ({}, {"sessionKey": VICTIM_KEY}, {"sessionKey": "agent:victim"}):
        got = await attacker.request("events", {**params, "drain": True})
        assert not [e for e in got["events"] if e["sessionKey"].startswith("agent:victim")]
        assert "done" not in json.dumps(got)
    # Act as the victim: refused, never switched.
    for method, params in (
        ("exec", {"command": "id", "agentId": "victim"}),
        ("browser", {"action": "status", "agentId": "victim"}),
        ("policy.check", {"command": "id", "agentId": "victim"}),
        ("approvals.status", {"approvalId": "x", "agentId": "victim"}),
        ("sandbox.explain", {"agentId": "victim"}),
    ):
        assert "not this connection's agent" in await _error(attacker, method, params)
    # Node and agent names are checked like ids on the wire too: `../n1` normalised to `n1` and ran there.
    for method, params in (
        ("exec", {"command": "id", "host": "node", "node": "../n1"}),
        ("process", {"action": "list", "node": "../n1"}),
        ("sandbox.list", {"node": "../n1"}),
    ):
        assert "invalid node name" in await _error(attacker, method, params)
    assert "invalid agent id" in await _error(attacker, "exec", {"command": "id", "agentId": "../x"})
    assert "needs the operator role" in await _error(attacker, "sandbox.recreate", {"all": True})
    assert "needs the operator role" in await _error(attacker, "sandbox.prune", {})
    # Tightening "its" override of the victim's key lands in its own namespace, not the victim's.
    await attacker.request("policy.override", {"sessionKey": VICTIM_KEY, "directive": "/exec security=deny"})
    overrides = (await attacker.request("policy.overrides", {}))["overrides"]
    assert VICTIM_KEY not in overrides and f"agent:{attacker.agent}:{VICTIM_KEY}" in overrides


async def test_agent_b_cannot_touch_agent_a_over_the_socket(state_dir: Path) -> None:
    write_config(state_dir, FULL + AGENTS)
    async with gateway(state_dir) as server:
        victim, sid = await _victim_session(state_dir)
        principals.mint(state_dir, "attacker")
        attacker = await connect(state_dir, "attacker", operator=False, agent="attacker")
        assert attacker.agent == "attacker"
        seen: list[Any] = []
        attacker.add_listener(seen.append)
        await attacker.request("subscribe", {"topics": ["sessions", "events", "approvals", "sandboxes"]})
        await _attacker_sees_nothing(state_dir, attacker, sid)
        # The same with only the gateway token (zero configuration = agent main).
        main = await connect(state_dir, "main", operator=False)
        assert main.agent == "main"
        await _attacker_sees_nothing(state_dir, main, sid)
        # Nothing pushed either: the victim's session prints again while both are subscribed.
        await victim.request("exec", {"command": f"echo {SECRET}-2", "sessionKey": VICTIM_KEY})
        await victim.request("exec", {"command": "echo later", "background": True, "sessionKey": VICTIM_KEY})
        await wait_until(lambda: _has_events(victim))
        assert not [e for e in seen if "victim" in json.dumps(e.data) or SECRET in json.dumps(e.data)]
        # The victim still has its session, its output and its events.
        out = await victim.request("sessions.output", {"sessionId": sid})
        assert SECRET in out["data"] and out["status"] == "running"
        assert await _has_events(victim)
        assert server.connections
        for client in (victim, attacker, main):
            await client.close()


async def test_a_raw_socket_cannot_name_itself(state_dir: Path) -> None:
    """A client writing JSON lines itself: the hello carries no agent name the gateway would believe, a
    made-up credential is refused, and `agentId` in a request never changes who it is."""
    write_config(state_dir, FULL + AGENTS)
    async with gateway(state_dir):
        victim, sid = await _victim_session(state_dir)
        token = read_token(state_dir)

        def talk(hello: dict[str, Any], *requests: dict[str, Any]) -> list[dict[str, Any]]:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(state_dir / "gateway.sock"))
                f = s.makefile("rwb")
                f.write(json.dumps({"type": "hello", "version": 1, **hello}).encode() + b"\n")
                f.flush()
                out = [json.loads(f.readline())]
                for i, req in enumerate(requests):
                    f.write(json.dumps({"type": "req", "id": i, **req}).encode() + b"\n")
                    f.flush()
                    out.append(json.loads(f.readline()))
                return out

        forged = await asyncio.to_thread(
            talk, {"token": token, "name": "victim", "client": "victim", "credential": "exa_" + "A" * 43}
        )
        assert forged[0]["type"] == "error" and forged[0]["code"] == "auth"
        replies = await asyncio.to_thread(
            talk,
            {"token": token, "name": "victim", "client": "victim", "agent": "victim", "agentId": "victim"},
            {"method": "sessions.output", "params": {"sessionId": sid, "agentId": "victim"}},
            {"method": "events", "params": {"sessionKey": VICTIM_KEY, "drain": True}},
            {"method": "sessions.list", "params": {"sessionKey": VICTIM_KEY}},
        )
        assert replies[0] == {"type": "welcome", "pid": os.getpid(), "version": 1, "agent": "main"}
        assert replies[1]["ok"] is False and "not this connection's agent" in replies[1]["error"]["message"]
        assert replies[2]["result"]["events"] == []
        assert replies[3]["result"] == {"sessions": [], "next": None, "total": 0}
        assert await _has_events(victim)
        await victim.close()


async def test_revoked_credentials_stop_at_once(state_dir: Path) -> None:
    write_config(state_dir, FULL + AGENTS)
    async with gateway(state_dir):
        principals.mint(state_dir, "temp")
        live = await connect(state_dir, "temp", operator=False, agent="temp")
        old = principals.read_token(state_dir, "temp")
        assert (await asyncio.to_thread(cli, state_dir, "agents", "revoke", "temp")).returncode == 0
        assert await live.wait_closed()  # dropped, not just refused next time
        with pytest.raises(ExecHostError, match="invalid or revoked agent credential"):
            await connect(state_dir, "temp", operator=False, credential=old)
        with pytest.raises(ExecHostError, match="has no credential"):
            await connect(state_dir, "temp", operator=False, agent="temp")
        # Re-minting replaces: the old token stops, the new one works.
        first = principals.mint(state_dir, "temp")
        done = await asyncio.to_thread(cli, state_dir, "agents", "add", "temp", "--rotate", "--json")
        second = json.loads(done.stdout)["details"]["token"]
        with pytest.raises(ExecHostError, match="invalid or revoked"):
            await connect(state_dir, "temp", operator=False, credential=first)
        fresh = await connect(state_dir, "temp", operator=False, credential=second)
        assert fresh.agent == "temp"
        await fresh.close()


def _as(token: str) -> dict[str, str]:
    return {principals.CREDENTIAL_ENV: token}


async def test_agent_b_cannot_touch_agent_a_over_the_cli(state_dir: Path) -> None:
    write_config(state_dir, FULL + AGENTS)
    async with gateway(state_dir):
        victim, sid = await _victim_session(state_dir)
        added = await asyncio.to_thread(cli, state_dir, "agents", "add", "attacker", "--json")
        token = json.loads(added.stdout)["details"]["token"]
        assert oct(os.stat(state_dir / "agents" / "attacker.json").st_mode & 0o777) == "0o600"

        def run(*args: str) -> Any:
            env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO), **_as(token)}
            return subprocess.run(
                [sys.executable, "-m", "runner", *args], capture_output=True, text=True, env=env, timeout=60
            )

        for args in (
            ("process", "log", sid, "--json"),
            ("process", "log", sid, "--session-key", VICTIM_KEY, "--json"),
            ("process", "kill", sid, "--session-key", VICTIM_KEY, "--json"),
            ("process", "write", sid, "--data", "x", "--session-key", VICTIM_KEY, "--json"),
        ):
            res = await asyncio.to_thread(run, *args)
            assert SECRET not in res.stdout and res.returncode == 1, res
            assert f"session found for {sid}" in json.loads(res.stdout)["text"]
        follow = await asyncio.to_thread(run, "process", "follow", sid)
        assert follow.returncode == 1 and f"No session found for {sid}" in follow.stderr
        listed = await asyncio.to_thread(run, "process", "list", "--json")
        assert sid not in listed.stdout
        drained = await asyncio.to_thread(run, "events", "--session", VICTIM_KEY, "--drain", "--json")
        assert json.loads(drained.stdout)["details"]["events"] == []
        posed = await asyncio.to_thread(run, "exec", "--agent", "victim", "--", "id")
        assert posed.returncode != 0 and "not this connection's agent" in posed.stderr
        for bad in ("../x", "*", "a:b", ".hidden"):
            res = await asyncio.to_thread(run, "exec", "--agent", bad, "--", "id")
            assert res.returncode == 2 and "invalid agent id" in res.stderr
        res = await asyncio.to_thread(run, "exec", "--host", "node", "--node", "../n1", "--", "id")
        assert res.returncode == 2 and "invalid node name" in res.stderr
        assert await _has_events(victim)
        out = await victim.request("sessions.output", {"sessionId": sid})
        assert out["status"] == "running"
        await victim.close()


async def test_agent_b_cannot_touch_agent_a_over_mcp(state_dir: Path) -> None:
    write_config(state_dir, FULL + IN_CHECKOUT + AGENTS)
    async with gateway(state_dir):
        victim, sid = await _victim_session(state_dir)
        token = principals.mint(state_dir, "attacker")
        token_file = state_dir.parent / "attacker.token"
        token_file.write_text(token + "\n")
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "runner", "mcp", "--agent-token-file", str(token_file), "--session", VICTIM_KEY],
            env={"OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO), "HOME": os.environ["HOME"]},
            cwd=str(REPO),
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for action in ("log", "poll", "kill"):
                got = await session.call_tool("process", {"action": action, "sessionId": sid})
                assert SECRET not in json.dumps(got.model_dump())
                assert f"session found for {sid}" in got.content[0].text
            listed = await session.call_tool("process", {"action": "list"})
            assert sid not in listed.content[0].text
            ran = await session.call_tool("exec", {"command": "echo $((40+2))"})
            assert ran.content[0].text == "42"
        # Its session landed in its own namespace, not the victim's.
        mine = [s for s in (await victim.request("sessions.list", {}))["sessions"] if s["sessionId"] != sid]
        assert all(s["scopeKey"] == VICTIM_KEY for s in mine)
        assert await _has_events(victim)
        await victim.close()


def test_names_are_validated_wherever_they_enter(state_dir: Path) -> None:
    for bad in ("../x", "*", "a:b", "", ".x", "a/b", "x" * 65):
        assert not principals.valid_name(bad)
        assert cli(state_dir, "agents", "add", bad).returncode == 2
    write_config(state_dir, '[nodes."../n1"]\nhost = "example.org"\n')
    res = cli(state_dir, "policy", "check", "--", "id")
    assert res.returncode == 2 and "invalid node name" in res.stderr
    write_config(state_dir, '[[agents.list]]\nid = "a:b"\n')
    res = cli(state_dir, "policy", "check", "--", "id")
    assert res.returncode == 2 and "invalid agent id" in res.stderr
    assert cli(state_dir, "nodes", "add", "../n1", "--host", "x").returncode == 2


async def test_status_tells_an_agent_nothing_of_other_agents(state_dir: Path) -> None:
    """`status` counted every agent's sessions and asks and listed adopted session ids: a cross-agent view.
    An agent learns that the gateway runs and whom it takes the caller to be; the operator sees the rest."""
    write_config(state_dir, FULL + AGENTS)
    async with gateway(state_dir):
        victim, sid = await _victim_session(state_dir)
        principals.mint(state_dir, "attacker")
        attacker = await connect(state_dir, "attacker", operator=False, agent="attacker")
        seen = await attacker.request("status")
        assert seen["agent"] == "attacker" and seen["pid"] == os.getpid()
        for field in ("sessions", "runningSessions", "pendingApprovals", "connections", "adoptedSessions"):
            assert field not in seen, seen
        assert sid not in json.dumps(seen)
        operator = await connect(state_dir, "op")
        assert (await operator.request("status"))["runningSessions"] >= 1
        for client in (victim, attacker, operator):
            await client.close()


async def test_an_agent_learns_node_names_and_states_only(state_dir: Path) -> None:
    """`nodes.status` gave any agent every node's address, user, host-key identity and last error, and
    `ping` made the gateway open SSH links on an agent's say-so."""
    write_config(
        state_dir, FULL + '\n[nodes.alpha]\nhost = "127.0.0.1"\nport = 1\nuser = "secret-user"\n' + AGENTS
    )
    async with gateway(state_dir):
        principals.mint(state_dir, "attacker")
        attacker = await connect(state_dir, "attacker", operator=False, agent="attacker")
        seen = await attacker.request("nodes.status")
        assert seen == {"nodes": [{"name": "alpha", "state": "down"}]}
        assert "operator" in await _error(attacker, "nodes.status", {"ping": True})
        operator = await connect(state_dir, "op")
        full = (await operator.request("nodes.status"))["nodes"][0]
        assert full["name"] == "alpha" and full["host"] == "127.0.0.1" and full["port"] == 1
        for client in (attacker, operator):
            await client.close()


async def test_an_agent_learns_nothing_of_nodes_kept_from_it(state_dir: Path) -> None:
    """`nodes.status` listed every node to every agent, those its `[[agents.list]] nodes` keeps from it too:
    their names (often the host's) are the operator's."""
    nodes = "".join(f'[nodes.{n}]\nhost = "127.0.0.1"\nport = 1\nuser = "u"\n' for n in ("alpha", "beta"))
    agents = '[[agents.list]]\nid = "attacker"\nnodes = ["beta"]\n'
    write_config(state_dir, FULL + "\n" + agents + nodes)
    async with gateway(state_dir):
        principals.mint(state_dir, "attacker")
        attacker = await connect(state_dir, "attacker", operator=False, agent="attacker")
        operator = await connect(state_dir, "op")
        try:
            assert await attacker.request("nodes.status") == {"nodes": [{"name": "beta", "state": "down"}]}
            rows = (await operator.request("nodes.status"))["nodes"]
            assert {row["name"] for row in rows} == {"alpha", "beta"}
        finally:
            for client in (attacker, operator):
                await client.close()
