"""Issues 19/20: the one session host per state dir — fds per idle session, verified fds by SCM_RIGHTS, a
slow gateway never stalls a command (the spool is the buffer), a host that dies ends its sessions clearly,
and only its own uid may talk to it. Real processes throughout."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.commands.verified import sealed_copy
from engine.sessions import LocalLauncher, RunSpec, SessionManager
from engine.sessions import host_io as wire
from engine.sessions.host import HOLDERS_DIR, HOST_DIED, HOST_LOST, HostLauncher, HostProcess
from tests.helpers.gateway import wait_until


@pytest.fixture
async def held(state_dir: Path) -> AsyncIterator[tuple[SessionManager, HostLauncher]]:
    launcher = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
    manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
    assert await launcher.connect() is not None, launcher.problem
    yield manager, launcher
    await manager.close()
    await launcher.close()


def _host_pid(launcher: HostLauncher) -> int:
    assert launcher.link is not None
    return launcher.link.host_pid


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _background(manager: SessionManager, command: str, **extra: object) -> str:
    res = await manager.run(RunSpec(command=command, background=True, scope_key="s", **extra))  # type: ignore[arg-type]
    assert res.details["status"] == "running", res.text
    return str(res.details["sessionId"])


async def test_a_foreground_command_runs_in_the_host(held: tuple[SessionManager, HostLauncher]) -> None:
    manager, launcher = held
    res = await manager.run(RunSpec(command="echo out; echo err >&2; exit 3", scope_key="s"))
    assert res.details["exitCode"] == 3
    assert "out" in res.text and "err" in res.text
    host = _host_pid(launcher)
    # The command was the host's child, not ours: our own children list never had it.
    assert os.path.exists(f"/proc/{host}") and host != os.getpid()


async def test_idle_sessions_cost_at_most_two_host_fds_each(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    manager, launcher = held
    host = _host_pid(launcher)
    base = _fds(host)
    ours = _fds(os.getpid())
    n = 40
    ids = [await _background(manager, "exec sleep 300") for _ in range(n)]
    ids += [await _background(manager, "exec sleep 300", pty=True) for _ in range(n // 2)]
    for sid in ids[:5]:  # input reaches them; they stay idle
        session = manager.registry.get(sid)
        assert session is not None and session.handle is not None
        await session.handle.write(b"x\n")
    grown = _fds(host) - base
    # 2 per pipe session (stdin+stdout socket, stderr pipe), 1 per PTY session, plus a constant (the
    # cache of open spool files is bounded).
    assert grown <= 2 * n + n // 2 + wire.SPOOL_FDS, (grown, n)
    # The gateway holds no fd per session: one connection to the host.
    assert _fds(os.getpid()) - ours <= 4
    for sid in ids:
        session = manager.registry.get(sid)
        assert session is not None
        manager.request_kill(session)


async def test_verified_fds_reach_the_command_by_scm_rights(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    manager, _ = held
    memfd = sealed_copy(b"echo from-the-sealed-copy\n", "script")
    try:
        spec = RunSpec(command=f"/bin/sh /proc/self/fd/{memfd}", scope_key="s", pass_fds=(memfd,))
        res = await manager.run(spec)
    finally:
        os.close(memfd)
    assert res.details["status"] == "completed", res.text
    assert "from-the-sealed-copy" in res.text


async def test_passed_fds_land_at_their_numbers_whatever_the_host_holds(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    manager, _ = held
    # Two copies whose numbers swap places: each must still arrive at its own number in the child.
    first = sealed_copy(b"echo first\n", "a")
    second = sealed_copy(b"echo second\n", "b")
    try:
        command = f"/bin/sh /proc/self/fd/{first}; /bin/sh /proc/self/fd/{second}"
        res = await manager.run(RunSpec(command=command, scope_key="s", pass_fds=(first, second)))
    finally:
        os.close(first)
        os.close(second)
    assert res.text.split() == ["first", "second"], res.text


async def test_a_gateway_that_stops_reading_never_stalls_the_command(
    held: tuple[SessionManager, HostLauncher], state_dir: Path
) -> None:
    manager, launcher = held
    assert launcher.link is not None
    link = launcher.link
    go = state_dir / "go"
    flood = f"while [ ! -e {go} ]; do sleep 0.02; done; head -c 30000000 /dev/zero | tr '\\0' a; echo end"
    sid = await _background(manager, flood)
    # Stop reading the host's frames: its queue to us fills, the command keeps writing into the spool.
    asyncio.get_running_loop().remove_reader(link.sock.fileno())
    go.touch()
    spool = state_dir / HOLDERS_DIR / f"{sid}.spool"
    exit_file = state_dir / HOLDERS_DIR / f"{sid}.exit"
    await wait_until(exit_file.exists, timeout=60)  # the command ended although nobody read us
    assert spool.stat().st_size > 30_000_000
    asyncio.get_running_loop().add_reader(link.sock.fileno(), link._on_readable)
    session = manager.registry.get(sid)
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 60)
    assert session.exit_code == 0
    assert (await session.output.full_text()).rstrip().endswith("aend")


@pytest.fixture
async def small_spool(state_dir: Path) -> AsyncIterator[tuple[SessionManager, HostLauncher]]:
    """A session host whose spool holds 256 KiB per session: floods pass its cap within seconds."""
    launcher = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher(), spool_cap=256 * 1024)
    manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
    assert await launcher.connect() is not None, launcher.problem
    yield manager, launcher
    await manager.close()
    await launcher.close()


async def test_a_busy_gateway_past_the_spool_cap_loses_no_byte(
    small_spool: tuple[SessionManager, HostLauncher], state_dir: Path
) -> None:
    """Past the spool cap, output used to go only live: while the gateway was busy (its queue full) every
    frame was dropped, so the count and the tail (the command's last words) came out wrong. Now the command
    waits on its pipe until the gateway catches up."""
    manager, launcher = small_spool
    link = launcher.link
    assert link is not None
    go = state_dir / "go"
    size = 24_000_000
    flood = f"while [ ! -e {go} ]; do sleep 0.02; done; head -c {size} /dev/zero | tr '\\0' a; echo end"
    sid = await _background(manager, flood)
    loop = asyncio.get_running_loop()
    go.touch()
    for _ in range(3):  # busy, not gone: the gateway stops taking frames for a while, three times
        loop.remove_reader(link.sock.fileno())
        await asyncio.sleep(1.0)  # well under the host's STALLED_SEC
        loop.add_reader(link.sock.fileno(), link._on_readable)
        await asyncio.sleep(0.3)
    session = manager.registry.get(sid)
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 120)
    assert session.exit_code == 0
    assert session.output.total_chars == size + len("end\n")
    assert (await session.output.full_text()).rstrip().endswith("aaaend")


async def test_a_stopped_gateway_past_the_spool_cap_still_never_stalls_the_command(
    small_spool: tuple[SessionManager, HostLauncher], state_dir: Path
) -> None:
    """Waiting for the gateway past the cap is for a busy one: a gateway that takes nothing for the host's
    STALLED_SEC (stopped, hung) is not waited for, and the command runs to its end."""
    manager, launcher = small_spool
    link = launcher.link
    assert link is not None
    go = state_dir / "go"
    flood = f"while [ ! -e {go} ]; do sleep 0.02; done; head -c 12000000 /dev/zero | tr '\\0' a; echo end"
    sid = await _background(manager, flood)
    asyncio.get_running_loop().remove_reader(link.sock.fileno())
    go.touch()
    await wait_until((state_dir / HOLDERS_DIR / f"{sid}.exit").exists, timeout=60)
    asyncio.get_running_loop().add_reader(link.sock.fileno(), link._on_readable)


async def test_a_host_that_dies_ends_its_sessions_with_a_reason(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    manager, launcher = held
    sid = await _background(manager, "exec sleep 300")
    session = manager.registry.get(sid)
    assert session is not None and session.pid is not None
    os.kill(_host_pid(launcher), signal.SIGKILL)
    await asyncio.wait_for(session.done.wait(), 30)
    assert session.error == HOST_DIED
    assert session.status == "failed"
    # Its command lost its pipes with the host: the gateway ends what carries its marker, never hangs.
    await wait_until(lambda: not _alive(session.pid), timeout=30)
    res = await manager.run(RunSpec(command="echo after", scope_key="s"))
    assert res.details["status"] == "completed" and "after" in res.text


def _alive(pid: int | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


async def test_a_connection_of_another_uid_is_refused() -> None:
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root to act as another uid")
    root = Path(tempfile.mkdtemp(prefix="ehh-", dir="/tmp"))
    os.chmod(root, 0o711)  # traversable, as a state dir's parent may be
    directory = root / HOLDERS_DIR
    launcher = HostLauncher(directory, fallback=LocalLauncher())
    assert await launcher.connect() is not None
    sock_path = directory / wire.SOCKET_NAME
    probe = (
        "import socket,struct,sys\n"
        "s=socket.socket(socket.AF_UNIX); s.settimeout(5)\n"
        "try:\n s.connect(sys.argv[1])\n"
        "except OSError as e:\n print('connect', type(e).__name__); sys.exit()\n"
        "try:\n s.sendall(struct.pack('>IBI',14,1,0)+b'{\"version\":1}')\n got=s.recv(100)\n"
        "except OSError:\n got=b''\n"
        "print('answered' if got else 'closed')\n"
    )

    def as_nobody() -> str:
        res = subprocess.run(
            ["/usr/bin/python3", "-c", probe, str(sock_path)],
            user=65534,
            group=65534,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
        return res.stdout.strip() or res.stderr.strip()

    try:
        # As installed: the 0700 dir keeps another user from even reaching the socket.
        assert await asyncio.to_thread(as_nobody) == "connect PermissionError"
        # Even with the dir and the socket opened up, the host's SO_PEERCRED check says not a word.
        os.chmod(directory, 0o711)
        os.chmod(sock_path, 0o666)
        assert await asyncio.to_thread(as_nobody) == "closed"  # not even a hello
        # And the gateway's own connection is untouched by the attempt.
        link = await launcher.connect()
        assert link is not None and not link.closed
        assert "sessions" in await link.request(wire.LIST, {})
    finally:
        await launcher.close()
        shutil.rmtree(root, ignore_errors=True)


def test_the_host_socket_path_stays_short() -> None:
    # holders/host.sock adds 17 bytes to the state dir: the control socket's own limit applies first.
    assert len(f"{HOLDERS_DIR}/{wire.SOCKET_NAME}") < 20
    assert socket.AF_UNIX


async def test_a_gateway_that_takes_the_host_over_keeps_the_commands(
    held: tuple[SessionManager, HostLauncher], state_dir: Path
) -> None:
    manager, _ = held
    sid = await _background(manager, "exec sleep 300")
    session = manager.registry.get(sid)
    assert session is not None and session.pid is not None
    second = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
    try:
        assert await second.connect() is not None  # the host serves one gateway: the newest
        await asyncio.wait_for(session.done.wait(), 30)
        assert session.error == HOST_LOST  # the first gateway is told why, and kills nothing
        assert _alive(session.pid)
        assert sid in await second.list_live()
        handle = await second.attach(second.paths(sid), pty=False, marker=session.spec.marker)
        assert handle is not None and handle.live
        handle.signal_group(signal.SIGKILL)
        assert (await asyncio.wait_for(handle.wait(), 30))[1] == "SIGKILL"
    finally:
        await second.close()


async def test_a_stale_socket_is_replaced_by_a_live_host(state_dir: Path) -> None:
    directory = state_dir / HOLDERS_DIR
    directory.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(directory / wire.SOCKET_NAME))  # a socket file nobody listens on (a host that crashed)
    stale.close()
    launcher = HostLauncher(directory, fallback=LocalLauncher())
    try:
        link = await launcher.connect()
        assert link is not None and link.host_pid != os.getpid()
        assert "sessions" in await link.request(wire.LIST, {})
    finally:
        await launcher.close()


async def test_without_a_host_commands_run_as_plain_children_and_say_so(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    deep = state_dir / ("d" * 90) / HOLDERS_DIR  # the socket path would pass sun_path's 107 bytes
    launcher = HostLauncher(deep, fallback=LocalLauncher())
    manager = SessionManager(state_dir, launcher=launcher)
    with caplog.at_level("ERROR", logger="exechost.sessions"):
        res = await manager.run(RunSpec(command="echo still-runs", scope_key="s"))
    assert res.details["status"] == "completed" and "still-runs" in res.text
    assert launcher.link is None and launcher.problem and "too long" in launcher.problem
    assert any("session host unavailable" in r.getMessage() for r in caplog.records)
    await manager.close()


async def test_a_session_of_an_older_per_session_holder_is_listed_not_killed(state_dir: Path) -> None:
    from engine.sessions.adopt import LEGACY_HOLDER, adopt_held

    directory = state_dir / HOLDERS_DIR
    directory.mkdir(mode=0o700)
    marked = {**os.environ, "EXECHOST_SESSION": "calm-otter-ab"}  # what an orphan sweep would kill
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True, env=marked)
    old_holder = socket.socket(socket.AF_UNIX)
    old_holder.bind(str(directory / "calm-otter.sock"))  # an upgraded-from holder still answers here
    old_holder.listen(1)
    meta = {
        "version": 1,
        "sessionId": "calm-otter",
        "command": "sleep 300",
        "marker": "calm-otter-ab",
        "pid": sleeper.pid,
        "startedAt": 1,
    }
    (directory / "calm-otter.json").write_text(json.dumps(meta))
    launcher = HostLauncher(directory, fallback=LocalLauncher())
    manager = SessionManager(state_dir, launcher=launcher)
    try:
        [session] = await adopt_held(manager, launcher)
        await asyncio.wait_for(session.done.wait(), 30)
        assert session.error == LEGACY_HOLDER
        assert sleeper.poll() is None  # never killed
    finally:
        old_holder.close()
        sleeper.kill()
        sleeper.wait()
        await manager.close()
        await launcher.close()


async def test_ctrl_c_reaches_a_terminal_program_in_the_host(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    """Issue 36 (found by the demo): the host ignores SIGINT, and an ignored signal survives exec, so a
    terminal program it started never saw ^C (Python's KeyboardInterrupt never armed). Its PTY children
    get the default disposition back."""
    manager, _launcher = held
    prog = (
        "import signal,time;"
        "print('armed',signal.getsignal(signal.SIGINT) is signal.SIG_IGN,flush=True);time.sleep(60)"
    )
    res = await manager.run(
        RunSpec(command=f'exec python3 -c "{prog}"', background=True, pty=True, scope_key="s")
    )
    sid = str(res.details["sessionId"])

    async def armed() -> str:
        text = (await manager.process("log", {"sessionId": sid}, "s")).text
        # The whole line: with PYTHONUNBUFFERED each of print's words is its own write.
        return text if "armed True" in text or "armed False" in text else ""

    assert "armed False" in await wait_until(armed)
    await manager.process("send-keys", {"sessionId": sid, "keys": ["C-c"]}, "s")
    session = manager.get(sid)
    assert session is not None
    await asyncio.wait_for(session.done.wait(), 10)
    assert session.exit_code != 0 or session.exit_signal == "SIGINT"


async def test_every_output_byte_reaches_the_gateway_before_the_exit(
    held: tuple[SessionManager, HostLauncher],
) -> None:
    """The host told the exit when it reaped the child and read what was still in its pipes afterwards; a
    busy gateway, reading to EOF only while bytes keep coming after an exit, judged those late bytes a
    stray's and closed: 1 of 200 concurrent `echo`s came back `(no output)` (CI, held sessions). Now the
    exit follows every byte: when `wait()` returns, the whole output and its EOF are already queued."""
    _, launcher = held
    # More than one read takes (64 KiB), written up to the command's last instant: at the exit, the stdout
    # socket and the stderr pipe still hold bytes.
    size = 1_000_000
    for i in range(5):
        command = f"echo tail >&2; exec head -c {size} /dev/zero"
        handle = await launcher.spawn(RunSpec(command=command, scope_key="s", session_id=f"drain-{i}"))
        assert isinstance(handle, HostProcess)
        assert await handle.wait() == (0, None)
        out, err = 0, b""
        queue = handle._queue  # what the link delivered so far, read without giving the loop a turn
        while (item := queue.get_nowait()) is not None:
            if item[0] == "stderr":
                err += item[1]
            else:
                out += len(item[1])
        assert (out, err) == (size, b"tail\n")
        handle.close()
