"""The SSH link against real OpenSSH sshd nodes: host keys, hello, node.json, system.run, drops."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config.loader import load_config
from engine.nodes.link import NodeError, NodeLink
from tests.helpers.sshd import SshdNode, ssh_agent


def link_for(state_dir: Path, name: str, **kwargs: object) -> NodeLink:
    cfg = load_config(state_dir / "config.toml").nodes[name]
    return NodeLink(cfg, **kwargs)  # type: ignore[arg-type]


def node_config(node: SshdNode, text: str) -> None:
    (node.state_dir / "config.toml").write_text(text)


FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


async def test_hello_and_node_json(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    link = link_for(state_dir, "alpha")
    try:
        await link.ensure()
        assert link.state == "connected"
        assert link.hello is not None and "system.run" in link.hello.caps
        ident = json.loads((alpha.state_dir / "node.json").read_text())
        assert ident["version"] == 1 and ident["nodeId"] == link.hello.node_id
        assert (alpha.state_dir / "node.json").stat().st_mode & 0o777 == 0o600
        assert await link.ping() > 0
        # The id is kept: a second connection is the same node.
        await link.close()
        again = link_for(state_dir, "alpha")
        await again.ensure()
        assert again.hello is not None and again.hello.node_id == ident["nodeId"]
        await again.close()
    finally:
        await link.close()


async def test_unknown_host_key_is_refused_and_nothing_runs(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha = sshd_nodes[0]
    alpha.known_hosts.write_text("")  # nothing trusted
    link = link_for(state_dir, "alpha", reconnect=False)
    with pytest.raises(NodeError) as err:
        await link.call("system.run", {"command": ["/bin/sh", "-lc", "touch /tmp/x"]})
    text = str(err.value)
    assert str(alpha.known_hosts) in text
    assert f"ssh-keyscan -p {alpha.port} {alpha.addr} >> {alpha.known_hosts}" in text
    assert link.state == "down" and link.last_error == text
    assert not (alpha.state_dir / "node.json").exists()  # serve never started


async def test_changed_host_key_is_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    other = alpha.root / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (alpha.root / "other_key.pub").read_text().split()
    alpha.known_hosts.write_text(f"[{alpha.addr}]:{alpha.port} {pub[0]} {pub[1]}\n")
    link = link_for(state_dir, "alpha", reconnect=False)
    with pytest.raises(NodeError, match=r"not trusted by .* \(unknown or changed\)"):
        await link.ensure()
    assert not (alpha.state_dir / "node.json").exists()


async def test_missing_exechost_says_what_to_install(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    config = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        config.replace(sshd_nodes[0].config_toml().split("exechost =")[1], ' "/nonexistent/exechost"\n', 1)
    )
    link = link_for(state_dir, "alpha", reconnect=False)
    with pytest.raises(NodeError, match="was not found on the node: install exechost there"):
        await link.ensure()


async def test_raw_command_must_match_argv(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    node_config(sshd_nodes[0], FULL)
    link = link_for(state_dir, "alpha")
    try:
        ok = await link.call(
            "system.run", {"command": ["/bin/sh", "-lc", "echo ok"], "rawCommand": "echo ok"}
        )
        assert ok.ok and ok.payload is not None and ok.payload["stdout"].strip() == "ok"
        assert ok.payload["exitCode"] == 0 and ok.payload["success"] is True
        bad = await link.call(
            "system.run", {"command": ["/bin/sh", "-lc", "echo ok"], "rawCommand": "echo no"}
        )
        assert not bad.ok and bad.error == {
            "code": "RAW_COMMAND_MISMATCH",
            "message": "INVALID_REQUEST: rawCommand does not match command",
        }
    finally:
        await link.close()


async def test_concurrent_requests_on_one_channel(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    node_config(sshd_nodes[0], FULL)
    link = link_for(state_dir, "alpha")
    try:
        calls = [
            link.call("system.run", {"command": ["/bin/sh", "-lc", f"sleep 0.$((RANDOM % 3)); echo n{i}"]})
            for i in range(20)
        ]
        results = await asyncio.gather(*calls)
        assert [r.payload["stdout"].strip() for r in results if r.payload] == [f"n{i}" for i in range(20)]
    finally:
        await link.close()


async def test_sshd_killed_mid_command_then_reconnects(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    node_config(alpha, FULL)
    link = link_for(state_dir, "alpha")
    try:
        await link.ensure()
        running = asyncio.ensure_future(link.call("system.run", {"command": ["/bin/sh", "-lc", "sleep 30"]}))
        await asyncio.sleep(0.5)
        alpha.stop()
        with pytest.raises(NodeError, match=r"link lost .*outcome on the node is unknown"):
            await running
        assert link.state in ("down", "connecting")
        assert link.last_error and "link lost" in link.last_error
        alpha.start()
        for _ in range(200):  # the backoff loop reconnects on its own
            if link.state == "connected":
                break
            await asyncio.sleep(0.05)
        res = await link.call("system.run", {"command": ["/bin/sh", "-lc", "echo back"]})
        assert res.ok and res.payload is not None and res.payload["stdout"].strip() == "back"
    finally:
        await link.close()
    assert os.path.exists(alpha.state_dir / "node.json")


async def test_proxy_jump_checks_the_jump_hosts_key_against_the_nodes_known_hosts(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """beta reached through alpha: both keys must be in the node's knownHosts, the jump's too."""
    from tests.helpers.sshd import _user

    alpha, beta = sshd_nodes
    base = (state_dir / "config.toml").read_text()
    jump = f'proxyJump = "{_user()}@{alpha.addr}:{alpha.port}"\n'
    (state_dir / "config.toml").write_text(base.replace("[nodes.beta]\n", f"[nodes.beta]\n{jump}"))
    link = link_for(state_dir, "beta", reconnect=False)
    try:
        await link.ensure()
        res = await link.call("system.which", {"bins": ["sh"]})
        assert res.ok and link.hello is not None and link.state == "connected"
        assert len(link._jumps) == 1  # the hop is a connection of its own, closed with the link
    finally:
        await link.close()
    assert link._jumps == []
    # Distrust only the jump host: refused naming the jump, before anything reaches beta.
    lines = alpha.known_hosts.read_text().splitlines()
    alpha.known_hosts.write_text("".join(ln + "\n" for ln in lines if f"[{alpha.addr}]" not in ln))
    marker = beta.marks / "ran"
    refused = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match=rf"jump host {alpha.addr}:{alpha.port} \(proxyJump\) is not trusted"):
        await refused.call("system.run", {"command": ["/bin/sh", "-lc", f"touch {marker}"]})
    assert not marker.exists() and refused.state == "down"
    await refused.close()
    bad = link_for(state_dir, "beta", reconnect=False)
    bad.cfg.proxy_jump = "host:notaport"
    with pytest.raises(NodeError, match="invalid proxyJump hop 'host:notaport'"):
        await bad.ensure()
    await bad.close()


async def test_ssh_config_supplies_what_the_node_table_leaves_out(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """`host` may be a ~/.ssh/config alias: HostName, Port and User come from there; the host key is still
    checked against the node's knownHosts. The login key never does (engine.config.nodekeys)."""
    from tests.helpers.sshd import _user

    beta = sshd_nodes[1]
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "config").write_text(
        f"Host beta-alias\n  HostName {beta.addr}\n  Port {beta.port}\n  User {_user()}\n"
    )
    (state_dir / "config.toml").write_text(
        f'[nodes.aliased]\nhost = "beta-alias"\nknownHosts = "{beta.known_hosts}"\n'
        f'identityFile = "{beta.client_key}"\nexechost = "{link_exechost(state_dir, beta)}"\n'
    )
    link = link_for(state_dir, "aliased", reconnect=False)
    try:
        await link.ensure()
        assert link.state == "connected" and link.status()["port"] is None  # left to ~/.ssh/config
    finally:
        await link.close()
    beta.known_hosts.write_text("")
    refused = link_for(state_dir, "aliased", reconnect=False)
    with pytest.raises(NodeError, match="is not trusted"):
        await refused.ensure()
    await refused.close()


def _other_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


async def test_a_node_logs_in_only_with_the_key_its_table_names(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Issue 27 (round 7 n): the credentials a link uses are exactly the ones the host view hides. The
    key beta accepts sits where ssh looks by default (~/.ssh/id_ed25519) and is ~/.ssh/config's
    IdentityFile for beta: without identityFile the link refuses before connecting, naming the key to
    set; with an identityFile beta does not accept, the login fails (neither of the others was tried)."""
    beta = sshd_nodes[1]
    ssh = Path(os.environ["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    default = ssh / "id_ed25519"
    default.write_bytes(beta.client_key.read_bytes())
    default.chmod(0o600)
    (ssh / "config").write_text(f"Host {beta.addr}\n  IdentityFile {beta.client_key}\n")
    text = (state_dir / "config.toml").read_text()
    bare = text.replace(f'identityFile = "{beta.client_key}"\n', "")
    (state_dir / "config.toml").write_text(bare)
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match=r"node beta: no login key is set.*nodes\.beta\.identityFile = "):
        await link.ensure()
    await link.close()
    wrong = _other_key(state_dir.parent / "not-beta")
    (state_dir / "config.toml").write_text(text.replace(str(beta.client_key), str(wrong)))
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match="cannot connect"):
        await link.ensure()
    await link.close()
    (state_dir / "config.toml").write_text(text)  # the key it names: logged in
    link = link_for(state_dir, "beta", reconnect=False)
    try:
        await link.ensure()
        assert link.state == "connected"
    finally:
        await link.close()


@pytest.fixture
def agent_sock(state_dir: Path) -> Iterator[Path]:
    with ssh_agent(state_dir.parent / "agent.sock") as sock:
        yield sock


def _agent_add(sock: Path, key: Path) -> None:
    env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
    subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, capture_output=True)


async def test_a_proxy_jump_hop_logs_in_with_the_nodes_key_and_never_the_ssh_configs(
    sshd_nodes: list[SshdNode], state_dir: Path, agent_sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hop (alpha) accepts only a default key (~/.ssh/id_ed25519, also in the gateway's ssh-agent);
    beta's identityFile is not it: the hop is refused, so nothing reaches beta. A ProxyJump ~/.ssh/config
    gives the host is refused by name (its hop would log in with ssh's own keys), never followed."""
    from tests.helpers.sshd import _user

    alpha, beta = sshd_nodes
    ssh = Path(os.environ["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    default = _other_key(ssh / "id_ed25519")
    (alpha.root / "authorized_keys").write_text(Path(f"{default}.pub").read_text())
    _agent_add(agent_sock, default)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_sock))
    base = (state_dir / "config.toml").read_text()
    jump = f'proxyJump = "{_user()}@{alpha.addr}:{alpha.port}"\n'
    (state_dir / "config.toml").write_text(base.replace("[nodes.beta]\n", f"[nodes.beta]\n{jump}"))
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match=rf"jump host {alpha.addr}:{alpha.port}: "):
        await link.ensure()
    assert link.state == "down" and link._jumps == []
    await link.close()
    (ssh / "config").write_text(f"Host {beta.addr}\n  ProxyJump {_user()}@{alpha.addr}:{alpha.port}\n")
    (state_dir / "config.toml").write_text(base)
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match=r"~/.ssh/config gives 127.0.0.3 ProxyJump .*nodes\.beta\.proxyJump"):
        await link.ensure()
    await link.close()


async def test_the_ssh_agent_is_used_only_when_the_node_names_it(
    sshd_nodes: list[SshdNode], state_dir: Path, agent_sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's SSH_AUTH_SOCK (and ~/.ssh/config's IdentityAgent) holds the key beta accepts: a node
    naming another identityFile never tries it; `identityAgent = "SSH_AUTH_SOCK"` (or the socket's path)
    logs in through it, no file key."""
    beta = sshd_nodes[1]
    node_config(beta, FULL)
    _agent_add(agent_sock, beta.client_key)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_sock))
    ssh = Path(os.environ["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "config").write_text(f"Host {beta.addr}\n  IdentityAgent {agent_sock}\n  ForwardAgent yes\n")
    text = (state_dir / "config.toml").read_text()
    wrong = _other_key(state_dir.parent / "not-beta")
    (state_dir / "config.toml").write_text(text.replace(str(beta.client_key), str(wrong)))
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(NodeError, match="cannot connect"):
        await link.ensure()
    await link.close()
    for named in ("SSH_AUTH_SOCK", str(agent_sock)):
        agent_only = text.replace(f'identityFile = "{beta.client_key}"', f'identityAgent = "{named}"')
        (state_dir / "config.toml").write_text(agent_only)
        link = link_for(state_dir, "beta", reconnect=False)
        try:
            await link.ensure()
            # ForwardAgent in the ssh config is not followed: the node gets no way to the agent
            echo = ["/bin/sh", "-lc", "echo ${SSH_AUTH_SOCK:-none}"]
            res = await link.call("system.run", {"command": echo})
            assert res.ok and res.payload is not None and res.payload["stdout"].strip() == "none", res
        finally:
            await link.close()
    monkeypatch.delenv("SSH_AUTH_SOCK")
    (state_dir / "config.toml").write_text(agent_only.replace(str(agent_sock), "SSH_AUTH_SOCK"))
    link = link_for(state_dir, "beta", reconnect=False)
    with pytest.raises(
        NodeError, match='identityAgent = "SSH_AUTH_SOCK" but the gateway has no SSH_AUTH_SOCK'
    ):
        await link.ensure()
    await link.close()


def link_exechost(state_dir: Path, node: SshdNode) -> str:
    import re

    text = node.config_toml()
    found = re.search(r'exechost = "([^"]+)"', text)
    assert found is not None
    return found.group(1)


async def test_system_run_answers_stdout_and_stderr_apart_and_merged_in_order(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Reference §5.4's result keeps the streams apart; `output` has both as they were read, which is
    what the gateway shows the agent (stdout || stderr would hide the error whenever stdout exists)."""
    node_config(sshd_nodes[0], FULL)
    (state_dir / "config.toml").write_text(
        (state_dir / "config.toml")
        .read_text()
        .replace(
            "[nodes.alpha]", '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n[nodes.alpha]', 1
        )
    )
    script = "echo one; echo two >&2; echo three; exit 4"
    link = link_for(state_dir, "alpha")
    try:
        res = await link.call("system.run", {"command": ["/bin/sh", "-lc", script], "rawCommand": script})
        assert res.ok and res.payload is not None
        p = res.payload
        assert (p["stdout"], p["stderr"]) == ("one\nthree\n", "two\n"), p
        # Two pipes: their interleaving is as read, so only what is in `output` is certain, not its order.
        assert sorted(p["output"].split()) == ["one", "three", "two"]
        assert p["exitCode"] == 4 and p["success"] is False
        big = "head -c 300000 /dev/zero | tr '\\0' x; echo; echo oops >&2"
        res = await link.call("system.run", {"command": ["/bin/sh", "-lc", big], "rawCommand": big})
        assert res.payload is not None and res.payload["stderr"] == "oops\n\n... (truncated)"
        assert len(res.payload["stdout"]) == 200_000
    finally:
        await link.close()
    from tests.helpers.gateway import connect, gateway

    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        try:
            got = await agent.request("exec", {"command": script, "node": "alpha"})
            assert sorted(got["text"].split()[:3]) == ["one", "three", "two"], got  # stderr shown too
        finally:
            await agent.close()
