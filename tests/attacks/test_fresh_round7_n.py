"""Fresh round 7 n: the host view's writable workdir against what later runs read or execute (closed:
the home is writable only under hostWritable, and what a trusted reader reads is kept, present or not,
through every link on its way)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks.harness import ALLOWLIST, attempt, tool
from tests.helpers.bwrap import needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short root (socket paths <= 107 bytes) holding the state dir, the home and the agent's scratch."""
    root = Path(tempfile.mkdtemp(prefix="r7n", dir="/tmp"))
    (root / "state").mkdir(mode=0o700)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(root / "state"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


async def test_path_prepend_dir_in_home_is_not_a_writable_workdir(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = short
    home = _home(tmp_path, monkeypatch)
    tools = home / "tools"
    tools.mkdir()
    state = tmp_path / "state"
    marker = tmp_path / "out" / "planted-ran"
    marker.parent.mkdir()
    # The agent's payload, made where every run may write (outside the home).
    payload = tool(tmp_path / "scratch" / "grep", f'#!/bin/sh\necho ran > {marker}\nexec /bin/grep "$@"\n')
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'pathPrepend = ["{tools}"]\n'
    )
    plant = await attempt(
        state, f"cp {payload} grep", allow=[("/usr/bin/cp", None)], config=config, workdir=str(tools)
    )
    assert plant["status"] == "completed", plant
    data = tmp_path / "scratch" / "notes.txt"
    data.write_text("hello\n")
    # egrep is `exec grep -E "$@"`: grep by name, from the PATH the run has (pathPrepend first).
    run = await attempt(state, f"egrep hello {data}", allow=[("/usr/bin/egrep", None)], config=config)
    assert run["status"] == "completed", run["_text"]
    assert not marker.exists(), "the planted grep ran"
    assert not (tools / "grep").exists()


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


async def test_a_file_the_global_git_config_includes_is_not_writable(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(short, monkeypatch)
    (home / ".gitconfig").write_text("[include]\n\tpath = dotfiles/git.inc\n")
    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "git.inc").write_text("[user]\n\tname = operator\n")
    state = short / "state"
    marker = short / "out" / "textconv-ran"
    marker.parent.mkdir()
    conv = tool(short / "scratch" / "conv", f'#!/bin/sh\necho ran > {marker}\ncat "$1"\n')
    payload = short / "scratch" / "inc"
    payload.write_text(f'[user]\n\tname = operator\n[diff "evil"]\n\ttextconv = {conv}\n')
    plant = await attempt(
        state, f"cp {payload} git.inc", allow=[("/usr/bin/cp", None)], workdir=str(dotfiles)
    )
    assert plant["status"] == "completed", plant["_text"]
    repo = short / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("*.txt diff=evil\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    (repo / "a.txt").write_text("two\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "y")
    run = await attempt(state, "git log -p", allow=[("/usr/bin/git", None)], workdir=str(repo))
    assert run["status"] == "completed", run["_text"]
    assert not marker.exists(), "the planted textconv ran"
    assert "textconv" not in (dotfiles / "git.inc").read_text()


async def test_the_homes_node_modules_is_not_a_writable_workdir(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(short, monkeypatch)
    module = home / "node_modules" / "leftpad"
    module.mkdir(parents=True)
    (module / "index.js").write_text("module.exports = (s) => s;\n")
    payload = short / "scratch" / "index.js"
    payload.parent.mkdir()
    payload.write_text("module.exports = (s) => 'planted';\n")
    plant = await attempt(
        short / "state", f"cp {payload} index.js", allow=[("/usr/bin/cp", None)], workdir=str(module)
    )
    assert plant["status"] == "completed", plant["_text"]
    assert "planted" not in (module / "index.js").read_text()


def _linked_gitconfig(home: Path, hops: int) -> Path:
    """~/.gitconfig -> dotfiles/gitconfig (-> ../Sync/gitconfig, a synced copy, when hops == 2)."""
    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    real = home / "Sync" / "gitconfig" if hops == 2 else dotfiles / "gitconfig"
    real.parent.mkdir(exist_ok=True)
    real.write_text("[user]\n\tname = operator\n")
    if hops == 2:
        (dotfiles / "gitconfig").symlink_to("../Sync/gitconfig")
    (home / ".gitconfig").symlink_to("dotfiles/gitconfig")
    return dotfiles


async def test_a_middle_link_of_the_global_git_config_cannot_be_repointed(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(short, monkeypatch)
    dotfiles = _linked_gitconfig(home, hops=2)
    evil = short / "scratch" / "evil"
    evil.parent.mkdir()
    evil.write_text("[core]\n\tfsmonitor = /tmp/evil\n")
    plant = await attempt(
        short / "state", f"ln -sfn {evil} gitconfig", allow=[("/usr/bin/ln", None)], workdir=str(dotfiles)
    )
    assert plant["status"] == "completed", plant["_text"]
    assert "fsmonitor" not in (home / ".gitconfig").read_text(), plant["_text"]


async def test_the_single_link_target_of_the_global_git_config_is_not_writable(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed attempt: with ~/.gitconfig -> dotfiles/gitconfig, the workdir ~/dotfiles holds its real path,
    so the run there writes nothing in the home (round 5 i's link, through the writable workdir)."""
    home = _home(short, monkeypatch)
    dotfiles = _linked_gitconfig(home, hops=1)
    evil = short / "scratch" / "evil"
    evil.parent.mkdir()
    evil.write_text("[core]\n\tfsmonitor = /tmp/evil\n")
    plant = await attempt(
        short / "state",
        f"ln -sfn {evil} gitconfig; cp {evil} gitconfig",
        allow=[("/usr/bin/ln", None), ("/usr/bin/cp", None)],
        workdir=str(dotfiles),
    )
    assert "fsmonitor" not in (home / ".gitconfig").read_text(), plant["_text"]


async def test_a_missing_known_hosts_outside_the_home_cannot_be_created(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home(short, monkeypatch)
    etc = short / "etc"
    etc.mkdir()
    known = etc / "known_hosts"
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[nodes.build]\nhost = "127.0.0.1"\nport = 1\nknownHosts = "{known}"\n'
    )
    payload = short / "scratch" / "kh"
    payload.parent.mkdir()
    payload.write_text(
        "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAgentsOwnKeyAgentsOwnKeyAgentsOwnKey00\n"
    )
    work = short / "work"
    work.mkdir()
    plant = await attempt(
        short / "state",
        f"cp {payload} {known}",
        allow=[("/usr/bin/cp", None)],
        config=config,
        workdir=str(work),
    )
    assert plant["status"] == "completed", plant["_text"]
    # The gateway made it empty (0600) and bound it read-only: it trusts no key, and `ssh-keyscan >>` works.
    assert known.read_text() == "" and known.stat().st_mode & 0o777 == 0o600, plant["_text"]


async def test_the_default_ssh_key_a_node_logs_in_with_is_hidden(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed by construction (engine.config.nodekeys): a node logs in only with the credentials its table
    names, and the host view hides exactly those. ~/.ssh/id_ed25519 is no node's credential unless named:
    a node without identityFile refuses to log in (naming the key to set) and never tries it; once the
    table names it, an allowlisted `cat` reads an empty file."""
    from engine.config.model import NodeConfig
    from engine.nodes.link import NodeError, NodeLink

    home = _home(short, monkeypatch)
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    key = ssh / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nTHE-GATEWAYS-NODE-LOGIN-KEY\n")
    key.chmod(0o600)
    known = short / "known_hosts"
    known.write_text("")
    link = NodeLink(NodeConfig("build", "127.0.0.1", port=1, known_hosts=str(known)), reconnect=False)
    with pytest.raises(NodeError, match=r"node build: no login key is set.*nodes\.build\.identityFile"):
        await link.ensure()
    await link.close()
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[nodes.build]\nhost = "127.0.0.1"\nport = 1\nknownHosts = "{known}"\n'
        'identityFile = "~/.ssh/id_ed25519"\n'
    )
    run = await attempt(short / "state", f"cat {key}", allow=[("/usr/bin/cat", None)], config=config)
    assert run["status"] == "completed", run["_text"]
    assert "THE-GATEWAYS-NODE-LOGIN-KEY" not in run["_text"]


async def test_the_ssh_agent_a_node_logs_in_through_is_hidden(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that logs in through the gateway's ssh-agent (`identityAgent = "SSH_AUTH_SOCK"`): host runs
    get no SSH_AUTH_SOCK, and the socket itself, named outright by a script, is an empty file: the agent
    that signs the node's login signs nothing for them."""
    from tests.helpers.sshd import ssh_agent

    _home(short, monkeypatch)
    key = short / "nodekey"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "NODE-LOGIN", "-f", str(key)], check=True
    )
    known = short / "known_hosts"
    known.write_text("")
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        'treeSafe = ["lister", "probe"]\n'  # they load no code from their workdir
        f'[nodes.build]\nhost = "127.0.0.1"\nport = 1\nknownHosts = "{known}"\n'
        'identityAgent = "SSH_AUTH_SOCK"\n'
    )
    agent_dir = short / "agent"
    agent_dir.mkdir(mode=0o700)
    work = short / "work"  # an empty workdir: nothing there for a tool to load
    work.mkdir()
    with ssh_agent(agent_dir / "sock", key) as sock:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        lister = tool(
            short / "scratch" / "lister",
            '#!/bin/sh\necho "sock=${SSH_AUTH_SOCK:-none}"\nexec /usr/bin/ssh-add -L\n',
        )
        listed = await attempt(
            short / "state", str(lister), allow=[(str(lister), None)], config=config, workdir=str(work)
        )
        probe = tool(
            short / "scratch" / "probe", f"#!/bin/sh\nSSH_AUTH_SOCK={sock} exec /usr/bin/ssh-add -L\n"
        )
        named = await attempt(
            short / "state", str(probe), allow=[(str(probe), None)], config=config, workdir=str(work)
        )
    for run in (listed, named):
        assert run["status"] == "completed", run["_text"]
        assert "NODE-LOGIN" not in run["_text"] and "ssh-ed25519" not in run["_text"], run["_text"]
    assert "sock=none" in listed["_text"], listed["_text"]


async def test_an_existing_known_hosts_directory_cannot_be_renamed_away(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed attempt: with the node's knownHosts present, moving its directory aside and making a new one
    with the agent's file fails (the directory is a mountpoint in the view: EBUSY)."""
    _home(short, monkeypatch)
    etc = short / "etc"
    etc.mkdir()
    known = etc / "known_hosts"
    known.write_text(
        "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorsOwnKeyOperatorsOwnKeyOperat0\n"
    )
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[nodes.build]\nhost = "127.0.0.1"\nport = 1\nknownHosts = "{known}"\n'
    )
    payload = short / "scratch" / "kh"
    payload.parent.mkdir()
    payload.write_text(
        "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAgentsOwnKeyAgentsOwnKeyAgentsOwnKey00\n"
    )
    work = short / "work"
    work.mkdir()
    plant = await attempt(
        short / "state",
        f"mv {etc} {short}/etc2; mkdir {etc}; cp {payload} {known}; cp {payload} {etc}/x",
        allow=[("/usr/bin/mv", None), ("/usr/bin/mkdir", None), ("/usr/bin/cp", None)],
        config=config,
        workdir=str(work),
    )
    assert "Operators" in known.read_text() and not (short / "etc2").exists(), plant["_text"]


async def test_a_workdir_linked_into_a_dot_directory_writes_nothing(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed attempt: a link the agent made in its writable project (`cfg -> ../.config`) named as the next
    run's workdir is judged by its real path, a dot-directory: the home stays read-only there."""
    home = _home(short, monkeypatch)
    (home / ".config" / "git").mkdir(parents=True)
    project = home / "proj"
    project.mkdir()
    config = f'{ALLOWLIST}hostWritable = ["{project}"]\n'  # the project the operator lets runs write
    link = await attempt(
        short / "state",
        "ln -s ../.config cfg",
        allow=[("/usr/bin/ln", None)],
        workdir=str(project),
        config=config,
    )
    assert link["status"] == "completed" and (project / "cfg").is_symlink(), link["_text"]
    payload = short / "scratch" / "cfg"
    payload.parent.mkdir()
    payload.write_text("[core]\n\tfsmonitor = /tmp/evil\n")
    plant = await attempt(
        short / "state",
        f"cp {payload} git/config",
        allow=[("/usr/bin/cp", None)],
        workdir=str(project / "cfg"),
        config=config,
    )
    assert not (home / ".config" / "git" / "config").exists(), plant["_text"]


async def test_the_sandbox_rootfs_is_not_writable_by_host_commands(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home(short, monkeypatch)
    bin_dir = short / "rootfs" / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    tool(bin_dir / "bwrap", "#!/bin/sh\nexit 0\n")
    config = (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[agents.defaults.sandbox.bwrap]\nrootfs = "{short / "rootfs"}"\n'
    )
    payload = tool(short / "scratch" / "bwrap", "#!/bin/sh\necho agent-code\n")
    work = short / "work"
    work.mkdir()
    plant = await attempt(
        short / "state",
        f"cp {payload} {bin_dir / 'bwrap'}",
        allow=[("/usr/bin/cp", None)],
        config=config,
        workdir=str(work),
    )
    assert plant["status"] == "completed", plant["_text"]
    assert "agent-code" not in (bin_dir / "bwrap").read_text()
