"""Fresh round 10 a (issue 27 §1, attack classes 1 and 2): what a host run of an agent can use by merely
being there — files of the gateway's account, shared kernel namespaces, sockets — after the per-agent
private dirs (engine.commands.hostprivate) and the read-only copies of key dirs (dirshadow)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from engine import principals
from engine.approvals.store import ApprovalsStore
from engine.commands import hostprivate
from engine.protocol.client import ControlClient
from engine.protocol.frames import OPERATOR_TOKEN_NAME, read_token
from tests.helpers.browser import browser_image, browser_state, get  # noqa: F401 (fixtures)
from tests.helpers.gateway import ALLOWLIST, claim_state, connect, gateway, listed, wait_until, write_config
from tests.helpers.sshd import SshdNode
from tests.helpers.webconsole import CHROMIUM, serve_web

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
GREP = shutil.which("grep") or "/usr/bin/grep"


async def _exec(state: Path, command: str, agent: str = "main", **params: object) -> dict[str, object]:
    """One exec call on a gateway already running in `state`: its details, with the text as `_text`."""
    client = await connect(state)
    try:
        result = await client.request(
            "exec", {"command": command, "agentId": agent, "yieldMs": 60000, "timeout": 60, **params}
        )
    finally:
        await client.close()
    details: dict[str, object] = result["details"]
    details["_text"] = result["text"]
    return details


@needs_bwrap
@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")
async def test_class1_the_web_console_url_is_read_from_the_operators_browser_profile(
    state_dir: Path, tmp_path: Path
) -> None:
    """The operator opens the web console in Chromium (its profile where Chromium keeps it, in the
    home). SECURITY.md: "The only ways to the token are the operator's terminal and the browser's own
    history, both the operator's" — but the home is every host run's to read (read-only is not hidden).
    Agent main, whose allowlist holds only grep, reads the URL out of the profile; the URL then opened
    the console from any local account over loopback. Closed: the URL holds a one-use ticket, spent by
    the page the operator opened (its secret lives only in the page's memory); every URL a host run finds
    in the profile is refused (403), so reading it gives nothing (console/webkeys.py)."""
    home = Path(os.environ["HOME"])
    profile = home / ".config" / "chromium"
    profile.mkdir(parents=True)
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", GREP, arg_pattern=None)
    async with gateway(state_dir):
        console = await serve_web(state_dir)
        try:
            # the operator's browser, its profile where Chromium puts it by default ($HOME/.config/chromium)
            browser = await asyncio.create_subprocess_exec(
                CHROMIUM or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                f"--user-data-dir={profile}", "--dump-dom", console.url,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await asyncio.wait_for(browser.wait(), 60)
            # the operator's tab trades its ticket as its page loads (console/web_boot.js); --dump-dom may
            # exit before that fetch is sent, so the trade is finished here as the open tab would
            trade = urllib.request.Request(console.url + "session", method="POST")
            with contextlib.suppress(urllib.error.HTTPError):  # 403: the page traded it first
                urllib.request.urlopen(trade, timeout=10).close()
            details = await _exec(
                state_dir,
                r"grep -rhaoE 'http://127\.0\.0\.1:[0-9]+/[A-Za-z0-9_-]{20,}/' .config/chromium",
                workdir=str(home),
            )
            found = set(re.findall(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{20,}/", str(details["_text"])))
            # what the agent's own process (any local account) then does with each URL it found
            for url in found | {console.url}:
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(url, timeout=10).close()
                assert refused.value.code == 403, f"{url} still opens the console"
        finally:
            await console.stop()


# A SysV shared memory segment made by one run (key KEY) and read by another by its id, listed in
# /proc/sysvipc/shm: the same memory /dev/shm holds, by the older API.
_SHM = """python3 -c "
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
if sys.argv[1] == 'make':
    i = libc.shmget({key}, 4096, 0o1600)
    ctypes.memmove(libc.shmat(ctypes.c_int(i), None, 0), b'bob-secret-0123', 15)
else:
    for line in open('/proc/sysvipc/shm').read().splitlines()[1:]:
        p = libc.shmat(ctypes.c_int(int(line.split()[1])), None, 0o10000)
        print('read', ctypes.string_at(p, 15).decode(errors='replace'))
" {mode}"""


@needs_bwrap
async def test_class1_another_agents_sysv_shared_memory_is_read_by_a_host_run(state_dir: Path) -> None:
    """Agents bob and alice may run anything on the host (security=full), each in its own view with its
    own /dev/shm (hostPrivate): bob's file in /dev/shm is not alice's to see (that holds), but bob's
    segment made by shmget(2) is in no directory, and alice's run attaches it by the id it lists."""
    key = 0x5EC70000 + (os.getpid() & 0xFFFF)
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    config = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    write_config(state_dir, config + f'hostPrivate = ["/dev/shm", "{private}"]\n')
    try:
        async with gateway(state_dir):
            made = await _exec(
                state_dir, _SHM.format(key=key, mode="make") + "; echo x > /dev/shm/bob-a10", "bob"
            )
            assert made["status"] == "completed", made
            seen = await _exec(state_dir, "ls /dev/shm; " + _SHM.format(key=key, mode="read"), "alice")
            assert "bob-a10" not in str(seen["_text"])  # the private /dev/shm holds
            # (what it printed: the ask's warnings may quote the command, which names the secret)
            assert "read bob-secret-0123" not in str(seen["_text"]), "alice's run read bob's SysV segment"
    finally:
        subprocess.run(["ipcrm", "-M", str(key)], capture_output=True, check=False)


# A one-connection command server an agent's background run leaves listening on loopback: it reads one
# line, runs it with sh, sends back what it printed, and exits.
_BACKDOOR = """python3 -c "
import socket, subprocess
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', {port}))
s.listen(1)
c, _ = s.accept()
line = c.makefile().readline()
c.sendall(subprocess.run(['sh', '-c', line], capture_output=True).stdout)
c.close()
" """


def _listening(port: int) -> bool:
    """Something listens on 127.0.0.1:`port` (read from /proc/net/tcp: a probe would take the one accept)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return any(r[1] == f"0100007F:{port:04X}" and r[3] == "0A" for r in rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_bwrap
async def test_class1_a_revoked_agents_background_run_still_acts_for_it(state_dir: Path) -> None:
    """SECURITY.md: "Nothing the agent sends after the revoke is acted upon". Agent ops (a credential,
    security=full: trusted with the host until revoked) leaves a background run listening on loopback;
    the operator revokes ops; the agent's own process (any local account reaches loopback) sends a command
    to its listener, and it runs on the gateway host. In the host's network (hostNetwork = "host": with
    the default, the agent's loopback is its host runs' own, and no process outside reaches it at all)."""
    write_config(
        state_dir,
        '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\nhostNetwork = "host"\n'
        + listed("ops"),
    )
    token = principals.mint(state_dir, "ops")
    port = _free_port()
    async with gateway(state_dir):
        agent = await connect(state_dir, client="ops", operator=False, credential=token)
        try:
            started = await agent.request(
                "exec", {"command": _BACKDOOR.format(port=port), "background": True, "timeout": 120}
            )
            assert started["details"]["status"] == "running", started
        finally:
            await agent.close()

        await wait_until(
            lambda: _listening(port), timeout=30
        )  # never connects: the one connection is the agent's
        operator = await connect(state_dir)
        try:
            revoked = await operator.request("agents.revoke", {"agent": "ops"})
            assert revoked["revoked"] is True
        finally:
            await operator.close()
        # the agent's own process, after the revoke
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return  # nothing of the agent's listens any more
        writer.write(b"echo acted-after-revoke $(id -u)\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert b"acted-after-revoke" not in answer, "a revoked agent's command ran on the gateway host"


@needs_bwrap
@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
async def test_class1_the_operators_ssh_master_under_the_home_runs_on_the_node(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """The node's key is hidden from host runs and ~/.ssh is a copy without sockets, so a master in
    ~/.ssh is no way in (round 9 y). Many setups keep masters elsewhere in the home (`ControlPath
    ~/.cache/ssh/%C`: a short path, off the synced ~/.ssh). The home is bound read-only, and a read-only
    bind does not stop connect(2)."""
    alpha = sshd_nodes[0]
    home = Path(os.environ["HOME"])
    ctl_dir = home / ".cache" / "ssh"
    ctl_dir.mkdir(parents=True, mode=0o700)
    ctl = ctl_dir / "alpha"
    pwned = alpha.marks / "pwned-a10"
    config = (state_dir / "config.toml").read_text()
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n' + config)
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    opts = ["-o", f"UserKnownHostsFile={alpha.known_hosts}", "-o", "BatchMode=yes", "-p", str(alpha.port)]
    # the operator's own login to the node, its master kept (ssh -fNM returns once it is up)
    subprocess.run(
        ["ssh", "-fNM", "-S", str(ctl), "-o", "ControlPersist=yes", "-i", str(alpha.client_key), *opts,
         f"{user}@{alpha.addr}"],
        check=True, timeout=30, capture_output=True,
    )  # fmt: skip
    try:
        async with gateway(state_dir):
            details = await _exec(
                state_dir,
                f"ssh -S {ctl} -o BatchMode=yes x 'echo $SSH_CONNECTION > {pwned}'",
                "ops",
                workdir=str(home),
            )
        # written by the node's sshd session (its SSH_CONNECTION names the node's address), not the run
        ran = pwned.read_text() if pwned.exists() else ""
        assert alpha.addr not in ran, (
            f"a host run ran a command on the node through {ctl}: {details['_text']}"
        )
    finally:
        subprocess.run(
            ["ssh", "-S", str(ctl), "-O", "exit", "x"], capture_output=True, timeout=30, check=False
        )


FULL_HOST = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


@needs_bwrap
async def test_class2_two_gateways_agents_of_one_name_share_a_nodes_private_tmp(
    state_dir: Path, sshd_nodes: list[SshdNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: "A node shared by several gateways keeps each one's work apart" — the sessions, events
    and keys are filed under the gateway key's fingerprint. The private /tmp every agent has in its host
    view (new this round) is `<node state>/hostprivate/<agentId>`: gateway A's main and gateway B's main
    (every single-agent gateway's agent is main) get one directory."""
    alpha = sshd_nodes[0]
    nodes = (state_dir / "config.toml").read_text()
    # the node trusts its callers with its host; /var/tmp private (the default's /tmp holds this test
    # machine's venv, which the node's runs need)
    (alpha.state_dir / "config.toml").write_text(FULL_HOST + 'hostPrivate = ["/var/tmp"]\n')
    os.chmod(alpha.state_dir / "config.toml", 0o600)
    node = {"host": "node", "node": "alpha"}
    write_config(state_dir, FULL_HOST.replace('"gateway"', '"node"') + nodes)
    async with gateway(state_dir):
        left = await _exec(state_dir, "echo gateway-a-secret > /var/tmp/a10-left; pwd", **node)
        assert left["status"] == "completed", left
    other = state_dir.parent / "s2"  # another operator's gateway, its own state dir and gateway key
    other.mkdir(mode=0o700)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(other))
    claim_state(other)  # the operator's CLI, before it writes a config there
    write_config(other, FULL_HOST.replace('"gateway"', '"node"') + nodes)
    async with gateway(other):
        seen = await _exec(other, "cat /var/tmp/a10-left; echo end", **node)
    assert seen["status"] == "completed", seen
    assert "gateway-a-secret" not in str(seen["_text"]), (
        "gateway B's agent read gateway A's node-side private dir"
    )


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_class2_a_private_config_dir_in_the_home_is_the_agents_git_config(state_dir: Path) -> None:
    """`[tools.exec] hostPrivate` accepts `~/…` dirs (a private copy in the home goes last: "the home is
    bound read-only over it otherwise"). A private ~/.config gives each agent its own — including the
    path git reads as the operator's global config, which gitvet reads on the host. The agent's copy is
    its own to write (any of its runs writes there; the test writes what one would): allowlisted `git diff
    --stat` in a hostWritable repository then runs the agent's clean filter, with no ask."""
    home = Path(os.environ["HOME"])
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    (home / ".config").mkdir()
    repo = home / "proj"
    repo.mkdir()
    marker = Path(private).parent / "filter-ran"  # outside every view's private dirs: the filter's own mark
    config = ALLOWLIST + f'hostPrivate = ["~/.config", "{private}"]\nhostWritable = ["~/proj"]\n'
    write_config(state_dir, config)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", shutil.which("git") or "git")
    git = ["git", "-C", str(repo), "-c", "user.name=o", "-c", "user.email=o@example.invalid"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (repo / "a.txt").write_text("two\n")
    async with gateway(state_dir):
        first = await _exec(state_dir, "git --version", workdir=str(repo))
        assert first["status"] == "completed", first  # allowlisted: runs unasked (and makes the copies)
        # what the agent's own runs may write in its private ~/.config
        copy = hostprivate.agent_dir(str(state_dir), "main") + "/" + quote(str(home / ".config"), safe="")
        os.makedirs(f"{copy}/git", exist_ok=True)
        Path(f"{copy}/git/config").write_text(
            f"[core]\n\tattributesFile = {home}/.config/git/attributes\n"
            f'[filter "x"]\n\tclean = "touch {marker}; cat"\n'
        )
        Path(f"{copy}/git/attributes").write_text("* filter=x\n")
        details = await _exec(state_dir, "git diff --stat", workdir=str(repo))
    assert details["status"] == "completed", details  # allowlisted, no ask
    assert not marker.exists(), "an allowlisted git ran the agent's filter from its private ~/.config"


# keyctl(2) on x86_64: the kernel's key store, per process (session keyring) and per uid, in no namespace
# a mount or PID namespace makes.
_SYS_ADD_KEY, _SYS_KEYCTL = 248, 250
_KEYCTL_JOIN_SESSION_KEYRING, _KEYCTL_INVALIDATE = 1, 21
_KEY_SPEC_SESSION_KEYRING = -3
_READ_KEY = """python3 -c "
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(250, 10, -3, b'user', b'a10-krb5-ticket', 0)  # KEYCTL_SEARCH in the session keyring
buf = ctypes.create_string_buffer(256)
n = libc.syscall(250, 11, key, buf, 256)  # KEYCTL_READ
print('key', key, 'read', buf.raw[:max(n, 0)].decode(errors='replace'))
" """


@needs_bwrap
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="keyctl syscall numbers of x86_64")
async def test_class1_the_gateways_session_keyring_is_read_by_a_host_run(state_dir: Path) -> None:
    """The operator's login session keyring (pam_keyinit makes one per login; krb5's KEYRING: ccaches,
    eCryptfs and AFS keep credentials there) is the gateway's when it is started from that login, and
    a keyring is inherited across fork, exec and every namespace bwrap makes. Agent main runs a python3
    one-liner (security=full here: the question is the view's, not the allowlist's) and reads the key."""
    libc = ctypes.CDLL(None, use_errno=True)
    # the operator's login: a session keyring of its own holding a ticket (this thread forks the runs)
    assert libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, b"a10-login") > 0
    key = libc.syscall(
        _SYS_ADD_KEY, b"user", b"a10-krb5-ticket", b"TGT-of-the-operator", 19, _KEY_SPEC_SESSION_KEYRING
    )
    assert key > 0
    write_config(state_dir, FULL_HOST)
    try:
        async with gateway(state_dir):
            details = await _exec(state_dir, _READ_KEY)
        assert "TGT-of-the-operator" not in str(details["_text"]), "a host run read the session keyring"
    finally:
        libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, key)
        libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, None)  # a fresh anonymous one for later tests


DOCKER_SOCK = "/run/docker.sock"


async def _relay(path: Path, target: str) -> asyncio.AbstractServer:
    """A Unix socket at `path` relaying every connection to `target`: the operator's Docker Desktop engine
    socket (~/.docker/desktop/docker.sock, the `desktop-linux` context's endpoint), played by this host's
    own engine behind a relay."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_unix_server(serve, path=str(path))


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(DOCKER_SOCK) or shutil.which("curl") is None, reason="dockerd, curl")
async def test_class1_a_docker_engine_socket_the_list_does_not_name_is_reached(state_dir: Path) -> None:
    """Round 5 i closed the Docker API for host runs by binding an empty file over the sockets it knows.
    Docker Desktop for Linux serves its engine at ~/.docker/desktop/docker.sock and the docker CLI finds it
    through `currentContext` in ~/.docker/config.json, not DOCKER_HOST: nothing names it to the gateway,
    and a read-only home does not stop connect(2). Whoever reaches an engine mounts the state dir."""
    home = Path(os.environ["HOME"])
    desktop = home / ".docker" / "desktop"
    desktop.mkdir(parents=True)
    sock = desktop / "docker.sock"
    write_config(state_dir, FULL_HOST)
    relay = await _relay(sock, DOCKER_SOCK)
    try:
        async with gateway(state_dir):
            details = await _exec(state_dir, f"curl -s --unix-socket {sock} http://engine/_ping", "ops")
        assert str(details.get("aggregated", "")).strip() != "OK", "a host run reached a Docker engine API"
    finally:
        relay.close()
        await relay.wait_closed()


@pytest.mark.usefixtures("browser_state")  # the real browser image, this state dir's browsers removed after
async def test_class1_the_browser_doors_token_is_put_in_a_devtools_url_of_another_origin(
    state_dir: Path,
) -> None:
    """SECURITY.md: a wrong, partial or missing token, a token in a header or the query gets a bare 403 —
    the token is the browser's whole authority (CDP is full control of it and of every page). The door's
    own rewrite writes it into the query of the DevTools frontend URL Chromium offers, on Google's origin:
    the link an operator follows to inspect the page sends the token there (and leaves it in the history
    every host run reads: test_class1_the_web_console_url_is_read_from_the_operators_browser_profile)."""
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            await operator.request("browser.start", {"sessionKey": "agent:main:a10"})
            url = (await operator.request("browser.url", {"sessionKey": "agent:main:a10"}))["cdpUrl"]
            listing = json.loads(await asyncio.to_thread(get, url.rstrip("/") + "/json/list"))
        finally:
            await operator.close()
    token = url.rstrip("/").rsplit("/", 1)[1]
    leaked = [
        value
        for target in listing
        for value in target.values()
        if isinstance(value, str)
        and token in value
        and urllib.parse.urlsplit(value).hostname not in ("127.0.0.1", "localhost")
    ]
    assert not leaked, f"the door's token in a URL of another origin: {leaked}"


@needs_bwrap
async def test_class4_an_ssh_include_glob_dir_made_by_a_host_run_runs_in_the_gateway(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """Round 9 y: an Include glob's directory is read whole, so it is kept read-only whole
    (hosttrust.ssh_dirs). Only when present: `Include /srv/ops/ssh/*.conf` written before the team made
    that directory (or after it was removed) leaves the path to whoever makes it first, and outside the
    home a host run may make it. asyncssh reads ~/.ssh/config at every node connect, in the gateway, and
    runs `Match exec` with a shell there. Fixed on this branch: a missing glob directory outside the home
    is made empty and kept read-only like a present one (hostview.view_args), and no hostWritable root may
    hold one (hosttrust.trusted_files)."""
    home = Path(os.environ["HOME"])
    ops = state_dir.parent / "ops"  # /srv/ops: the team's, the gateway's user may write it; ssh/ not made yet
    ops.mkdir()
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f"Include {ops}/ssh/*.conf\n")
    marker = state_dir.parent / "gateway-ran"
    nodes = (state_dir / "config.toml").read_text()
    write_config(state_dir, FULL_HOST.replace('"gateway"', '"auto"') + nodes)
    planted = f'Match exec "cat {state_dir}/operator.json > {marker}"\\n'
    async with gateway(state_dir):
        await _exec(state_dir, f"mkdir -p {ops}/ssh; printf '{planted}' > {ops}/ssh/team.conf")
        # any node run (any agent's, or the gateway's own link coming up) connects and reads the config
        await _exec(state_dir, "true", host="node", node="alpha")
    leaked = marker.read_text() if marker.exists() else ""
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in leaked), "the gateway ran a host run's `Match exec` outside every view"


@needs_bwrap
async def test_class4_the_program_an_ssh_match_exec_names_is_rewritten_by_a_host_run(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """`Match exec "/opt/team/bin/on-vpn"` (pick a jump host only off the VPN) is a common ssh config
    idiom. asyncssh runs it in the gateway at every node connect (config parsing, before any login). The
    view keeps ~/.ssh and every included file read-only, and the gateway's PATH dirs; not the programs the
    config runs by path."""
    home = Path(os.environ["HOME"])
    team = state_dir.parent / "opt-team-bin"  # the team's tools, writable by the gateway's user
    team.mkdir()
    check = team / "on-vpn"
    check.write_text("#!/bin/sh\nexit 1\n")
    check.chmod(0o755)
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f'Match exec "{check}"\n  ProxyJump none\n')
    marker = state_dir.parent / "gateway-ran"
    nodes = (state_dir / "config.toml").read_text()
    write_config(state_dir, FULL_HOST.replace('"gateway"', '"auto"') + nodes)
    async with gateway(state_dir):
        made = await _exec(
            state_dir, f"printf '#!/bin/sh\\ncat {state_dir}/operator.json > {marker}\\nexit 1\\n' > {check}"
        )
        assert made["status"] == "completed", made
        await _exec(state_dir, "true", host="node", node="alpha")
    leaked = marker.read_text() if marker.exists() else ""
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in leaked), "the gateway ran a host run's program outside every view"


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_class1_the_operators_git_credential_helper_is_rewritten_by_a_host_run(state_dir: Path) -> None:
    """Round 8 r kept an absolute core.hooksPath read-only ("the operator's hooks, run by every commit").
    A credential helper named by absolute path is the same kind of thing, and worse: git hands it the
    operator's username and password or token on every fetch and push. It is not kept; outside the home,
    what the gateway's account may write a host run may write."""
    home = Path(os.environ["HOME"])
    team = state_dir.parent / "opt-team"  # /opt/team: the team's tools, writable by the gateway's user
    team.mkdir()
    helper = team / "git-cred"
    helper.write_text("#!/bin/sh\nexit 0\n")
    helper.chmod(0o755)
    (home / ".gitconfig").write_text(f"[credential]\n\thelper = {helper}\n")
    marker = state_dir.parent / "helper-ran"
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        made = await _exec(
            state_dir, f"printf '#!/bin/sh\\ncat {state_dir}/operator.json > {marker}\\n' > {helper}", "ops"
        )
        assert made["status"] == "completed", made
    # the operator's own git, later, in their terminal (outside any view)
    subprocess.run(
        ["git", "credential", "fill"],
        input="protocol=https\nhost=git.example.invalid\n\n",
        capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false"},
    )  # fmt: skip
    leaked = marker.read_text() if marker.exists() else ""
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in leaked), "the operator's git ran a helper a host run wrote"


async def _shutdown_daemon(state: Path) -> None:
    """Stop the daemon this test's client started (our child: reaped here, never left running)."""
    pid = int((state / "gateway.pid").read_text().split()[0])
    operator = await connect(state)
    with contextlib.suppress(Exception):
        await operator.request("shutdown", {})
    with contextlib.suppress(Exception):
        await operator.close()

    def reaped() -> bool:
        try:
            return os.waitpid(pid, os.WNOHANG)[0] == pid
        except ChildProcessError:
            return True

    await wait_until(reaped, timeout=30)


@needs_bwrap
async def test_class1_the_autostarting_agents_api_key_reaches_every_agents_host_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: "No command inherits a client's identity" — the fix drops EXECHOST_AGENT_TOKEN,
    EXECHOST_AGENT_TOKEN_FILE and EXECHOST_GATEWAY_SOCKET from the daemon's env. An agent's MCP server
    runs in the agent's harness's env, which holds the harness's own model API key; the daemon it starts
    keeps it, and every host run of every agent inherits the daemon's env, filtered by a list of known
    credential names that this one is not on. Agent b's allowlist holds only printenv."""
    config = ALLOWLIST.replace('ask = "on-miss"', 'ask = "off"')
    write_config(state_dir, config + listed("a", "b"))
    token_a, token_b = principals.mint(state_dir, "a"), principals.mint(state_dir, "b")
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist(
        "b", shutil.which("printenv") or "printenv"
    )
    secret = "sk-ant-api03-a10-agent-a-own-key"
    # agent a's MCP server, in its harness's env, is the first client: it starts the daemon
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    first = await ControlClient.connect(state_dir, client="mcp-a", autostart=True, credential=token_a)
    await first.close()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    b = await ControlClient.connect(state_dir, client="mcp-b", autostart=False, credential=token_b)
    try:
        result = await b.request("exec", {"command": "printenv ANTHROPIC_API_KEY", "yieldMs": 60000})
    finally:
        await b.close()
        await _shutdown_daemon(state_dir)
    assert result["details"]["status"] in ("completed", "failed"), result  # printenv ran, unasked
    assert secret not in str(result["text"]), "agent b's host run read agent a's API key"


# A gateway link spoken by hand: the node's hello, then one system.run, then its answer.
_NODE_LINK = """python3 -c "
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile('rwb')
f.readline()
run = {{'command': ['sh', '-c', sys.argv[2]], 'agentId': 'main'}}
f.write((json.dumps({{'type': 'req', 'id': '1', 'method': 'system.run', 'params': run}}) + chr(10)).encode())
f.flush()
for line in f:
    if line.startswith(b'{{\\"type\\":\\"res\\"'):
        print(json.loads(line).get('payload', {{}}).get('stdout'))
        break
" {sock} 'cat {state}/operator.json'"""


@needs_bwrap
async def test_class1_a_colocated_node_services_socket_is_a_gateway_link_for_a_host_run(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """node.sock is 0600 in the node's 0700 state dir and its service drops a peer of another uid: the
    kernel's word about the peer is its whole authentication. A node on the gateway's own machine and
    account (a workstation that is also a node, as in this suite's sshd fixture) has its state dir outside
    the gateway's, so nothing covers it in the host view, and a host run is that uid."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(FULL_HOST + 'hostPrivate = ["/var/tmp"]\n')
    os.chmod(alpha.state_dir / "config.toml", 0o600)
    service = alpha.run_service()
    try:
        write_config(state_dir, FULL_HOST)
        async with gateway(state_dir):
            sock = alpha.state_dir / "node.sock"
            details = await _exec(state_dir, _NODE_LINK.format(sock=sock, state=state_dir))
    finally:
        service.kill()
        service.wait()
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in str(details["_text"])), "a host run read the state dir through node.sock"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a shared tmpfs home")
async def test_class1_a_mount_made_under_the_home_after_a_run_started_is_writable_in_its_view(
    state_dir: Path,
) -> None:
    """The home is bound read-only into every view, recursively, when the view is made; the keeper is
    re-made when the host's mount table changes, for the next runs. A background run already in its view
    gets the new mount by propagation (a systemd host's / is shared; here the home is made a shared
    mount to stand in for it), read-write."""
    home = Path(os.environ["HOME"])
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(home)], check=True)
    vault = home / "vault"
    try:
        subprocess.run(["mount", "--make-shared", str(home)], check=True)
        vault.mkdir()
        write_config(state_dir, FULL_HOST)
        async with gateway(state_dir):
            watcher = (
                f"for i in $(seq 400); do [ -e {vault}/ready ] && break; sleep 0.05; done; "
                f"echo from-the-agent > {vault}/planted"
            )
            client = await connect(state_dir)
            try:
                started = await client.request(
                    "exec", {"command": watcher, "agentId": "main", "background": True, "timeout": 60}
                )
                sid = started["details"]["sessionId"]
                # the operator mounts their vault under the home, later
                subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(vault)], check=True)
                (vault / "ready").write_text("")

                async def ended() -> bool:
                    rows = (await client.request("sessions.list", {}))["sessions"]
                    return any(r["sessionId"] == sid and r["status"] != "running" for r in rows)

                await wait_until(ended, timeout=30)
            finally:
                await client.close()
        assert not (vault / "planted").exists(), "a host run wrote into a mount under its read-only home"
    finally:
        subprocess.run(["umount", "-l", str(vault)], capture_output=True, check=False)
        subprocess.run(["umount", "-l", str(home)], capture_output=True, check=False)


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_class4_a_missing_path_dir_of_the_gateway_is_made_by_a_host_run(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: "Protected: everything the gateway or a program it trusts reads, present or not", and
    the PATH's directories "(a program found there runs in the gateway's later commands)". Missing import
    paths are made and kept (`_make_import_paths`); a missing PATH dir is not: PATH templates name
    /home/linuxbrew/.linuxbrew/bin, /usr/local/go/bin, /opt/<tool>/bin before the tool is installed."""
    tools = state_dir.parent / "opt-tools" / "bin"  # named in PATH, not there yet; its parent is writable
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    marker = state_dir.parent / "git-ran"
    planted = f'#!/bin/sh\\ncat {state_dir}/operator.json > {marker}\\nexec /usr/bin/git \\"\\$@\\"\\n'
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        made = await _exec(
            state_dir, f"mkdir -p {tools} && printf '{planted}' > {tools}/git && chmod +x {tools}/git"
        )
        assert made["status"] == "completed", made
    # the operator's own shell, later, with the same PATH
    subprocess.run(["git", "--version"], capture_output=True, timeout=30, check=False)
    leaked = marker.read_text() if marker.exists() else ""
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in leaked), "the operator's git was one a host run put in a PATH dir"


@needs_bwrap
async def test_class2_the_gateway_makes_its_tmpdir_through_a_link_in_the_agents_copy(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TMPDIR under a private dir (pam_tmpdir's /tmp/user/UID, a gateway's own /tmp/gw) is made in each
    agent's copy so mktemp works. The copy is the agent's to write: alice replaces the directory on the
    way with a link to ~/.config/git (her run cannot write there: the home is read-only in her view), and
    her next run had the gateway make `hooks` there, on the host (os.makedirs followed the link). Fixed on
    this branch: the copy's dirs are made by fd, no link followed (hostprivate._make_in_copy)."""
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    home = Path(os.environ["HOME"])
    (home / ".config" / "git").mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", f"{private}/gw/hooks")
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        planted = await _exec(
            state_dir,
            f"rm -rf {private}/gw && ln -s {home}/.config/git {private}/gw && "
            f"! mkdir {home}/.config/git/mine",  # her own write there fails
            "alice",
        )
        assert planted["status"] == "completed", planted
        await _exec(state_dir, "true", "alice")
        # an agent that planted nothing has the gateway's TMPDIR in its copy, nested as it is named
        made = await _exec(state_dir, 'mktemp -p "$TMPDIR"', "bob")
        assert made["status"] == "completed" and f"{private}/gw/hooks/" in str(made["_text"]), made
    assert not (home / ".config" / "git" / "hooks").exists(), "the gateway made a directory in the home"


# ---- held: attempts that did not work, kept as regression tests -----------------------------------


@needs_bwrap
async def test_a_private_workdir_linked_to_the_state_dir_runs_nothing(state_dir: Path) -> None:
    """A link in the agent's private /tmp to the state dir, named as the workdir: the gateway decides in
    `<state>/hostprivate/<agent>/…/w`, which on the host leads through the link into the real state dir,
    while the run's view shows an empty tmpfs there. The run is held to the decided directory by inode,
    so it refuses rather than run with the state dir as its cwd."""
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        made = await _exec(state_dir, f"ln -s {state_dir} {private}/w", workdir=private)
        assert made["status"] == "completed", made
        for command in ("ls -la; cat operator.json gateway.json", "sh operator.json", "python3 gateway.json"):
            details = await _exec(state_dir, command, workdir=f"{private}/w")
            text = str(details["_text"])
            assert "approval-stale" in text, text
            assert str(read_token(state_dir, OPERATOR_TOKEN_NAME)) not in text


@needs_bwrap
async def test_a_script_operand_linked_into_the_state_dir_is_not_sealed_into_the_view(
    state_dir: Path,
) -> None:
    """`sh x` / `python3 x` where x (in the agent's private /tmp) links to the state dir's operator.json:
    the gateway reads operands on the host, where the link leads to the real file; a sealed copy bound
    at x would hand the run the operator token. Links are not bound: the run finds nothing there."""
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        made = await _exec(
            state_dir, f"mkdir {private}/w && ln -s {state_dir}/operator.json {private}/w/x", workdir=private
        )
        assert made["status"] == "completed", made
        token = read_token(state_dir, OPERATOR_TOKEN_NAME)
        assert token
        for command in ("sh x", "sh ./x", "python3 x", "perl x", "bash x", "cat x"):
            details = await _exec(state_dir, command, workdir=f"{private}/w")
            assert token not in str(details["_text"]), command


# The operator's program (an X server, a session bus) on an abstract datagram socket: in no directory.
@needs_bwrap
@pytest.mark.parametrize("network", ["host", "own"])
async def test_an_abstract_datagram_socket_outside_the_run_takes_no_datagram(
    state_dir: Path, network: str
) -> None:
    """The landlock scope (hostenter/confine.c, ABI 6) is tested for stream connects; a datagram sendto(2)
    to an abstract address made outside the run is the other way in, and is refused too (EPERM). In the
    host's network (hostNetwork = "host") the scope alone refuses it; in the agent's own (the default) the
    abstract name is not even there (abstract names are per network namespace): refused either way."""
    name = f"\0a10-operator-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(name)
        listener.setblocking(False)
        send = (
            'python3 -c "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); '
            f"s.sendto(b'from-a-host-run', '\\\\0{name[1:]}')\""
        )
        write_config(state_dir, FULL_HOST + f'hostNetwork = "{network}"\n')
        async with gateway(state_dir):
            details = await _exec(state_dir, send)
        refused = ("PermissionError",) if network == "host" else ("PermissionError", "ConnectionRefusedError")
        assert any(r in str(details["_text"]) for r in refused), details
        with pytest.raises(BlockingIOError):
            listener.recv(100)


@needs_bwrap
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="ptrace request numbers of x86_64")
@pytest.mark.parametrize("pty", [False, True])
async def test_a_host_run_cannot_ptrace_its_pid_1_out_of_the_abstract_socket_scope(
    state_dir: Path, pty: bool
) -> None:
    """Pid 1 of a run's namespace (exechost-hostenter, its reaper) is outside the landlock domain the
    command runs in, same uid, and (with no Yama here) would be the command's to attach to: code injected
    there could connect to the abstract sockets the scope keeps from the command. Landlock refuses a
    ptrace of a process outside the domain: PTRACE_ATTACH fails with EPERM, as root too."""
    attach = (
        'python3 -c "import ctypes; libc = ctypes.CDLL(None, use_errno=True); '
        "print('attach', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\""
    )
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        details = await _exec(state_dir, attach, pty=pty)
    assert "attach -1 1" in str(details["_text"]), details  # EPERM


@needs_bwrap
async def test_a_script_in_the_private_tmp_rewritten_after_its_ask_does_not_run(state_dir: Path) -> None:
    """A workdir in the agent's private /tmp is decided in its copy under the state dir, where the view
    cannot see (the pinned view names host paths: see the report on git there). The script the ask was
    made for is still bound: rewritten between the ask and the yes, the run is refused as stale."""
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            await client.request(
                "exec", {"command": "true", "agentId": "main", "workdir": private, "yieldMs": 30000}
            )  # makes the agent's copies
            copy = Path(hostprivate.agent_dir(str(state_dir), "main")) / quote(private, safe="")
            (copy / "s.sh").write_text("echo approved-bytes\n")
            asked = await client.request(
                "exec", {"command": "sh s.sh", "agentId": "main", "workdir": private, "yieldMs": 30000}
            )
            assert asked["details"]["status"] == "approval-pending", asked
            (copy / "s.sh").write_text("echo rewritten-after-the-ask\n")  # the agent's own, meanwhile
            await client.request("approve", {"id": asked["details"]["approvalId"], "decision": "allow-once"})

            async def told() -> str:
                events = (await client.request("events", {}))["events"]
                return " ".join(str(e.get("text")) for e in events if "sh s.sh" in str(e.get("text")))

            text = await wait_until(told, timeout=30)
        finally:
            await client.close()
    assert "approval-stale" in text and "rewritten-after-the-ask" not in text, text
