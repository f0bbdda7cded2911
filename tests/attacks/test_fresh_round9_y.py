"""Fresh round 9 (attacker Y): ambient authority and check-then-use against the gateway-host view."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import pytest

from engine import principals
from engine.protocol.frames import RemoteError
from engine.sandbox import bwraplimits
from tests.helpers.gateway import FULL, connect, gateway, listed, write_config

# The run's own pids cgroup, as /proc/self/cgroup names it (v1 `pids` line).
GROUP = "sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup"


def _needs_pids_group(state: Path) -> None:
    if bwraplimits.host_pids_group("probe") is None:
        pytest.skip("no pids cgroup can be made here")
    bwraplimits.drop_host_groups()


async def _runs(state: Path, *calls: tuple[str, str]) -> list[str]:
    write_config(state, FULL + listed(*dict.fromkeys(agent for agent, _ in calls)))
    out: list[str] = []
    async with gateway(state):
        client = await connect(state)
        try:
            for agent, command in calls:
                result = await client.request("exec", {"command": command, "agentId": agent})
                out.append(result["text"])
        finally:
            await client.close()
    return out


async def _agents_runs(state: Path, *calls: tuple[str, str]) -> list[str]:
    """As _runs, each on the agent's own connection: the operator's runs join a group of their own
    (bwraplimits.operator_pids_group), whichever agent they name."""
    write_config(state, FULL + listed(*dict.fromkeys(agent for agent, _ in calls)))
    out: list[str] = []
    async with gateway(state):
        for agent, command in calls:
            principals.mint(state, agent)
            client = await connect(state, operator=False, agent=agent)
            try:
                out.append((await client.request("exec", {"command": command}))["text"])
            finally:
                await client.close()
    return out


async def test_host_run_leaves_its_pids_cgroup(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): the view leaves
    /sys/fs/cgroup writable and the install's pids group is the gateway uid's (root's, or a delegated
    tree's): a host run writes 0 to its `tasks` and leaves its agent's cap"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); i=${{g%/*}}; i=${{i%/*}}; echo 0 > /sys/fs/cgroup/pids$i/tasks; echo GROUP=$({GROUP})"
    )
    (text,) = await _agents_runs(state_dir, ("main", cmd))
    assert "GROUP=/exechost-" in text and "/agent-main-" in text, text


async def test_host_run_joins_another_agents_pids_cgroup(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): a host run writes 0 to
    another agent's host-run pids group `tasks` (the same uid owns every agent's group): its fork bomb then
    fills the other agent's quarter of pid_max, not its own"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); i=${{g%/*}}; i=${{i%/*}}; "
        "for t in /sys/fs/cgroup/pids$i/agent-victim-*/host/tasks; do echo 0 > $t; done; "
        f"echo GROUP=$({GROUP})"
    )
    _, text = await _agents_runs(state_dir, ("victim", "true"), ("main", cmd))
    group = text.split("GROUP=")[-1]
    assert "/agent-main-" in group and "/agent-victim-" not in group, text


async def test_host_run_lifts_its_own_pids_cap(state_dir: Path) -> None:
    """Open before the fix on this branch (/sys/fs/cgroup read-only in every view): a host run writes `max` to
    its own agent's and the install's pids.max (cgroup files the gateway's uid owns, writable in the view):
    the per-agent and per-install caps are its to lift"""
    _needs_pids_group(state_dir)
    cmd = (
        f"g=$({GROUP}); a=${{g%/*}}; echo max > /sys/fs/cgroup/pids$a/pids.max; "
        "echo CAP=$(cat /sys/fs/cgroup/pids$a/pids.max)"
    )
    (text,) = await _agents_runs(state_dir, ("main", cmd))
    assert "CAP=max" not in text, text


CONNECT = (
    'python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); '
    "s.sendall(b'cmd'); print('CONNECTED')\" {path}"
)


def _listener(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen(4)
    sock.setblocking(False)
    return sock


def _was_reached(sock: socket.socket) -> bool:
    """A connection the run made is in the backlog by the time the exec call has returned."""
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


async def test_controlmaster_socket_in_a_subdir_of_dot_ssh(state_dir: Path) -> None:
    """Open before the fix on this branch (dirshadow copies subdirectories too): dirshadow drops sockets from
    ~/.ssh's own entries only; a subdirectory of ~/.ssh is bound read-only whole, so a ControlMaster socket
    at the usual ControlPath ~/.ssh/sockets/%C is connect(2)-able from a host run: commands on the node as
    the operator"""
    home = Path(os.environ["HOME"])
    nested = _listener(home / ".ssh" / "sockets" / "cm-nested")
    try:
        (text,) = await _runs(
            state_dir, ("main", CONNECT.format(path=home / ".ssh" / "sockets" / "cm-nested"))
        )
        assert not _was_reached(nested), text
    finally:
        nested.close()


async def test_controlmaster_socket_in_dot_ssh_itself_is_gone(state_dir: Path) -> None:
    """Regression (held): ~/.ssh is shown as a copy of its entries without its sockets, and a socket made
    there after the kept view was built is absent too (the copy is a tmpfs, not the directory)."""
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text("Host *\n  ControlPath ~/.ssh/cm-%C\n")
    top = _listener(home / ".ssh" / "cm-top")
    late_path = home / ".ssh" / "cm-late"
    try:
        write_config(state_dir, FULL)
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                first = await client.request(
                    "exec", {"command": CONNECT.format(path=home / ".ssh" / "cm-top")}
                )
                late = _listener(late_path)
                try:
                    second = await client.request("exec", {"command": CONNECT.format(path=late_path)})
                    assert not _was_reached(late), second["text"]
                finally:
                    late.close()
            finally:
                await client.close()
        assert not _was_reached(top), first["text"]
    finally:
        top.close()


async def test_runtime_dir_bus_socket_reachable(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Open before (round 9 y): the gateway user's runtime dir ($XDG_RUNTIME_DIR: the systemd user bus,
    gpg-agent, rootless docker) was connect(2)-able from host runs. By construction now it is one of the
    agent's own private dirs (engine.commands.hostprivate.DEFAULT names `$XDG_RUNTIME_DIR`), beside the
    suite's stand-in for /tmp."""
    runtime = state_dir.parent / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("EXECHOST_HOST_PRIVATE", os.environ["EXECHOST_HOST_PRIVATE"] + ":$XDG_RUNTIME_DIR")
    bus = _listener(runtime / "bus")
    try:
        (text,) = await _runs(state_dir, ("main", CONNECT.format(path=runtime / "bus")))
        assert not _was_reached(bus), text
    finally:
        bus.close()


async def test_gateway_own_agent_and_its_siblings_are_gone(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (held; stop 12's final run found it open): the gateway's own $SSH_AUTH_SOCK, named by no
    node, is not reachable, and neither is another socket beside it nor one below it, though its 0700
    directory lies in a world-writable tree (the suite's /tmp root, which hostPrivate does not cover and no
    tree layer holds): the directory is a read-only layer of every run's own (hostroots.socket_dirs), where
    its other files read as they are."""
    agent_dir = state_dir.parent / "ssh-AbC"
    agent_dir.mkdir(mode=0o700)
    (agent_dir / "notes").write_text("NOTE-beside\n")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_dir / "agent.1"))
    own = _listener(agent_dir / "agent.1")
    sibling = _listener(agent_dir / "agent.2")
    deeper = _listener(agent_dir / "sub" / "agent.3")
    try:
        texts = await _runs(
            state_dir,
            ("main", CONNECT.format(path=agent_dir / "agent.1")),
            ("main", CONNECT.format(path=agent_dir / "agent.2")),
            ("main", CONNECT.format(path=agent_dir / "sub" / "agent.3")),
            ("main", f"cat {agent_dir}/notes"),
        )
        assert not _was_reached(own), texts[0]
        assert not _was_reached(sibling), texts[1]
        assert not _was_reached(deeper), texts[2]
        assert "NOTE-beside" in texts[3], texts[3]
    finally:
        own.close()
        sibling.close()
        deeper.close()


async def test_gateway_own_agents_siblings_are_gone_from_a_run_of_its_own(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same from a run in a bwrap of its own (its workdir in its private /tmp: own-pts makes the layers
    before bwrap), with a socket bound beside the agent's after the gateway's views were made."""
    agent_dir = state_dir.parent / "ssh-AbC"
    agent_dir.mkdir(mode=0o700)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_dir / "agent.1"))
    own = _listener(agent_dir / "agent.1")
    write_config(state_dir, FULL)
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            await client.request("exec", {"command": "true", "agentId": "main"})
            late = _listener(agent_dir / "agent.2")
            try:
                texts = []
                for name in ("agent.1", "agent.2"):
                    call = {
                        "command": CONNECT.format(path=agent_dir / name),
                        "agentId": "main",
                        "workdir": private,
                    }
                    texts.append((await client.request("exec", call))["text"])
                assert not _was_reached(late), texts[1]
            finally:
                late.close()
            assert not _was_reached(own), texts[0]
        finally:
            await client.close()
            own.close()


async def test_ssh_include_glob_in_a_directory_part(state_dir: Path) -> None:
    """Open before the fix on this branch: ~/.ssh/config `Include /dir/*/ssh.conf` (a glob in a dir part,
    or `**`): hostview keeps os.path.dirname of the pattern (`/dir/*`, no directory) and binds only files
    that match now, so a run makes /dir/new/ssh.conf; asyncssh reads it at the next node connect and its
    `Match exec` runs in the gateway, outside any view"""
    import asyncssh

    home = Path(os.environ["HOME"])
    dots = state_dir.parent / "dots"
    (dots / "work").mkdir(parents=True)
    (dots / "work" / "ssh.conf").write_text("Host work\n  User me\n")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f"Include {dots}/*/ssh.conf\n")
    marker = state_dir.parent / "ran-in-gateway"
    plant = f"mkdir -p {dots}/new && printf 'Match exec \"touch {marker}\"\\n' > {dots}/new/ssh.conf"
    await _runs(state_dir, ("main", plant))
    # what engine.nodes.dial.refuse_ssh_config_proxy does at every node connect, in the gateway
    with contextlib.suppress(Exception):
        asyncssh.SSHClientConnectionOptions(config=(), host="node1", client_keys=None, known_hosts=None)
    assert not marker.exists()


async def test_ssh_include_glob_in_the_file_part_holds(state_dir: Path) -> None:
    """Regression (held): `Include /dir/*.conf` keeps /dir whole, so no run adds a file it matches."""
    home = Path(os.environ["HOME"])
    dots = state_dir.parent / "dots"
    dots.mkdir()
    (dots / "work.conf").write_text("Host work\n  User me\n")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f"Include {dots}/*.conf\n")
    (text,) = await _runs(state_dir, ("main", f"echo 'Match exec \"true\"' > {dots}/new.conf"))
    assert not (dots / "new.conf").exists(), text


def _node(home: Path, key: Path) -> str:
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text("")
    return FULL + (
        f'[nodes.n1]\nhost = "127.0.0.1"\nport = 2\nuser = "x"\nidentityFile = "{key}"\n'
        f'knownHosts = "{home}/.ssh/known_hosts"\n'
    )


@pytest.mark.parametrize("sub", [".", "nodes"])
async def test_node_key_in_dot_ssh_or_a_subdir_is_hidden(state_dir: Path, sub: str) -> None:
    """A node's identityFile in ~/.ssh or in a directory below it (~/.ssh/nodes/id_node). Open before
    the fix on this branch: dirshadow covered ~/.ssh/nodes first, then ~/.ssh with a bind of the real
    ~/.ssh/nodes over that cover, so the key was readable (fixed: outer directories are covered first)."""
    home = Path(os.environ["HOME"])
    keydir = home / ".ssh" / sub
    keydir.mkdir(parents=True, mode=0o700, exist_ok=True)
    key = keydir / "id_node"
    key.write_text("SECRET-NODE-KEY\n")
    write_config(state_dir, _node(home, key))
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            result = await client.request("exec", {"command": f"cat {key}; ls -a {keydir}"})
        finally:
            await client.close()
    assert "SECRET-NODE-KEY" not in result["text"], result["text"]


async def test_node_key_in_the_home_rotated_under_a_running_view(state_dir: Path) -> None:
    """Open before (round 9 y): a node key directly in the home (identityFile = ~/node.key) kept a per-file
    bind (no cover for the home), so rotated by rm + new file, the new dentry was unbound in every running
    view and a background run started before read the new key. By construction now: a key file where no
    cover can be made (the home itself, `/`, a directory holding the home) refuses the view, naming what
    to change, and nothing runs."""
    home = Path(os.environ["HOME"])
    key = home / "node.key"
    key.write_text("OLD-KEY\n")
    out = state_dir.parent / "out"
    write_config(state_dir, _node(home, key))
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            with pytest.raises(RemoteError, match=r"directly in .* move it into a directory of its own"):
                await client.request("exec", {"command": f"cat {key} > {out}", "background": True})
        finally:
            await client.close()
    assert not out.exists()


async def test_ssh_include_with_dotdot_walks_a_swapped_dir(state_dir: Path) -> None:
    """Open before the fix on this branch: ~/.ssh/config `Include /dir/sub/../common.conf`: hostview keeps the
    realpath (/dir/common.conf) but not the walked /dir/sub (walked_dirs is applied to git includes only); a
    run swaps /dir/sub for a link, asyncssh follows `..` from its target and runs the planted `Match exec`"""
    import asyncssh

    home = Path(os.environ["HOME"])
    d = state_dir.parent / "dots"
    (d / "sub").mkdir(parents=True)
    (d / "common.conf").write_text("Host work\n  User me\n")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f"Include {d}/sub/../common.conf\n")
    evil = state_dir.parent / "evil"
    marker = state_dir.parent / "ran-in-gateway"
    plant = (
        f"mkdir -p {evil}/d && printf 'Match exec \"touch {marker}\"\\n' > {evil}/common.conf && "
        f"rmdir {d}/sub && ln -s {evil}/d {d}/sub"
    )
    (text,) = await _runs(state_dir, ("main", plant))
    with contextlib.suppress(Exception):  # engine.nodes.link's probe at every node connect, in the gateway
        asyncssh.SSHClientConnectionOptions(config=(), host="node1", client_keys=None, known_hosts=None)
    assert not marker.exists(), text


async def test_node_key_inside_a_host_writable_dir_refuses_the_view(state_dir: Path) -> None:
    """Regression (held): a node key below a `hostWritable` dir (where no cover is made: a run could rename
    the directory holding it) makes the view refuse, rather than leave the key to a per-file bind there."""
    home = Path(os.environ["HOME"])
    key = home / "work" / "keys" / "id_node"
    key.parent.mkdir(parents=True)
    key.write_text("SECRET-NODE-KEY\n")
    config = _node(home, key).replace('ask = "off"\n', 'ask = "off"\nhostWritable = ["~/work"]\n', 1)
    write_config(state_dir, config)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            with pytest.raises(RemoteError, match="hostWritable names ~/work"):
                await client.request("exec", {"command": f"cat {key}; mv {key.parent} {home}/work/k2"})
        finally:
            await client.close()
    assert key.exists()
