"""Issue 22: a node's ask behaves like the gateway's — relayed to the inbox without a console, the same
`waiting for approval` line, `approval-pending` (exit 10) with the result in `exechost events`, denials with
the operator's reason (exit 11), one JSON object on stdout whatever happens, and where it ran."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from engine.principals import mint
from tests.helpers.gateway import REPO, connect, gateway, listed, wait_until
from tests.helpers.sshd import EXECHOST, SshdNode

ASKING = '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n'
GATEWAY_NODE = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'


def setup(state_dir: Path, nodes: list[SshdNode], exec_table: str = GATEWAY_NODE) -> None:
    (state_dir / "config.toml").write_text(exec_table + "".join(n.config_toml() for n in nodes))
    for node in nodes:
        (node.state_dir / "config.toml").write_text(ASKING)


def exechost(state_dir: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir)}
    return subprocess.run([EXECHOST, *args], capture_output=True, text=True, timeout=timeout, env=env)


def one_json(proc: subprocess.CompletedProcess[str]) -> dict:
    """Exactly one JSON object on stdout, `{text, details}`."""
    assert proc.stdout.count("\n") == 1, proc.stdout + proc.stderr
    data: dict = json.loads(proc.stdout)
    assert set(data) == {"text", "details"}
    return data


def test_node_ask_without_a_console_waits_in_the_inbox(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Item 1 and 2: no console anywhere; the ask is pending in the gateway's inbox, the CLI says how to
    approve it (exit 10), and the approved run's result arrives in `exechost events`, once."""
    setup(state_dir, sshd_nodes)
    alpha = sshd_nodes[0]
    ran = alpha.marks / "ran"  # where the run can write: the node's HOME is read-only to its commands
    command = f"touch {ran}; echo relayed-$((6*7))"
    try:
        pending = exechost(state_dir, "exec", "--json", "--node", "alpha", "--session", "s1", "--", command)
        assert pending.returncode == 10, pending.stdout + pending.stderr
        details = one_json(pending)["details"]
        assert details["status"] == "approval-pending" and details["node"] == "alpha"
        assert details["ranOn"] == "node alpha"
        slug = details["approvalSlug"]
        assert f"exechost approve {slug} allow-once" in one_json(pending)["text"]
        listed = one_json(exechost(state_dir, "approvals", "pending", "--json"))["details"]["approvals"]
        assert [a["id"] for a in listed] == [details["approvalId"]]
        assert listed[0]["command"] == command
        # The node is still waiting on it: nothing ran, nothing fell back.
        assert not ran.exists()
        ok = exechost(state_dir, "approve", slug, "allow-once")
        assert ok.returncode == 0, ok.stderr
        deadline = time.monotonic() + 30
        events: list[dict] = []
        while time.monotonic() < deadline and not events:
            events = one_json(exechost(state_dir, "events", "--session", "s1", "--json"))["details"]["events"]
            time.sleep(0.1)
        assert events, "no follow-up event"
        text = events[0]["text"]
        assert text.startswith(f"Exec finished (node=alpha gateway id={details['approvalId']}, code 0)")
        assert text.endswith("relayed-42") and ran.exists()  # the marker could have told a run apart
        time.sleep(0.5)  # any duplicate from the node's own exec.finished would have arrived by now
        again = one_json(exechost(state_dir, "events", "--session", "s1", "--json"))["details"]["events"]
        assert [e["text"] for e in again] == [text]
    finally:
        exechost(state_dir, "gateway", "stop")


async def _cli_exec(state_dir: Path, *args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner",
        "exec",
        *args,
        env=env,
        cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_waiting_line_approve_and_deny_with_a_reason(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Item 2 and 3: with an approver attached the CLI prints the gateway's waiting line for a node ask; an
    approval runs it there (and says so); a denial carries the operator's reason and exits 11."""
    setup(state_dir, sshd_nodes)
    async with gateway(state_dir):
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach")
        proc = await _cli_exec(state_dir, "--node", "alpha", "--", "echo approved-on-node")
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert line.startswith("waiting for approval ") and "(expires in " in line, line
        slug = line.split()[3]
        assert f"exechost approve {slug} allow-once" in line
        assert [p["slug"] for p in await operator.pending_approvals()] == [slug]
        await operator.request("approve", {"id": slug, "decision": "allow-once"})
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0
        assert out.decode() == "approved-on-node\n(ran on: node alpha)\n"

        denied = await _cli_exec(state_dir, "--json", "--node", "alpha", "--", "echo never")
        assert denied.stderr is not None
        line = (await asyncio.wait_for(denied.stderr.readline(), 60)).decode()
        slug = line.split()[3]
        await operator.request("approve", {"id": slug, "decision": "deny", "reason": "not on alpha today"})
        out, _ = await asyncio.wait_for(denied.communicate(), 60)
        assert denied.returncode == 11
        result = json.loads(out)
        assert result["details"]["status"] == "denied" and result["details"]["reason"] == "user-denied"
        assert result["details"]["operatorReason"] == "not on alpha today"
        assert "Reason: not on alpha today" in result["text"]
        assert not result["text"].startswith("SYSTEM_RUN_DENIED")
        await operator.close()


async def test_no_decision_in_time_is_the_nodes_fallback_exit_11(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """An ask nobody answers in time ends as the gateway's own would: denied, approval-timeout, and the
    inbox holds nothing afterwards."""
    setup(state_dir, sshd_nodes)
    async with gateway(state_dir, approval_timeout_ms=1500) as server:
        operator = await connect(state_dir, "console")
        await operator.request("approvals.attach")
        agent = await connect(state_dir, "agent", operator=False)
        res = await agent.request("exec", {"command": "echo late", "node": "alpha"})
        assert res["details"]["status"] == "denied" and res["details"]["reason"] == "approval-timeout"
        assert res["text"].startswith("Exec denied (node=alpha gateway id=")
        await wait_until(lambda: server.services.approvals.pending() == [])
        await agent.close()
        await operator.close()


def test_exec_json_prints_one_object_for_node_errors(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Item 4: an unknown node, a node that is down, a policy refusal on the node: one JSON object each."""
    setup(state_dir, sshd_nodes)
    (sshd_nodes[0].state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "deny"\n')
    sshd_nodes[1].stop()
    try:
        for node, needle in (
            ("gamma", "unknown node: gamma (known: alpha, beta)"),
            ("beta", "node beta: cannot connect"),
            ("alpha", "security=deny"),
        ):
            proc = exechost(state_dir, "exec", "--json", "--node", node, "--", "echo x")
            assert proc.returncode == 1, proc.stdout + proc.stderr
            data = one_json(proc)
            assert data["details"]["status"] == "error" and needle in data["text"], data
            assert data["details"]["error"] == data["text"]
    finally:
        exechost(state_dir, "gateway", "stop")


async def test_every_result_names_where_it_ran(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Item 5 and 6: under host=auto (no sandbox) an agent picks its host per call, and each result says
    where it ran — in details.ranOn, and for a node in its text too; the refusal hint is true."""
    setup(
        state_dir, sshd_nodes, '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    (sshd_nodes[0].state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        here = await agent.request("exec", {"command": "echo here"})
        assert here["details"]["ranOn"] == "gateway" and here["text"] == "here"
        there = await agent.request("exec", {"command": "echo there", "host": "node", "node": "alpha"})
        assert there["details"]["ranOn"] == "node alpha"
        assert there["text"] == "there\n(ran on: node alpha)"
        bg = await agent.request(
            "exec", {"command": "sleep 30", "host": "node", "node": "alpha", "background": True}
        )
        assert bg["details"]["ranOn"] == "node alpha" and bg["text"].endswith("(ran on: node alpha)")
        await agent.request("process", {"action": "kill", "sessionId": bg["details"]["sessionId"]})
        await agent.close()
    # The hint names only a setting that really allows the override, and following it works.
    setup(state_dir, sshd_nodes, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            await agent.request("exec", {"command": "echo x", "host": "node", "node": "alpha"})
        except Exception as exc:
            assert "set tools.exec.host=node or auto to allow this override" in str(exc)
        else:
            raise AssertionError("host=node was not refused under host=gateway")
        await agent.close()


async def test_process_list_all_shows_every_agent_and_node(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Item 10: `exechost process list --all` is the operator's view: every agent's sessions, on the gateway
    and on each connected node, with node and agent columns (an agent's own list stays its own)."""
    setup(
        state_dir, sshd_nodes, '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    (sshd_nodes[0].state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        local = await agent.request("exec", {"command": "sleep 30", "background": True, "agentId": "main"})
        mint(state_dir, "ops")  # another agent is its own credential (issue 18)
        ops = await connect(state_dir, "ops", operator=False, agent="ops")
        remote = await ops.request(
            "exec", {"command": "sleep 31", "node": "alpha", "host": "node", "background": True}
        )
        await ops.close()
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        proc = await asyncio.create_subprocess_exec(
            EXECHOST, "process", "list", "--all", "--json", env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        rows = {r["sessionId"]: (r["node"], r["agent"]) for r in json.loads(out)["details"]["sessions"]}
        assert rows[local["details"]["sessionId"]] == (None, "main")
        assert rows[remote["details"]["sessionId"]] == ("alpha", "ops")
        proc = await asyncio.create_subprocess_exec(
            EXECHOST, "process", "list", "--all", env=env, stdout=asyncio.subprocess.PIPE
        )
        text = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
        assert text.splitlines()[0].split()[:3] == ["SESSION", "NODE", "AGENT"]
        want = [remote["details"]["sessionId"], "alpha", "ops"]
        assert any(line.split()[:3] == want for line in text.splitlines())
        mine = await agent.request("process", {"action": "list", "agentId": "main"})
        assert [s["sessionId"] for s in mine["details"]["sessions"]] == [local["details"]["sessionId"]]
        for res in (local, remote):
            await agent.request("process", {"action": "kill", "sessionId": res["details"]["sessionId"]})
        await agent.close()
