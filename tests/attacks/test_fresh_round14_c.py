"""Fresh round 14 c: issue 27 §1 (no ambient credentials), aimed at the authority a run can read or reach.

Every attack here runs a command of an agent on the gateway host (`host = "gateway"`, the bwrap host view)
through a real gateway, and looks for something that authenticates by being present: a Unix socket whose
server trusts the peer's uid (SO_PEERCRED), a file, a keyring, an inherited fd or variable.

The gateway here is root, but no attack uses root's capabilities: each reads what the account itself may
(its own 0600 files, its own keyrings, a server that maps its uid to a role), and the views are built by
the same code for a gateway that is not root. Sockets outside the home (whatever listens there for this
uid answered every host run: PostgreSQL's peer auth; /run was a socket-free copy only when it held a hidden
Docker socket, and only up to 512 entries) are closed: every tree outside the run's writable roots is a
read-only layer of its own, where no socket connects (engine.commands.homelayer). One family is open:
- paths kept readable "so their programs run" (PATH, import, core.hooksPath, ssh Include glob dirs, another
  agent's pathPrepend/rootfs) are shown whole, whatever the modes of what they hold, and what is hidden is
  decided when the view is made (a credential saved later is a running run's).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks.harness import ALLOWLIST, attempt
from tests.helpers.gateway import FULL, claim_state, connect, gateway, wait_until, write_config

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# Where the cluster listens: a directory of the postgres account's own, outside the home and every hostPrivate
# default. (Debian's /run/postgresql behaves the same on a machine whose /run holds no Docker socket; here the
# view shows /run as a socket-free copy only because it hides /run/docker.sock: see operators_database.)
PG_HOME = Path("/var/lib/postgresql")
PSQL = shutil.which("psql") or "/usr/bin/psql"
SECRET = "s3cret-row-only-the-operators-role-may-read"


def _postgres_account() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


needs_postgres = pytest.mark.skipif(
    os.geteuid() != 0
    or _postgres_account() is None
    or not (PG_BIN / "postgres").exists()
    or not PG_HOME.is_dir()
    or not os.path.exists(PSQL)
    or shutil.which("setpriv") is None,
    reason="needs root, setpriv, PostgreSQL 15 (Debian layout), psql and /var/lib/postgresql",
)


def _as_postgres(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", *argv],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        **kw,  # type: ignore[arg-type]
    )


def _free_port(directory: Path) -> int:
    # A socket name free in `directory` (the cluster listens on no TCP address at all).
    for port in range(54300, 54400):
        if not any((directory / f".s.PGSQL.{port}{end}").exists() for end in ("", ".lock")):
            return port
    raise AssertionError(f"no free socket name in {directory}")


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def operators_database(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, int]]:
    """The operator's PostgreSQL as Debian sets it up: a cluster of the postgres account listening only on
    a Unix socket (no TCP), `local all all peer` (a connection is the database role named like the peer's
    Unix account, by SO_PEERCRED, no password), and a role for the operator's account holding a table only
    that role may read. Yields (socket dir, port).

    own-dir: the socket in a directory of the postgres account's own (/var/lib/postgresql/…).
    run-postgresql: Debian's own /run/postgresql, on a machine with no Docker socket in /run. (This machine
    has /run/docker.sock, which the view hides by showing /run as a socket-free copy, dirshadow: the copy
    goes with the socket. The gateway runs in this process, so `engine_sockets` is made to find none, as
    on a machine without Docker; nothing else changes.)
    run-postgresql-busy-run: Debian's /run/postgresql on this machine as it is, /run/docker.sock and all,
    with /run as busy as a Docker host's with many containers (per-container dirs and fifos): the socket-free
    copy of /run has a budget of 512 entries (dirshadow.MAX_ENTRIES), past which each directory it reaches
    is bound whole, its sockets in it. A directory of 300 one-file subdirectories stands in for that state
    (made before the gateway starts, removed after).
    tcp-trust: the cluster also on 127.0.0.1 with `host all all 127.0.0.1/32 trust` (a developer's
    machine), for the control that a host run's own network namespace cuts it off.
    run-postgresql-shadowed: this machine as it is: /run/docker.sock is hidden (it was shown as a
    socket-free copy of /run, which the layers replace)."""
    param = request.param
    if param not in ("own-dir", "tcp-trust") and not Path("/run/postgresql").is_dir():
        pytest.skip("no /run/postgresql")
    if param in ("run-postgresql-busy-run", "run-postgresql-shadowed") and not os.path.exists(
        "/run/docker.sock"
    ):
        pytest.skip("no Docker socket in /run: nothing shows /run as a copy")
    account = _postgres_account()
    assert account is not None
    data = Path(tempfile.mkdtemp(prefix="eh14c-pg-", dir=PG_HOME))
    os.chmod(data, 0o755)
    os.chown(data, account.pw_uid, account.pw_gid)
    sockets = data if param in ("own-dir", "tcp-trust") else Path("/run/postgresql")
    busy: Path | None = None
    if param == "run-postgresql-busy-run":
        busy = Path(tempfile.mkdtemp(prefix="eh14c-busy-", dir="/run"))
        for n in range(300):
            (busy / f"c{n:03}").mkdir()
            (busy / f"c{n:03}" / "state").write_text("")
    elif param == "run-postgresql":
        from engine.tools import exec_host

        monkeypatch.setattr(exec_host, "engine_sockets", lambda: ())
    port = _free_port(sockets) if param != "tcp-trust" else _free_tcp_port()
    listen = "127.0.0.1" if param == "tcp-trust" else ""
    operator = pwd.getpwuid(os.geteuid()).pw_name
    try:
        _as_postgres(
            str(PG_BIN / "initdb"),
            "-D",
            str(data / "d"),
            "--auth-local=peer",
            "--auth-host=trust",
            "-U",
            "postgres",
        )
        _as_postgres(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data / "d"),
            "-w",
            "-l",
            str(data / "log"),
            "-o",
            f"-c listen_addresses='{listen}' -c unix_socket_directories='{sockets}' -p {port}",
            "start",
        )
        sql = (
            f'CREATE ROLE "{operator}" LOGIN; CREATE TABLE vault(s text); '
            f"INSERT INTO vault VALUES ('{SECRET}'); REVOKE ALL ON vault FROM PUBLIC; "
            f'GRANT SELECT ON vault TO "{operator}";'
        )
        _as_postgres(PSQL, "-h", str(sockets), "-p", str(port), "-U", "postgres", "-c", sql)
        yield str(sockets), port
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data / "d"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)
        if busy is not None:
            shutil.rmtree(busy, ignore_errors=True)


@needs_postgres
@pytest.mark.parametrize(
    "operators_database", ["own-dir", "run-postgresql", "run-postgresql-busy-run"], indirect=True
)
async def test_class1_the_operators_database_by_peer_auth_is_a_host_runs(
    state_dir: Path, operators_database: tuple[str, int]
) -> None:
    sockets, port = operators_database
    work = state_dir.parent / "w"
    work.mkdir()
    command = f"psql -h {sockets} -p {port} -d postgres -Atc 'select s from vault'"
    # security = "full": the agent may run anything on the gateway host, in the host view, which is what
    # keeps the operator's authority from it at every level (an allowlisted psql asks every time: it can
    # run shell commands, so treeSafe refuses it).
    details = await attempt(state_dir, command, config=FULL, workdir=str(work))
    assert details["status"] == "completed", details
    assert SECRET not in details["_text"], details["_text"]
    # the socket is there, by its name, and answers nothing: the run sees it through its own read-only
    # layer, on whose inode no server is bound (engine.commands.homelayer)
    assert "Connection refused" in details["_text"], details["_text"]


_CONNECT = """
import socket, sys
for name in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(name)
        print(name, "connected")
    except OSError as e:
        print(name, e.strerror)
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_the_agents_own_sockets_in_its_writable_roots_still_connect(state_dir: Path) -> None:
    """The control: a writable root (`hostWritable`, in the home and outside it) is the host's own
    directory in the view, not a layer, so a server listening there (the agent's own, started by an earlier
    run or anything the operator gave it) is reached; beside it, in a directory outside the writable roots,
    the same server is refused."""
    home = Path(os.environ["HOME"])
    (home / "work").mkdir()
    outside = Path(tempfile.mkdtemp(prefix="eh14c-own-", dir="/var/tmp"))
    other = Path(tempfile.mkdtemp(prefix="eh14c-other-", dir="/var/tmp"))
    servers = []
    try:
        names = [home / "work" / "own.sock", outside / "own.sock", other / "op.sock"]
        for name in names:
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(name))
            server.listen(4)
            servers.append(server)
        config = FULL + f'hostWritable = ["~/work", "{outside}"]\n'
        script = shlex.quote(_CONNECT)
        command = f"python3 -c {script} " + " ".join(map(str, names))
        details = await attempt(state_dir, command, config=config, workdir=str(home / "work"))
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
    text = details["_text"]
    assert f"{names[0]} connected" in text and f"{names[1]} connected" in text, text
    assert f"{names[2]} Connection refused" in text, text


@needs_postgres
@pytest.mark.parametrize("operators_database", ["run-postgresql-shadowed"], indirect=True)
async def test_class1_the_shadowed_run_hides_the_databases_socket(
    state_dir: Path, operators_database: tuple[str, int]
) -> None:
    """This machine as it is (/run/docker.sock hidden): /run was shown as a socket-free copy, by accident of
    the Docker socket's place; now it is a run's read-only layer as every tree outside the writable roots
    is, and the database's socket is there but answers nothing."""
    sockets, port = operators_database
    work = state_dir.parent / "w"
    work.mkdir()
    command = f"psql -h {sockets} -p {port} -d postgres -Atc 'select s from vault'"
    details = await attempt(state_dir, command, config=FULL, workdir=str(work))
    assert details["status"] == "completed", details
    assert SECRET not in details["_text"]
    assert "Connection refused" in details["_text"], details["_text"]


@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("git") is None, reason="needs bwrap and git"
)
async def test_class1_a_private_file_the_gitconfig_includes_is_a_host_runs(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text("[user]\n\tname = Op\n[include]\n\tpath = ~/.gitconfig.local\n")
    local = home / ".gitconfig.local"
    local.write_text(f"[sendemail]\n\tsmtpUser = op@example.org\n\tsmtpPass = {SECRET}\n")
    os.chmod(local, 0o600)
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .gitconfig.local", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_the_same_private_file_not_included_is_hidden(state_dir: Path) -> None:
    """The control: with no include naming it, the 0600 file is the empty file in the view."""
    home = Path(os.environ["HOME"])
    (home / ".gitconfig").write_text("[user]\n\tname = Op\n")
    local = home / ".gitconfig.local"
    local.write_text(f"[sendemail]\n\tsmtpPass = {SECRET}\n")
    os.chmod(local, 0o600)
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .gitconfig.local", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_private_files_in_a_private_path_dir_are_a_host_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(os.environ["HOME"])
    bin_dir = home / "bin"
    bin_dir.mkdir(mode=0o700)
    script = bin_dir / "deploy"
    script.write_text(f"#!/bin/sh\n. ~/bin/.env\ncurl -H 'Authorization: Bearer {SECRET}' \"$URL\"\n")
    os.chmod(script, 0o700)
    env = bin_dir / ".env"
    env.write_text(f"URL=https://deploy.example.org\nAPI_KEY={SECRET}\n")
    os.chmod(env, 0o600)
    # The operator's shell put ~/bin first on PATH, and the gateway was started from it.
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat bin/.env", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-the-operators-own-key\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.parametrize("include", ["~/.ssh/config-*", "config-*", "~/.ssh/*.conf", "~/.ssh/*/config"])
async def test_class1_an_include_glob_in_ssh_shows_the_operators_private_key(
    state_dir: Path, include: str
) -> None:
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "config").write_text(f"Include {include}\n\nHost *\n  ServerAliveInterval 30\n")
    if include.endswith("/config"):
        (ssh / "work").mkdir(mode=0o700)
        (ssh / "work" / "config").write_text("Host w\n  User op\n")
    else:
        (ssh / ("work.conf" if include.endswith(".conf") else "config-work")).write_text(
            "Host w\n  User op\n"
        )
    (ssh / "id_ed25519").write_text(KEY)
    for f in ssh.iterdir():
        if f.is_file():
            os.chmod(f, 0o600)
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .ssh/id_ed25519", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert "the-operators-own-key" not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.parametrize("include", ["", "Include config.d/*\n"])
async def test_class1_the_ssh_key_is_hidden_with_no_glob_in_ssh_itself(state_dir: Path, include: str) -> None:
    """The control: with no Include, or a glob in a subdirectory, ~/.ssh's key is the empty file."""
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "config.d").mkdir(mode=0o700)
    (ssh / "config").write_text(f"{include}Host *\n  ServerAliveInterval 30\n")
    (ssh / "id_ed25519").write_text(KEY)
    os.chmod(ssh / "config", 0o600)
    os.chmod(ssh / "id_ed25519", 0o600)
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .ssh/id_ed25519", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert "the-operators-own-key" not in details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_an_include_glob_in_dot_config_shows_the_browser_profile(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "config").write_text("Include ~/.config/*/ssh_config\n")
    os.chmod(ssh / "config", 0o600)
    config = home / ".config"
    config.mkdir(mode=0o700)
    (config / "colima").mkdir()
    (config / "colima" / "ssh_config").write_text("Host colima\n  HostName 127.0.0.1\n")
    profile = config / "chromium" / "Default"
    profile.mkdir(parents=True)
    os.chmod(config / "chromium", 0o700)
    (profile / "Cookies").write_text(f"v10-encrypted-session-{SECRET}")
    os.chmod(profile / "Cookies", 0o600)
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .config/chromium/Default/Cookies", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.parametrize(
    "table",
    [
        '[agents.list.tools.exec]\npathPrepend = ["~/ops-bin"]',
        '[agents.list.sandbox.bwrap]\nrootfs = "~/ops-bin"',
    ],
)
async def test_class1_another_agents_private_path_prepend_dir_is_a_host_runs(
    state_dir: Path, table: str
) -> None:
    home = Path(os.environ["HOME"])
    tools = home / "ops-bin"
    tools.mkdir(mode=0o700)
    (tools / "deploy").write_text(f"#!/bin/sh\nexec curl -H 'Authorization: Bearer {SECRET}' \"$@\"\n")
    os.chmod(tools / "deploy", 0o700)
    config = f'{ALLOWLIST}\n[[agents.list]]\nid = "ops"\n{table}\n'
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat ops-bin/deploy", allow=[(cat, None)], config=config)
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_another_agents_private_writable_dir_is_covered(state_dir: Path) -> None:
    """The control: the same dir as ops's `hostWritable` is an empty cover in main's view."""
    home = Path(os.environ["HOME"])
    tools = home / "ops-bin"
    tools.mkdir(mode=0o700)
    (tools / "deploy").write_text(f"#!/bin/sh\nexec curl -H 'Authorization: Bearer {SECRET}' \"$@\"\n")
    os.chmod(tools / "deploy", 0o700)
    config = (
        f'{ALLOWLIST}\n[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nhostWritable = ["~/ops-bin"]\n'
    )
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat ops-bin/deploy", allow=[(cat, None)], config=config)
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_private_files_in_a_private_import_dir_are_a_host_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(os.environ["HOME"])
    lib = home / "pylib"
    lib.mkdir(mode=0o700)
    local = lib / "settings_local.py"
    local.write_text(f"DATABASE_PASSWORD = {SECRET!r}\n")
    os.chmod(local, 0o600)
    # The gateway (in this process, as the daemon a client started with its PYTHONPATH) imports from it.
    monkeypatch.syspath_prepend(str(lib))
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat pylib/settings_local.py", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
@pytest.mark.xfail(
    strict=True,
    reason="open: the private files a view hides are found when the view is made; a credential the "
    "operator saves afterwards, 0600 from its first byte (the README's `install -m 0600 /dev/null "
    "~/.config/ops.token`, then the token), is read by agent main's host run that was already running (a new "
    "run gets the empty file)",
)
async def test_class1_a_credential_saved_after_a_run_started_is_that_runs(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".config").mkdir(mode=0o755)
    work = home / "work"
    work.mkdir()
    go = work / "go"
    os.mkfifo(go)
    token = home / ".config" / "ops.token"
    config = FULL + 'hostWritable = ["~/work"]\n'
    write_config(state_dir, config)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            # Blocks on the fifo (the agent's own dir) until the operator has saved the token: no lookup
            # of the token's name before it exists, so no negative entry in the run's overlay either.
            command = "read x < ~/work/go; cat ~/.config/ops.token; echo END"
            started = await client.request(
                "exec", {"command": command, "agentId": "main", "background": True, "workdir": str(work)}
            )
            session = started["details"]["sessionId"]
            fd = os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.write(fd, f"{SECRET}\n".encode())
            os.close(fd)
            writer = os.open(go, os.O_RDWR)  # never blocks; held until the run has read
            os.write(writer, b"go\n")
            seen: dict[str, str] = {}

            async def ended() -> bool:
                polled = await client.request(
                    "process", {"action": "poll", "sessionId": session, "agentId": "main"}
                )
                seen["text"] = polled["text"]
                return "END" in polled["text"]

            try:
                await wait_until(ended, timeout=20)
            finally:
                os.close(writer)
        finally:
            await client.close()
    assert SECRET not in seen["text"], seen["text"]


@pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None, reason="needs bwrap, git")
async def test_class1_a_private_hooks_path_dir_is_a_host_runs(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    hooks = home / ".githooks"
    hooks.mkdir(mode=0o700)
    hook = hooks / "pre-push"
    hook.write_text(f"#!/bin/sh\ncurl -s -d 'pushed' https://hooks.example.org/services/{SECRET}\n")
    os.chmod(hook, 0o700)
    (home / ".gitconfig").write_text("[core]\n\thooksPath = ~/.githooks\n")
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, "cat .githooks/pre-push", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@needs_postgres
@pytest.mark.parametrize("operators_database", ["tcp-trust"], indirect=True)
async def test_class1_the_operators_database_on_loopback_is_not_a_host_runs(
    state_dir: Path, operators_database: tuple[str, int]
) -> None:
    """The defence that holds (fresh round 11 a): the same database with `trust` on 127.0.0.1 is not in the
    run's network namespace, which has a loopback of its own."""
    _, port = operators_database
    work = state_dir.parent / "w"
    work.mkdir()
    command = f"psql -h 127.0.0.1 -p {port} -d postgres -Atc 'select s from vault'"
    details = await attempt(state_dir, command, config=FULL, workdir=str(work))
    assert details["status"] == "completed", details
    assert SECRET not in details["_text"]
    assert "Connection refused" in details["_text"], details["_text"]


_KEYCTL = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR_KEYCTL = 250  # x86_64
for keyring in (-4, -5):  # the account's user keyring (@u) and user session keyring (@us)
    libc.syscall(NR_KEYCTL, 8, ctypes.c_long(keyring), ctypes.c_long(-3))  # KEYCTL_LINK into the run's @s
for name in sys.argv[1:]:
    key = libc.syscall(NR_KEYCTL, 10, ctypes.c_long(-3), b"user", name.encode(), 0)  # KEYCTL_SEARCH
    buf = ctypes.create_string_buffer(200)
    n = libc.syscall(NR_KEYCTL, 11, ctypes.c_long(key), buf, 200) if key > 0 else -1  # KEYCTL_READ
    print(name, buf.value.decode() if n > 0 else "unread")
"""


@pytest.mark.skipif(
    os.uname().machine != "x86_64" or shutil.which("bwrap") is None, reason="x86_64 syscall numbers, bwrap"
)
async def test_class1_the_accounts_user_keyrings_are_a_host_runs(state_dir: Path) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr_add_key, nr_keyctl = 248, 250
    names = {-4: "eh14c-u", -5: "eh14c-us"}
    keys = []
    for keyring, name in names.items():
        data = f"{SECRET}-{name}".encode()
        key = libc.syscall(nr_add_key, b"user", name.encode(), data, len(data), ctypes.c_long(keyring))
        assert key > 0, ctypes.get_errno()
        keys.append(key)
    try:
        work = state_dir.parent / "w"
        work.mkdir()
        script = work / "k.py"
        script.write_text(_KEYCTL)
        command = f"python3 {script} {' '.join(names.values())}"
        details = await attempt(state_dir, command, config=FULL, workdir=str(script.parent))
    finally:
        for key in keys:
            libc.syscall(nr_keyctl, 21, ctypes.c_long(key))  # KEYCTL_INVALIDATE
    assert details["status"] == "completed", details["_text"]
    assert SECRET not in details["_text"], details["_text"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_class1_another_gateways_state_dir_outside_the_home_is_a_host_runs(state_dir: Path) -> None:
    other = state_dir.parent / "srv-exechost-b"  # outside the home and every private dir, as /srv is
    other.mkdir(mode=0o700)
    claim_state(other)  # the operator's CLI, before it writes a config there
    write_config(other, FULL)
    async with gateway(other):  # gateway B makes its tokens
        pass
    token = json.loads((other / "operator.json").read_text())["token"]
    cat = shutil.which("cat") or "/usr/bin/cat"
    details = await attempt(state_dir, f"cat {other}/operator.json", allow=[(cat, None)])
    assert details["status"] == "completed", details["_text"]
    assert token not in details["_text"], details["_text"]
