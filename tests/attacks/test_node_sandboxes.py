"""Attacks on sandboxes on nodes: an agent naming a node to get out of its sandbox, a node whose own policy
is tighter than the gateway's sandbox request, and a per-call node= against the agent's sandbox.node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from tests.attacks.test_nodes import _hostile_exechost, _use_exechost
from tests.helpers.gateway import connect, gateway
from tests.helpers.sandbox import IMAGE, build_test_image
from tests.helpers.sshd import SshdNode
from tests.runner.node.test_node_sandboxes import _remove_nodes_containers, configure

pytestmark = pytest.mark.docker


@pytest.fixture
def node_sandboxes(sshd_nodes: list[SshdNode]) -> Iterator[list[SshdNode]]:
    build_test_image()
    try:
        yield sshd_nodes
    finally:
        _remove_nodes_containers(sshd_nodes)


async def test_naming_a_node_never_leaves_the_sandbox(
    node_sandboxes: list[SshdNode], state_dir: Path
) -> None:
    """A sandboxed agent asks for node=alpha (and host=sandbox): it runs in a container there, never in the
    node's own shell: the node's files are not there and the marker lands nowhere on the node."""
    alpha = node_sandboxes[0]
    configure(state_dir, node_sandboxes, sandbox_node=None)
    marker = alpha.marks / "escaped"
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request(
            "exec",
            {
                "command": f"test -e {alpha.state_dir}/node.json && echo LEAK; touch {marker} 2>/dev/null; "
                "echo contained",
                "node": "alpha",
                "host": "sandbox",
            },
        )
        assert res["text"].splitlines()[0] == "contained" and res["details"]["host"] == "sandbox"
        # host=node is not the sandbox's way around: the gateway's configured host (sandbox) refuses it.
        with pytest.raises(RemoteError, match="exec host not allowed"):
            await agent.request("exec", {"command": f"touch {marker}", "node": "alpha", "host": "node"})
        await agent.close()
    assert not marker.exists()


async def test_node_policy_tighter_than_the_sandbox_request_wins(
    node_sandboxes: list[SshdNode], state_dir: Path
) -> None:
    alpha = node_sandboxes[0]
    configure(state_dir, node_sandboxes)
    (alpha.state_dir / "config.toml").write_text(
        f'[tools.exec]\nsecurity = "deny"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        with pytest.raises(RemoteError, match=r"SYSTEM_RUN_DENIED: .*security=deny"):
            await agent.request("exec", {"command": "echo nope"})
        await agent.close()


async def test_per_call_node_must_agree_with_the_agents_sandbox_node(
    node_sandboxes: list[SshdNode], state_dir: Path
) -> None:
    beta = node_sandboxes[1]
    configure(state_dir, node_sandboxes, sandbox_node="alpha")
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        with pytest.raises(RemoteError, match=r"not allowed \(bound to alpha\)"):
            await agent.request("exec", {"command": "echo moved", "node": "beta"})
        await agent.close()
    assert not (beta.state_dir / "sandboxes").exists()


async def test_a_node_without_sandbox_support_is_never_sent_a_sandboxed_command(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """An older node (no `sandbox` cap) would ignore the flag and run the command on its host: the gateway
    refuses before sending anything."""
    alpha = sshd_nodes[0]
    configure(state_dir, sshd_nodes)
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "old-node",
        "displayName": "old",
        "version": "0.0.9",
        "platform": "linux",
        "caps": ["system.run", "system.which"],
        "pathEnv": "",
    }
    got = alpha.marks / "got-request"
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\n"
        "for line in sys.stdin:\n"
        f"    open({str(got)!r}, 'a').write(line)\n",
    )
    _use_exechost(state_dir, alpha, script)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        with pytest.raises(RemoteError, match=r"node alpha: its exechost \(0.0.9\) cannot run sandboxes"):
            await agent.request("exec", {"command": "echo escaped"})
        await agent.close()
    assert not got.exists()


def test_a_hostile_nodes_sandbox_answers_cannot_drive_the_terminal(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """`sandbox list|explain --node` print what the node's runner says: escapes arrive inert, and junk is
    an error, not a traceback."""
    import os
    import subprocess

    from tests.helpers.sshd import EXECHOST, REPO

    alpha = sshd_nodes[0]
    evil = "\x1b]0;pwned\x07\x1b[2Jevil"
    hello = {
        "type": "hello",
        "protocol": 1,
        "nodeId": "evil-node",
        "displayName": "evil",
        "version": "0",
        "platform": "linux",
        "caps": ["system.run", "sandbox"],
        "pathEnv": "",
    }
    row = {
        "containerName": evil,
        "sessionKey": evil,
        "agentId": "main",
        "running": True,
        "exists": True,
        "image": evil,
        "imageMatch": True,
        "configMatch": True,
        "backend": evil,
        "ageMs": 1000,
        "idleMs": 1000,
    }
    script = _hostile_exechost(
        alpha,
        f"print(json.dumps({hello!r}), flush=True)\n"
        f"row = {row!r}\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    if req['method'] == 'sandbox.list':\n"
        "        payload = {'containers': [row, 'junk', {'containerName': 7}]}\n"
        "    else:\n"
        "        payload = {'agentId': row['containerName'], 'docker': 'not a table'}\n"
        "    res = {'type': 'res', 'id': req['id'], 'ok': True, 'payload': payload}\n"
        "    if req['method'] == 'sandbox.prune':\n"
        "        res = {'type': 'res', 'id': req['id'], 'ok': False,\n"
        "               'error': {'code': 'X', 'message': row['containerName']}}\n"
        "    print(json.dumps(res), flush=True)\n",
    )
    _use_exechost(state_dir, alpha, script)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": REPO}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [EXECHOST, "sandbox", *args], env=env, capture_output=True, text=True, timeout=60
        )

    listed = run("list", "--node", "alpha")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "evil" in listed.stdout and "Total: 1 (1 running)" in listed.stdout  # the junk rows are dropped
    explained = run("explain", "--node", "alpha")
    assert explained.returncode == 1 and "node alpha sent a malformed answer" in explained.stderr
    assert "Traceback" not in explained.stderr and "\x1b" not in explained.stderr + explained.stdout
    pruned = run("prune", "--node", "alpha")  # the node's error text is shown inert too
    assert pruned.returncode == 1 and "evil" in pruned.stderr and "\x1b" not in pruned.stderr
