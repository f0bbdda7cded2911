"""Fresh round 8 r: the home28 host view (read-only home, protected trusted files outside it) and the
nodekeys28 node credentials, attacked from gateway-host runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import gatewaydirs, hostoutside
from engine.sandbox import landlock, staticbuild
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import claim_state, connect, gateway, write_config
from tests.helpers.sshd import SshdNode, ssh_agent

pytestmark = needs_bwrap

# The production build, before the session's build cache wraps it (tests/helpers/staticcache.py).
_REAL_BUILD = staticbuild._build_locked

FULL = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n'


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short root (socket paths <= 107 bytes): the state dir, the home, and scratch outside the home."""
    root = Path(tempfile.mkdtemp(prefix="r8r", dir="/tmp"))
    (root / "state").mkdir(mode=0o700)
    home = root / "home"
    home.mkdir()
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    claim_state(root / "state")  # made here as the operator would: recorded before a config is written
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _in_private(short: Path, agent: str, path: str) -> bool:
    """Whether `path` (as a host run names it, under /tmp) is in that agent's own /tmp on the host."""
    from engine.commands import hostprivate

    binds = hostprivate.binds(str(short / "state"), agent, hostprivate.dests(["/tmp"]))
    source = hostprivate.source_of(binds, path)
    return source is not None and os.path.isfile(source)


@pytest.fixture
def default_private(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host view's default private dirs (the machine's real /tmp, /var/tmp, /dev/shm, runtime dir:
    engine.commands.hostprivate.DEFAULT), not the test suite's stand-in (tests/conftest.py): they are the
    run's own in its namespace, so nobody else's /tmp is touched."""
    monkeypatch.delenv("EXECHOST_HOST_PRIVATE", raising=False)


def _ssh(node: SshdNode, key: Path, command: str) -> str:
    """An ssh command line a host run could type: the node's own address and port, no host key check."""
    return (
        f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
        f"-o IdentitiesOnly=yes -i {key}.pub -p {node.port} {node.addr} {command}"
    )


async def test_the_node_key_in_the_operators_agent_is_not_a_host_runs(
    sshd_nodes: list[SshdNode], state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = sshd_nodes[0]
    # The operator's own ssh-agent (ssh-add, AddKeysToAgent, a desktop keyring) holds the key the node's
    # table names as identityFile; the gateway was started from that shell.
    sock = state_dir.parent / "agent.sock"
    with ssh_agent(sock, node.client_key):
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        config = FULL + (state_dir / "config.toml").read_text()
        # The .pub is readable (not a credential); the agent signs for it.
        out = await attempt(
            state_dir, _ssh(node, node.client_key, "echo LOGGED-IN-AS-GATEWAY"), config=config
        )
    assert "LOGGED-IN-AS-GATEWAY" not in out["_text"], out


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


async def test_the_global_hooks_path_outside_the_home_is_not_writable(short: Path) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    home = Path(os.environ["HOME"])
    hooks = short / "team" / "githooks"  # a shared hooks dir outside the home (a team's, a dotfiles tool's)
    hooks.mkdir(parents=True)
    (home / ".gitconfig").write_text(
        f"[user]\n\tname = op\n\temail = op@example.com\n[core]\n\thooksPath = {hooks}\n"
    )
    marker = short / "hook-ran"
    payload = short / "scratch" / "pre-commit"
    payload.parent.mkdir()
    payload.write_text(f"#!/bin/sh\necho planted > {marker}\n")
    payload.chmod(0o755)
    # An allowlisted cp, in the view (the home read-only, the state dir hidden).
    plant = await attempt(short / "state", f"cp {payload} {hooks}/pre-commit", allow=[("/usr/bin/cp", None)])
    assert plant["status"] == "completed", plant
    # Later, outside any view: the operator commits in a repository of their own.
    repo = home / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-qm", "m")
    assert not marker.exists(), "the planted hook ran in the operator's git"


async def test_a_file_the_ssh_config_includes_is_not_writable(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    home = Path(os.environ["HOME"])
    team = state_dir.parent / "team"
    team.mkdir()
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    # The operator's ssh config pulls in a shared file kept outside the home (a team's, a tool's).
    (home / ".ssh" / "config").write_text(f"Include {team}/ssh_config\n")
    marker = state_dir.parent / "match-exec-ran"
    nodes = (state_dir / "config.toml").read_text()
    plant = await attempt(
        state_dir,
        host="gateway",
        command=f"printf 'Match exec \"touch {marker}\"\\n' > {team}/ssh_config",
        config=FULL + nodes,
    )
    assert plant["status"] == "completed", plant
    # The gateway's next login to a node parses ~/.ssh/config (asyncssh), with its includes.
    # (its answer does not matter: the node may run it or ask its own approver)
    await attempt(state_dir, "true", config=FULL + nodes, host="node", node="alpha")
    assert not marker.exists(), "the planted Match exec ran in the gateway"


async def test_the_gateways_build_dir_in_tmp_is_not_a_host_runs(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    state = short / "state"
    evil = short / "scratch" / "evil"
    evil.parent.mkdir()
    evil.write_bytes(b'#!/bin/sh\nexec "$@"\n')  # a "landlock helper" that restricts nothing
    write_config(state, FULL)
    compiler = landlock._compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(staticbuild, "_build_locked", _REAL_BUILD)  # this test's own build
    # The gateway's temp dir is /tmp, shared with every host run; here a dir of this test's own, as shared
    # with its host runs, so the planted loop can touch no other engineer's build on this machine.
    shared_tmp = short / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    real_run = subprocess.run
    loop = asyncio.get_running_loop()
    async with gateway(state):
        client = await connect(state)
        ran: list[object] = []
        # A first host run makes the agent's network namespace, whose egress forwarder is a static build
        # too: made now, not by the planted run while the landlock build below holds the build lock.
        await client.request("exec", {"command": "true", "host": "gateway"})

        def compiled_then_the_agent_runs(argv: list[str], **kw: object) -> object:
            done = real_run(argv, **kw)  # type: ignore[call-overload]
            if argv and argv[0] == compiler:
                # The agent's host command, at the moment the compiler is done (in life: an inotify loop
                # in a background host run, woken by the build dir's IN_CLOSE_WRITE).
                plant = f'for f in {shared_tmp}/exechost-{landlock.NAME}-*/*; do cat {evil} > "$f"; done'
                call = client.request("exec", {"command": plant, "host": "gateway"})
                ran.append(asyncio.run_coroutine_threadsafe(call, loop).result(60))
            return done

        monkeypatch.setattr(subprocess, "run", compiled_then_the_agent_runs)
        try:
            await asyncio.to_thread(landlock.ensure_binary)
        finally:
            monkeypatch.setattr(subprocess, "run", real_run)
            await client.close()
    assert ran and ran[0]["details"]["status"] == "completed", ran  # type: ignore[index]
    assert landlock.binary_path().read_bytes() != evil.read_bytes(), "the agent's helper was installed"


async def test_the_gateways_path_dir_outside_the_home_is_not_writable(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    tools = short / "linuxbrew" / "bin"  # the operator's, outside the home, on the PATH it starts from
    tools.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    payload = short / "scratch" / "git"
    payload.parent.mkdir()
    payload.write_text(f'#!/bin/sh\necho planted > {short}/planted-ran\nexec /usr/bin/git "$@"\n')
    payload.chmod(0o755)
    plant = await attempt(short / "state", f"cp {payload} {tools}/git", allow=[("/usr/bin/cp", None)])
    assert plant["status"] == "completed", plant
    assert not (tools / "git").exists(), "the operator's next `git` is the agent's"


async def _poll_until_exit(client: object, sid: str) -> str:
    text = ""
    for _ in range(100):
        res = await client.request("process", {"action": "poll", "sessionId": sid, "timeout": 2000})  # type: ignore[attr-defined]
        text += res["text"]
        if res["details"]["status"] != "running":
            return text
    raise AssertionError(f"session {sid} did not end: {text!r}")


async def test_a_rotated_node_key_is_hidden_from_running_host_commands(short: Path) -> None:
    state = short / "state"
    keys = short / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "node_ed25519"
    key.write_text("OLD-KEY-SECRET\n")
    key.chmod(0o600)
    fifo = short / "go"
    os.mkfifo(fifo)
    config = FULL + (
        f'[nodes.build]\nhost = "127.0.0.9"\nidentityFile = "{key}"\nknownHosts = "{short}/kh"\n'
    )
    write_config(state, config)
    async with gateway(state):
        client = await connect(state)
        try:
            started = await client.request(
                "exec",
                {
                    "command": f"echo before:$(cat {key}); echo READY; read x < {fifo}; "
                    f"echo after:$(cat {key})",
                    "host": "gateway",
                    "background": True,
                },
            )
            sid = started["details"]["sessionId"]
            seen = ""
            while "READY" not in seen:
                res = await client.request("process", {"action": "poll", "sessionId": sid, "timeout": 2000})
                seen += res["text"]
                assert res["details"]["status"] == "running", seen
            assert "OLD-KEY" not in seen, seen  # hidden while the run started
            # The operator rotates the node's key: a new file renamed into place.
            (keys / "new").write_text("NEW-KEY-SECRET\n")
            os.replace(keys / "new", key)
            # READY is printed before the shell opens the FIFO: a write-only non-blocking open could come
            # first and fail (ENXIO). Opened read-write it needs no reader; held open until the run ends so
            # the line stays in the pipe for the `read` whenever it opens it.
            fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            try:
                os.write(fd, b"go\n")
                seen += await _poll_until_exit(client, sid)
            finally:
                os.close(fd)
        finally:
            await client.close()
    assert "NEW-KEY-SECRET" not in seen, seen


@pytest.mark.usefixtures("default_private")
async def test_the_operators_tmux_server_runs_nothing_for_a_host_run(short: Path) -> None:
    state = short / "state"
    sock = short / "tmux-op" / "default"  # as /tmp/tmux-$UID/default: the operator runs the gateway in tmux
    sock.parent.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], "TERM": "xterm"}
    subprocess.run(["tmux", "-S", str(sock), "new-session", "-d", "-s", "op", "cat"], env=env, check=True)
    out = short / "stolen"
    try:
        write_config(state, FULL)
        gatewaydirs.record(hostoutside.home_dir(), str(state))  # the operator's own state dir
        (state / "operator-secret").write_text("STATE-DIR-SECRET\n")
        run = await attempt(
            state,
            f"tmux -S {sock} run-shell 'cat {state}/operator-secret > {out}'",
            config=FULL,
            host="gateway",
        )
        assert run["status"] in ("completed", "failed"), run
        # the run's /tmp is the agent's own: no operator's server socket in it
        assert "no server running" in run["_text"] or "No such file" in run["_text"], run["_text"]
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], env=env, check=False, capture_output=True)
    assert not out.exists() or "STATE-DIR-SECRET" not in out.read_text(), "the run escaped its view"


async def test_the_gateways_import_path_outside_the_home_is_not_writable(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    lib = short / "opt-lib"  # e.g. PYTHONPATH=/opt/team/lib (a `module load`), owned by the operator
    lib.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(lib))
    monkeypatch.syspath_prepend(str(lib))  # as the gateway started with that PYTHONPATH has it
    marker = short / "sitecustomize-ran"
    payload = short / "scratch" / "sitecustomize.py"
    payload.parent.mkdir()
    payload.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    plant = await attempt(short / "state", f"cp {payload} {lib}/", allow=[("/usr/bin/cp", None)])
    assert plant["status"] == "completed", plant
    # The next gateway (or console, or CLI) started from the same environment, outside any view.
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ}, check=True)
    assert not marker.exists(), "the agent's code ran in the next gateway-side Python"


# Tried and closed: regressions.


async def test_an_include_spelled_in_capitals_outside_the_home_is_kept(short: Path) -> None:
    """git folds `[INCLUDE] PATH` to include.path; the view asks git, so the odd spelling is kept too."""
    home = Path(os.environ["HOME"])
    team = short / "team"
    team.mkdir()
    (home / ".gitconfig").write_text(
        f'[INCLUDE]\n\tPATH = {team}/inc\n[IncludeIf "gitdir:/x/"]\n\tPath = {team}/c\n'
    )
    run = await attempt(
        short / "state",
        f"printf '[alias]\\n\\tst = !touch {short}/pwn\\n' > {team}/inc; printf x > {team}/c",
        config=FULL,
        host="gateway",
    )
    assert run["status"] in ("completed", "failed"), run
    assert (team / "inc").read_text() == "" and (team / "c").read_text() == ""  # made empty, read-only


async def test_a_relative_include_of_a_linked_include_is_kept_where_git_reads_it(short: Path) -> None:
    """git resolves `path = b` against the including file's own name (its link), not the link's target."""
    home = Path(os.environ["HOME"])
    named, real = short / "named", short / "real"
    named.mkdir()
    real.mkdir()
    (real / "a").write_text("[include]\n\tpath = b\n")
    (named / "a").symlink_to(real / "a")
    (home / ".gitconfig").write_text(f"[include]\n\tpath = {named}/a\n")
    run = await attempt(
        short / "state", f"printf '[core]\\n\\tpager = x\\n' > {named}/b", config=FULL, host="gateway"
    )
    assert run["status"] in ("completed", "failed"), run
    assert not (named / "b").exists() or (named / "b").read_text() == ""
    out = _git(short, "config", "--includes", "--global", "--get", "core.pager")
    assert out.stdout == "", out


async def test_a_hidden_node_key_outside_the_home_cannot_be_hard_linked_out(short: Path) -> None:
    state = short / "state"
    keys = short / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "node_ed25519"
    key.write_text("KEY-SECRET\n")
    config = FULL + f'[nodes.build]\nhost = "127.0.0.9"\nidentityFile = "{key}"\nknownHosts = "{short}/kh"\n'
    copy = short / "copy"
    run = await attempt(
        state, f"ln {key} {copy}; cat {copy} {key}; cp {key} {copy}2", config=config, host="gateway"
    )
    assert "KEY-SECRET" not in run["_text"], run
    assert not copy.exists() or "KEY-SECRET" not in copy.read_text()


async def test_host_writable_named_through_a_link_into_dot_ssh_is_refused(short: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700)
    (home / "proj").symlink_to(home / ".ssh")
    config = FULL + '\nhostWritable = ["~/proj"]\n'
    from engine.protocol.frames import RemoteError

    with pytest.raises(RemoteError, match="hostWritable names ~/proj"):
        await attempt(short / "state", f"touch {home}/proj/authorized_keys", config=config, host="gateway")
    assert not (home / ".ssh" / "authorized_keys").exists()


async def test_an_include_with_dotdot_after_a_missing_dir_is_read_where_kept(short: Path) -> None:
    home = Path(os.environ["HOME"])
    team = short / "team"
    team.mkdir()
    (home / ".gitconfig").write_text(f"[include]\n\tpath = {team}/sub/../inc\n")
    evil = short / "scratch" / "x"
    plant = (
        f"mkdir -p {evil}/y && printf '[core]\\n\\tpager = planted\\n' > {evil}/inc && "
        f"ln -s {evil}/y {team}/sub"
    )
    run = await attempt(short / "state", plant, config=FULL, host="gateway")
    assert run["status"] in ("completed", "failed"), run
    out = _git(
        short, "config", "--includes", "--global", "--get", "core.pager"
    )  # the operator's git, outside any view
    assert "planted" not in out.stdout, out


@pytest.mark.parametrize("where", ["outside", "hostWritable"])
async def test_the_ssh_config_linked_out_of_dot_ssh_is_not_writable(
    sshd_nodes: list[SshdNode], state_dir: Path, where: str
) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    home = Path(os.environ["HOME"])
    base = state_dir.parent if where == "outside" else home / "src"
    dotfiles = base / "dotfiles"
    dotfiles.mkdir(parents=True)
    (dotfiles / "ssh_config").write_text("Host *\n  ServerAliveInterval 30\n")
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "config").symlink_to(dotfiles / "ssh_config")  # stow, chezmoi, yadm, a manual ln -s
    marker = state_dir.parent / "match-exec-ran"
    config = FULL + ('hostWritable = ["~/src"]\n' if where == "hostWritable" else "")
    config += (state_dir / "config.toml").read_text()
    from engine.protocol.frames import RemoteError

    try:
        plant = await attempt(
            state_dir,
            host="gateway",
            command=f"printf 'Match exec \"touch {marker}\"\\n' > {dotfiles}/ssh_config",
            config=config,
        )
        assert plant["status"] in ("completed", "failed"), plant
    except RemoteError as exc:  # hostWritable holding the file asyncssh reads: the view is refused
        assert where == "hostWritable" and "hostWritable names" in str(exc), exc
    await attempt(state_dir, "true", config=config, host="node", node="alpha")
    assert not marker.exists(), "the planted Match exec ran in the gateway"


async def test_an_xdg_config_home_outside_the_home_is_kept_whole(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    xdg = short / "xdg"  # XDG_CONFIG_HOME=/data/op/.config: the home on a small disk, configs elsewhere
    xdg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    conf = "[global]\\nindex-url = http://127.0.0.1:9/agents-index\\n"
    plant = f"mkdir -p {xdg}/pip && printf '{conf}' > {xdg}/pip/pip.conf"
    run = await attempt(short / "state", plant, config=FULL, host="gateway")
    assert run["status"] in ("completed", "failed"), run
    # The operator's next `pip install`, outside any view, would fetch from the agent's index.
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], env={**os.environ}, capture_output=True, text=True
    )
    assert "agents-index" not in out.stdout, out


@pytest.mark.usefixtures("default_private")
async def test_a_repository_planted_above_a_shared_dir_runs_nothing_for_the_operator(short: Path) -> None:
    shared = short / "tmp"  # stands for /tmp itself (never planted here: the machine is shared)
    shared.mkdir()
    marker = short / "fsmonitor-ran"
    g = f"{shared}/.git"
    plant = (
        f"mkdir -p {g}/objects {g}/refs/heads && echo 'ref: refs/heads/main' > {g}/HEAD && "
        f"printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch {marker}; false\\n' "
        f"> {g}/config"
    )
    run = await attempt(short / "state", plant, config=FULL, host="gateway")
    assert run["status"] == "completed", run
    # Later the operator works in a scratch dir there (mktemp -d; a shell prompt runs `git status` on cd).
    scratch = shared / "scratch"
    scratch.mkdir()
    st = _git(scratch, "status")
    assert not marker.exists(), ("the planted fsmonitor ran in the operator's git", st, run["_text"])
    # by construction: the run's /tmp is the agent's own (engine.commands.hostprivate), where it landed
    assert _in_private(short, "main", g + "/config"), "the plant is not in the agent's own /tmp"


@pytest.mark.usefixtures("default_private")
async def test_the_named_agent_through_another_logins_socket_is_not_a_host_runs(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    import asyncio

    node = sshd_nodes[0]
    named = state_dir.parent / "fwd1.sock"  # the gateway's login: its SSH_AUTH_SOCK, named as identityAgent
    other = state_dir.parent / "fwd2.sock"  # the operator's second ssh -A login to this host: the same agent

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_unix_connection(str(named))  # as sshd relays to the forwarded agent

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer), return_exceptions=True)

    with ssh_agent(named, node.client_key):
        server = await asyncio.start_unix_server(relay, path=str(other))
        try:
            nodes = (state_dir / "config.toml").read_text()
            nodes = nodes.replace(f'identityFile = "{node.client_key}"', f'identityAgent = "{named}"')
            command = f"SSH_AUTH_SOCK={other} " + _ssh(node, node.client_key, "echo LOGGED-IN-AS-GATEWAY")
            out = await attempt(state_dir, command, config=FULL + nodes, host="gateway")
        finally:
            server.close()
    assert "LOGGED-IN-AS-GATEWAY" not in out["_text"], out


@pytest.mark.usefixtures("default_private")
async def test_node_modules_planted_above_a_shared_dir_runs_nothing_for_the_operator(short: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("no node")
    shared = short / "tmp"  # stands for /tmp itself
    shared.mkdir()
    marker = short / "module-ran"
    pkg = shared / "node_modules" / "dotenv"
    plant = f"mkdir -p {pkg} && printf \"require('fs').writeFileSync('{marker}', 'ran')\\n\" > {pkg}/index.js"
    run = await attempt(short / "state", plant, config=FULL, host="gateway")
    assert run["status"] == "completed", run
    scratch = shared / "scratch"  # the operator's script in a scratch dir, its dependency not installed
    scratch.mkdir()
    subprocess.run(["node", "-e", "try { require('dotenv') } catch (e) {}"], cwd=scratch, check=False)
    assert not marker.exists(), "the planted module ran in the operator's node"
    assert _in_private(short, "main", f"{pkg}/index.js"), "the plant is not in the agent's own /tmp"


async def test_the_operators_ssh_master_to_the_node_is_not_a_host_runs(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    node = sshd_nodes[0]
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    sock = home / ".ssh" / "cm-node"
    opts = ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={node.known_hosts}"]
    # The operator's own ssh to the node (ControlMaster auto, ControlPersist): a master left listening.
    subprocess.run(
        [
            "ssh",
            *opts,
            "-i",
            str(node.client_key),
            "-p",
            str(node.port),
            "-M",
            "-S",
            str(sock),
            "-fN",
            node.addr,
        ],
        check=True,
        timeout=30,
    )
    try:
        nodes = (state_dir / "config.toml").read_text()
        command = f"ssh -F /dev/null -S {sock} -p {node.port} {node.addr} echo RODE-THE-MASTER"
        out = await attempt(state_dir, command, config=FULL + nodes, host="gateway")
    finally:
        subprocess.run(["ssh", "-S", str(sock), "-O", "exit", node.addr], capture_output=True, check=False)
    assert "RODE-THE-MASTER" not in out["_text"], out


async def test_a_node_key_named_through_a_link_cannot_be_unhidden_by_repointing_it(short: Path) -> None:
    """identityFile = keys/current -> keys/k2 (rotation by a link flip): the link's directory is read-only
    in the view, so no run re-points it to leave the real key out of the next view's hidden list."""
    state = short / "state"
    keys = short / "keys"
    keys.mkdir(mode=0o700)
    (keys / "k2").write_text("KEY-SECRET\n")
    (keys / "current").symlink_to(keys / "k2")
    config = FULL + (
        f'[nodes.build]\nhost = "127.0.0.9"\nidentityFile = "{keys}/current"\nknownHosts = "{short}/kh"\n'
    )
    decoy = short / "decoy"
    flip = await attempt(
        state,
        f"echo x > {decoy}; ln -sfn {decoy} {keys}/current; cat {keys}/k2",
        config=config,
        host="gateway",
    )
    assert os.readlink(keys / "current") == str(keys / "k2"), flip
    read = await attempt(state, f"cat {keys}/k2 {keys}/current", config=config, host="gateway")
    assert "KEY-SECRET" not in flip["_text"] + read["_text"], (flip, read)


async def test_the_global_git_config_named_by_git_config_global_is_kept(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed on branch view28: GIT_CONFIG_GLOBAL/GIT_CONFIG_SYSTEM are git configs
    (hosttrust.git_configs)."""
    glob = short / "identities" / "work.gitconfig"  # GIT_CONFIG_GLOBAL=/data/op/work.gitconfig
    glob.parent.mkdir()
    glob.write_text("[user]\n\tname = op\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(glob))
    run = await attempt(
        short / "state", f"printf '[core]\\n\\tpager = planted\\n' >> {glob}", config=FULL, host="gateway"
    )
    assert run["status"] in ("completed", "failed"), run
    assert "planted" not in glob.read_text(), "the operator's global git config is the agent's"


async def test_the_default_known_hosts_linked_out_of_dot_ssh_is_not_writable(short: Path) -> None:
    """Closed on branch view28 (hosttrust.trusted_dirs / trusted_configs; docs/SECURITY.md, round 8 r)."""
    home = Path(os.environ["HOME"])
    dotfiles = short / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "known_hosts").write_text("")
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "known_hosts").symlink_to(dotfiles / "known_hosts")
    config = FULL + '[nodes.build]\nhost = "127.0.0.9"\nidentityFile = "~/.ssh/id_node"\n'
    line = "127.0.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAgentsOwnHostKeyForTheNodeXXXXXXXXXXXXXXXX"
    run = await attempt(
        short / "state", f"echo '{line}' >> ~/.ssh/known_hosts", config=config, host="gateway"
    )
    assert run["status"] in ("completed", "failed"), run
    assert "AgentsOwnHostKey" not in (dotfiles / "known_hosts").read_text(), (
        "the node's host key is the agent's"
    )


async def test_host_writable_inside_dot_ssh_is_refused(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    """Was open (round 8 r): a hostWritable dir inside ~/.ssh (`Include config.d/*`) was accepted, and its
    planted Match exec ran in the gateway at the next node connect. A root inside a protected dir is
    refused now, as one holding a protected path is."""
    from engine.protocol.frames import RemoteError

    home = Path(os.environ["HOME"])
    confd = home / ".ssh" / "config.d"
    confd.mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Include config.d/*\n")
    marker = state_dir.parent / "match-exec-ran"
    config = FULL + 'hostWritable = ["~/.ssh/config.d"]\n' + (state_dir / "config.toml").read_text()
    with pytest.raises(RemoteError, match=re.escape("hostWritable names ~/.ssh/config.d")):
        await attempt(
            state_dir,
            host="gateway",
            command=f"printf 'Match exec \"touch {marker}\"\\n' > {confd}/agent",
            config=config,
        )
    await attempt(state_dir, "true", config=config, host="node", node="alpha")
    assert not marker.exists(), "the planted Match exec ran in the gateway"


async def test_a_dangling_rc_file_link_out_of_the_home_is_not_creatable(short: Path) -> None:
    """Closed on branch view28: the nearest directory of a dangling rc link's target outside the home is
    kept read-only (hostview._dangling_rc_dirs)."""
    home = Path(os.environ["HOME"])
    dotfiles = short / "dotfiles"  # checked out outside the home; bash_profile not written yet (or removed)
    dotfiles.mkdir()
    (home / ".bash_profile").symlink_to(dotfiles / "bash_profile")
    marker = short / "rc-ran"
    run = await attempt(
        short / "state", f"echo 'touch {marker}' > {dotfiles}/bash_profile", config=FULL, host="gateway"
    )
    assert run["status"] in ("completed", "failed"), run
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-lc", "true"], env=env, check=False, capture_output=True)  # the operator logs in
    assert not marker.exists(), "the agent's login script ran in the operator's shell"


async def test_a_script_linked_to_the_hidden_node_key_is_pinned_as_the_view_sees_it(short: Path) -> None:
    """The gateway seals a script's bytes for the run (it reads them outside the view): a script that is a
    link to the hidden node key must not carry the key into the run as its sealed copy."""
    keys = short / "keys"
    keys.mkdir(mode=0o700)
    (keys / "k").write_text("echo NODE-KEY-LEAK\n")
    config = (
        FULL + f'[nodes.build]\nhost = "127.0.0.9"\nidentityFile = "{keys}/k"\nknownHosts = "{keys}/kh"\n'
    )
    work = short / "work"
    work.mkdir()
    (work / "s.sh").symlink_to(keys / "k")
    out = await attempt(
        short / "state", "sh ./s.sh; bash s.sh; cat s.sh", config=config, host="gateway", workdir=str(work)
    )
    assert out["status"] == "completed", out
    assert "NODE-KEY-LEAK" not in out["_text"], out


async def test_a_nested_host_writable_dir_cannot_be_pointed_elsewhere_in_the_home(short: Path) -> None:
    """Was open (round 8 r): the missing ~/work/cache, made a link to ~/.bashrc.d by a run, was resolved
    by the next view and bound writable. A hostWritable name through a link in a listed dir is refused."""
    home = Path(os.environ["HOME"])
    (home / "work").mkdir()  # ~/work/cache not made yet (a build's output dir): skipped until it is
    rcd = home / ".bashrc.d"  # sourced by Fedora's default ~/.bashrc (and many users' own)
    rcd.mkdir()
    config = FULL + 'hostWritable = ["~/work", "~/work/cache"]\n'
    flip = await attempt(
        short / "state",
        f"ln -s {rcd} {home}/work/cache",
        config=config,
        host="gateway",
    )
    assert flip["status"] == "completed", flip
    from engine.protocol.frames import RemoteError

    with pytest.raises(RemoteError, match="reached through the link"):
        await attempt(short / "state", f"echo 'touch /tmp/x' > {home}/work/cache/agent.sh", config=config)
    assert not (rcd / "agent.sh").exists()


async def test_a_host_writable_name_through_a_link_outside_the_home_cannot_be_pointed_into_it(
    short: Path,
) -> None:
    """~/proj -> /tmp/x/proj (the operator's link to a scratch checkout): a run re-points /tmp/x/proj at
    ~/.bashrc.d, and the next view would resolve ~/proj into the home and bind that dir writable."""
    from engine.protocol.frames import RemoteError

    home = Path(os.environ["HOME"])
    scratch = short / "x"
    (scratch / "proj").mkdir(parents=True)
    (home / "proj").symlink_to(scratch / "proj")
    rcd = home / ".bashrc.d"
    rcd.mkdir()
    config = FULL + 'hostWritable = ["~/proj"]\n'
    flip = await attempt(
        short / "state",
        f"rm -rf {scratch}/proj && ln -s {rcd} {scratch}/proj",
        config=config,
        host="gateway",
    )
    assert flip["status"] == "completed", flip
    # Since fresh round 14 c a hostWritable dir outside the home is bound over itself in the agent's view
    # (a mountpoint: `rm -rf` of it fails there); another agent's run, or anything outside a view, can
    # still re-point it in the shared dir, as done here
    assert (scratch / "proj").is_dir() and not (scratch / "proj").is_symlink()
    shutil.rmtree(scratch / "proj")
    (scratch / "proj").symlink_to(rcd)
    with pytest.raises(RemoteError, match="reached through the link"):
        await attempt(short / "state", f"echo 'touch /tmp/x' > {home}/proj/agent.sh", config=config)
    assert not (rcd / "agent.sh").exists()
