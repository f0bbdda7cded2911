"""Fresh round 15 b, issue 27 §1 (ambient authority): what a run reaches without the operator granting it,
from inside a run: a gateway host run, a node's run, a bubblewrap sandbox and a Docker sandbox."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.approvals.store import ApprovalsStore
from tests.helpers.gateway import connect, gateway, write_config
from tests.helpers.sshd import SshdNode

SECRET = "tok-15b-9f3e1c"

# Two agents of one gateway: main may use the node (its own policy, full there), ops is allowed only `cat`.
TWO_AGENTS = (
    '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\nask = "on-miss"\n'
    '[[agents.list]]\nid = "main"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n'
    '[[agents.list]]\nid = "ops"\n'
)
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


async def _exec(state: Path, agent: str, command: str, **params: Any) -> dict[str, Any]:
    client = await connect(state)
    try:
        result = await client.request("exec", {"command": command, "agentId": agent, **params})
    finally:
        await client.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


def _serve_from(node: SshdNode, state: Path) -> None:
    """The node's sshd again, its `node serve` now with its state dir at `state`: outside every home, as a
    node operator's `/srv/exechost-node` (the fixture's is in the node's own root, beside the gateway's
    ssh key, which host views keep read-only)."""
    state.mkdir(mode=0o700)
    node.stop()
    node.state_dir = state
    node.start()


def _found(root: Path, name: str) -> Path:
    hits = [p for p in root.rglob(name) if p.is_file()]
    assert len(hits) == 1, hits
    return hits[0]


async def test_class1_a_node_services_state_dir_is_a_host_runs(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """The machine is a node (sshd, `node serve`) for a gateway as the same account, its state dir outside
    the home (here the node's root beside the gateway's: `/srv/exechost-node` on a real machine). Agent
    main's node run keeps a note in its /tmp, which on the node is main's private copy under the node's
    state dir; agent ops, allowed only `cat`, reads it from a gateway host run."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    write_config(state_dir, TWO_AGENTS + "".join(n.config_toml() for n in sshd_nodes))
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("ops", "/usr/bin/cat")
    tmp = os.environ["EXECHOST_HOST_PRIVATE"]  # the /tmp stand-in, private per agent on the node too
    async with gateway(state_dir):
        wrote = await _exec(
            state_dir, "main", f"echo {SECRET} > {tmp}/main-notes.txt", host="node", node="alpha"
        )
        assert wrote["exitCode"] == 0, wrote
        # main's copy of /tmp on the node, where the node keeps it (the operator's look, for the path)
        copy = _found(alpha.state_dir / "hostprivate", "main-notes.txt")
        assert SECRET in copy.read_text()
        # the machine's /tmp itself does not hold it: only main's copy does
        assert not (Path(tmp) / "main-notes.txt").exists()
        read = await _exec(state_dir, "ops", f"/usr/bin/cat {copy}", host="gateway")
    assert SECRET not in read["_text"], read


async def test_class1_a_host_run_drives_another_agents_node_sandbox(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Agent main's sandbox on node alpha (bwrap, the node's choice) holds its workspace file. Agent ops's
    gateway host run finds the sandbox's control dir under the node's state dir and asks its supervisor to
    run a spec of ops's: the spec copies main's file out to where ops reads it."""
    alpha = sshd_nodes[0]
    _serve_from(alpha, state_dir.parent / "srv-node")
    write_config(
        state_dir,
        TWO_AGENTS.replace(
            'id = "main"\n', 'id = "main"\nsandbox.mode = "all"\nsandbox.node = "alpha"\n'
        ).replace('id = "ops"\n', 'id = "ops"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n')
        + "".join(n.config_toml() for n in sshd_nodes),
    )
    (alpha.state_dir / "config.toml").write_text(NODE_FULL + '[agents.defaults.sandbox]\nbackend = "bwrap"\n')
    async with gateway(state_dir):
        wrote = await _exec(state_dir, "main", f"echo {SECRET} > notes.txt; pwd", host="sandbox")
        assert wrote["exitCode"] == 0, wrote
        ctl = [p for p in (alpha.state_dir / "sandbox-ctl").iterdir() if (p / "ctl").exists()]
        assert len(ctl) == 1, ctl
        ctl_dir = ctl[0]
        slot = ctl_dir / "x" / "15b0c0ffee"
        attack = (
            f"mkdir {slot} && "
            f"printf 'cat /workspace/notes.txt > /.exechost/x/15b0c0ffee/leak\\n' > {slot}/spec && "
            f"echo 'run 15b0c0ffee' > {ctl_dir}/ctl && "
            f"while [ ! -s {slot}/leak ]; do sleep 0.05; done; cat {slot}/leak"
        )
        read = await _exec(state_dir, "ops", attack, host="gateway", timeout=30)
    assert SECRET not in read["_text"], read


FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


async def test_class1_the_operators_exec_leaves_its_tmp_files_to_agent_main(state_dir: Path) -> None:
    """The operator runs a command of its own through exechost (no agent named: main's policy). It writes
    a file in /tmp, as commands do. Agent main, on the gateway token alone, reads it from its host run."""
    write_config(state_dir, FULL)
    tmp = os.environ["EXECHOST_HOST_PRIVATE"]  # the /tmp stand-in: each agent's own copy in its view
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            done = await operator.request("exec", {"command": f"echo {SECRET} > {tmp}/op-export.txt"})
        finally:
            await operator.close()
        assert done["details"]["exitCode"] == 0, done
        # (the machine's /tmp stand-in holds no such file: the write went to a private copy)
        agent = await connect(state_dir, "agent", operator=False)
        try:
            read = await agent.request("exec", {"command": f"cat {tmp}/op-export.txt"})
        finally:
            await agent.close()
    assert SECRET not in read["text"], read


async def test_class1_a_moved_workspace_root_leaves_the_old_workspaces_to_host_runs(state_dir: Path) -> None:
    """Agent ops keeps notes in its bwrap sandbox's workspace under `workspaceRoot = <old>`. The operator
    moves the root to <new> (a bigger disk) and restarts; agent main's host run reads ops's notes where
    they still are."""
    old, new = state_dir.parent / "sbx-old", state_dir.parent / "sbx-new"
    ops_sandboxed = (
        '[[agents.list]]\nid = "ops"\ntools.exec.host = "sandbox"\nsandbox.mode = "all"\n'
        'sandbox.backend = "bwrap"\n'
    )
    write_config(state_dir, FULL + f'[agents.defaults.sandbox]\nworkspaceRoot = "{old}"\n' + ops_sandboxed)
    async with gateway(state_dir):
        wrote = await _exec(state_dir, "ops", f"echo {SECRET} > notes.txt", host="sandbox")
    assert wrote["exitCode"] == 0 and wrote["ranOn"].startswith("sandbox"), wrote
    notes = _found(old, "notes.txt")
    write_config(state_dir, FULL + f'[agents.defaults.sandbox]\nworkspaceRoot = "{new}"\n' + ops_sandboxed)
    async with gateway(state_dir):
        read = await _exec(state_dir, "main", f"cat {notes}")
    assert SECRET not in read["_text"], read


LISTENER = (
    "import socket, sys\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', 47015)); s.listen(1)\n"
    "open(sys.argv[1] + '/ready', 'w').close()\n"
    "c, _ = s.accept(); data = b''\n"
    "while chunk := c.recv(4096): data += chunk\n"
    "open(sys.argv[1] + '/got.tmp', 'wb').write(data)\n"
    "import os; os.rename(sys.argv[1] + '/got.tmp', sys.argv[1] + '/got')\n"
)


async def test_class1_the_operators_loopback_connection_reaches_agent_mains_server(state_dir: Path) -> None:
    """Agent main leaves a listener on 127.0.0.1:47015 in its host runs' namespace. The operator's own
    exec (no agent named) talks to 127.0.0.1:47015, meaning a service of the machine's, and sends a
    secret; main's listener has it."""
    write_config(state_dir, FULL)
    tmp = os.environ["EXECHOST_HOST_PRIVATE"]
    (state_dir.parent / "listener.py").write_text(LISTENER)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        operator = await connect(state_dir)
        try:
            started = await agent.request(
                "exec",
                {
                    "command": f"nohup python3 {state_dir.parent}/listener.py {tmp} >/dev/null 2>&1 & "
                    f"while [ ! -e {tmp}/ready ]; do sleep 0.02; done; echo listening"
                },
            )
            assert "listening" in started["text"], started
            sent = await operator.request(
                "exec",
                {
                    "command": "python3 -c 'import socket; "
                    's = socket.create_connection(("127.0.0.1", 47015)); '
                    f's.sendall(b"{SECRET}"); s.close()\''
                },
            )
            if sent["details"]["exitCode"] != 0:
                return  # nothing listens there for the operator's command: main's server got nothing
            got = await agent.request(
                "exec",
                {"command": f"while [ ! -e {tmp}/got ]; do sleep 0.02; done; cat {tmp}/got", "timeout": 20},
            )
        finally:
            await agent.close()
            await operator.close()
    assert SECRET not in got["text"], got
