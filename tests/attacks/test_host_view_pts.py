"""Terminals in the host view (issue 27, class 2): every agent's host commands shared the host's /dev/pts,
so an allowlisted `echo X | tee /dev/pts/N` reached another agent's terminal session, or the operator's
own terminal (the tmux pane the gateway or the console runs in). Every run now has a /dev/pts of its own
(a devpts instance made by exechost-hostenter) and a terminal session's terminal is made in it: no other
terminal has a name in the run's view, and the session's own still works as a terminal."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import ALLOWLIST, FULL, connect, gateway, write_config

pytestmark = needs_bwrap

# Checked inside a PTY session: its terminal is named in its own view, is stdin, answers stty (the size
# the session asked for), and is the /dev/tty it opens; a terminal made inside (script) is the run's too;
# /dev/pts holds nothing but its own.
_TERMINAL_CHECKS = (
    't=$(tty); echo TTY=$t; test -c "$t" && echo NAMED; test -t 0 && echo STDIN-IS-TTY; '
    "echo SIZE=$(stty size); stty -echo && stty echo && echo STTY-OK; echo via-dev-tty > /dev/tty; "
    "python3 -c 'import os; print(\"TTYNAME=\" + os.ttyname(0))'; "
    "echo INNER=$(script -qec tty /dev/null | tr -d '\\r'); echo PTS=$(ls /dev/pts | tr '\\n' ' ')"
)


# Checked in a run with no terminal: /dev/pts lists only ptmx, and a terminal made there is the run's.
_PLAIN_CHECKS = "echo PTS=$(ls -A /dev/pts); echo INNER=$(script -qec tty /dev/null | tr -d '\\r')"


@contextmanager
def _operator_terminal() -> Iterator[tuple[int, int]]:
    """A terminal this process (the gateway) holds, as its tmux pane or the console's: (master, slave)."""
    master, slave = os.openpty()
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def _read_until(master: int, marker: bytes) -> bytes:
    """What the terminal shows up to and including `marker`: everything written to it before (a tty keeps
    order). The bound only fails a broken run; nothing waits on it."""
    seen = b""
    while marker not in seen:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            raise AssertionError(f"{marker!r} never reached the terminal: {seen!r}")
        seen += os.read(master, 65536)
    return seen


def _allow(state: Path, agent: str, *programs: str) -> None:
    store = ApprovalsStore(state / "exec-approvals.json")
    for program in programs:
        store.add_allowlist(agent, program, arg_pattern=None)


@pytest.mark.parametrize("held", [False, True], ids=["child", "session-host"])
async def test_class2_an_allowlisted_tee_never_reaches_the_operators_terminal(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """Agent main knows the operator's terminal (`who`, `ps -o tty` of the gateway: /dev/pts/K) and has
    echo and tee allowlisted: it writes nothing there, nor to /dev/tty, nor to any terminal the host has."""
    if held:
        monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # the daemon's way: sessions in the host
    write_config(state_dir, ALLOWLIST)
    _allow(state_dir, "main", "/usr/bin/echo", "/usr/bin/tee")
    with _operator_terminal() as (master, slave):
        mine = os.ttyname(slave)
        everything = sorted({mine, *(f"/dev/pts/{n}" for n in os.listdir("/dev/pts") if n.isdigit())})
        async with gateway(state_dir):
            main = await connect(state_dir, "main", operator=False)
            try:
                for target in (mine, "/dev/tty", " ".join(everything)):
                    done = await main.request(
                        "exec", {"command": f"echo FORGED-BY-MAIN | tee {target}", "workdir": str(tmp_path)}
                    )
                    assert done["details"]["status"] in ("completed", "failed"), done["text"]  # it ran
            finally:
                await main.close()
        os.write(slave, b"OPERATOR-SENTINEL\n")  # the operator's own output, after every write of main's
        shown = _read_until(master, b"OPERATOR-SENTINEL")
    assert b"FORGED" not in shown, "an agent's host command wrote into the operator's terminal"


@pytest.mark.parametrize("held", [False, True], ids=["child", "session-host"])
async def test_a_pty_session_has_a_working_terminal_named_in_its_own_view(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """ttyname() (tty, python's os.ttyname) resolves /proc/self/fd/0 and stats it: the terminal is made in
    the run's own devpts, so the name it gives exists there; stty, /dev/tty and a terminal made inside
    (script, as ssh -t and tmux make one) work; and no other session's terminal is listed."""
    if held:
        monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")
    write_config(state_dir, FULL)
    with _operator_terminal():  # one more terminal on the host: not the session's to see
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                other = await operator.request(
                    "exec", {"command": "cat", "workdir": str(tmp_path), "pty": True, "background": True}
                )
                done = await operator.request(
                    "exec",
                    {
                        "command": _TERMINAL_CHECKS,
                        "workdir": str(tmp_path),
                        "pty": True,
                    },
                )
                await operator.request(
                    "process", {"action": "kill", "sessionId": other["details"]["sessionId"]}
                )
            finally:
                await operator.close()
    text = done["text"]
    assert done["details"]["status"] == "completed", text
    lines = [line.strip() for line in text.splitlines()]
    assert "TTY=/dev/pts/0" in lines and "NAMED" in lines and "STDIN-IS-TTY" in lines, text
    assert "TTYNAME=/dev/pts/0" in lines and "via-dev-tty" in lines and "STTY-OK" in lines, text
    assert "SIZE=40 120" in lines, text  # the session's size (RunSpec's), set before the command ran
    assert "INNER=/dev/pts/1" in lines, text  # script's terminal: made in the run's devpts too
    assert "PTS=0 1 ptmx" in lines or "PTS=0 ptmx" in lines, text  # its own (script's is gone by then)


async def test_a_host_command_lists_no_terminal_but_its_own(state_dir: Path, tmp_path: Path) -> None:
    """A plain run's /dev/pts is empty but for ptmx (a terminal it makes is its own); the operator's and a
    running PTY session's are on the host's, where no run looks."""
    write_config(state_dir, FULL)
    with _operator_terminal():
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                other = await operator.request(
                    "exec", {"command": "cat", "workdir": str(tmp_path), "pty": True, "background": True}
                )
                done = await operator.request(
                    "exec",
                    {
                        "command": _PLAIN_CHECKS,
                        "workdir": str(tmp_path),
                    },
                )
                await operator.request(
                    "process", {"action": "kill", "sessionId": other["details"]["sessionId"]}
                )
            finally:
                await operator.close()
    lines = [line.strip() for line in done["text"].splitlines()]
    assert "PTS=ptmx" in lines and "INNER=/dev/pts/0" in lines, done["text"]


def test_a_pinned_runs_own_bwrap_gives_the_same_terminals(state_dir: Path, tmp_path: Path) -> None:
    """A run with pinned copies takes a bwrap of its own: its /dev/pts is its own there too, and a PTY
    session's terminal is made in it, through the session host's spawn and the gateway's own alike."""
    from engine.commands.pinned import pinned_view
    from engine.sessions import host_spawn

    script = tmp_path / "s.sh"
    script.write_text("true\n")
    with _operator_terminal() as (master, slave):
        view = pinned_view(None, [(str(script), b"true\n")], host=True)
        try:
            assert "own-pts" in view.prefix and view.terminal()
            argv = view.wrap(["/bin/sh", "-c", f"{_TERMINAL_CHECKS}; echo FORGED | tee {os.ttyname(slave)}"])
            msg = {
                "argv": argv,
                "env": dict(os.environ),
                "pty": True,
                "ptyInView": True,
                "fds": list(view.fds),
            }
            msg.update(cwd=str(tmp_path), cols=91, rows=27)
            started = host_spawn.start(msg, list(view.fds))
        finally:
            view.close()
        (terminal,) = started.streams
        out = b""
        while chunk := _read_some(terminal):
            out += chunk
        started.popen.wait()
        os.close(terminal)
        os.write(slave, b"OPERATOR-SENTINEL\n")
        shown = _read_until(master, b"OPERATOR-SENTINEL")
    lines = [line.strip() for line in out.decode().splitlines()]
    assert "TTY=/dev/pts/0" in lines and "NAMED" in lines and "TTYNAME=/dev/pts/0" in lines, out
    assert "SIZE=27 91" in lines and "STTY-OK" in lines and "INNER=/dev/pts/1" in lines, out
    assert b"FORGED" not in shown


def _read_some(fd: int) -> bytes:
    """A terminal's output until its last holder closes it (EIO)."""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def test_a_helper_that_cannot_make_the_terminal_says_why(tmp_path: Path) -> None:
    """The session host is never left waiting for a terminal that will not come: what the helper said
    instead is the error, and nothing ran."""
    from engine.commands import hostkeeper
    from engine.sessions import host_spawn

    helper = hostkeeper.helper_path()
    if helper is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    marker = tmp_path / "ran"
    argv = [helper, "own-pts", "bogus", "--", "/bin/sh", "-c", f"touch {marker}"]
    with pytest.raises(OSError, match="made no terminal"):
        host_spawn.start_view_pty(argv, {"start_new_session": True}, 80, 24)
    assert not marker.exists()
    done = subprocess.run(
        [helper, "own-pts", "-", "--", "/bin/sh", "-c", "ls -A /dev/pts"], capture_output=True
    )
    assert done.stdout == b"ptmx\n"


# Run as nobody with the system's python (the test's venv may not be reachable by nobody): the session
# host's spawn (host_spawn is stdlib only) of a PTY session in a bwrap of its own and in a kept view.
_AS_NOBODY = r"""
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import host_spawn
helper, checks = sys.argv[2], sys.argv[3]
def shown(popen, master):
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    popen.wait()
    os.close(master)
    return out.decode().replace("\r", "")
view = ["--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"]
own = ["/usr/bin/env", "--ignore-signal=INT,QUIT,TSTP", helper, "own-pts", "1", "--", "bwrap", *view, "--",
       helper, "check-cwd", "-", "--", "/bin/sh", "-c", checks]
print(shown(*host_spawn.start_view_pty(own, {"start_new_session": True}, 77, 22)), end="\0")
keeper = subprocess.Popen(["bwrap", "--dev-bind", "/", "/", "--", helper, "keep"], stdin=-1, stdout=-1)
pid = int(keeper.stdout.readline())
fds = [os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY) for kind in ("mnt", "user")]
kept = [helper, "enter", *map(str, fds), "-", "1", "--", "/bin/sh", "-c", checks]
print(shown(*host_spawn.start_view_pty(kept, {"start_new_session": True, "pass_fds": fds}, 77, 22)), end="")
keeper.stdin.close()
keeper.wait()
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="runs the view as nobody (needs root)"
)
def test_as_a_non_root_user_a_pty_sessions_terminal_is_made_in_its_own_view(tmp_path: Path) -> None:
    """A non-root gateway's helper mounts the devpts in a user namespace (the keeper's, or one mapping only
    itself before a bwrap of its own) and makes the terminal there, as root's does."""
    from engine.commands import hostkeeper
    from engine.sessions import host_spawn

    helper = hostkeeper.helper_path()
    if helper is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    root = Path(tempfile.mkdtemp(prefix="eh-nobody-", dir="/tmp"))  # pytest's tmp dirs are root's alone
    try:
        shutil.copy(host_spawn.__file__, root / "host_spawn.py")
        shutil.copy(helper, root / "hostenter")
        for path in (root, root / "host_spawn.py", root / "hostenter"):
            path.chmod(0o755)
        checks = (
            "id -u; echo TTY=$(tty); test -t 0 && echo STDIN-IS-TTY; echo SIZE=$(stty size); " + _PLAIN_CHECKS
        )
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
             _AS_NOBODY, str(root), str(root / "hostenter"), checks],
            capture_output=True, text=True, check=False, cwd="/",
        )  # fmt: skip
    finally:
        shutil.rmtree(root)
    own, _, kept = done.stdout.partition("\0")
    assert own == kept, done.stderr
    assert own.split() == ["65534", "TTY=/dev/pts/0", "STDIN-IS-TTY", "SIZE=22", "77", "PTS=0", "ptmx",
                           "INNER=/dev/pts/1"], done.stderr  # fmt: skip


async def test_class2_a_host_command_never_reaches_the_gateway_daemons_controlling_terminal(
    state_dir: Path, tmp_path: Path
) -> None:
    """The gateway daemon run in the operator's tmux pane: that terminal is its controlling terminal and
    stdin. Agent main, with echo and tee allowlisted, names it (`ps -o tty` shows it) and /dev/tty; its
    command runs in the session host, as the daemon runs every one: nothing reaches the pane."""
    import fcntl
    import sys
    import termios

    from engine.protocol.frames import socket_path
    from engine.unixsock import socket_is_live
    from tests.helpers.gateway import REPO, wait_until

    write_config(state_dir, ALLOWLIST)
    _allow(state_dir, "main", "/usr/bin/echo", "/usr/bin/tee")
    log = tmp_path / "gateway.log"
    with _operator_terminal() as (master, slave), open(log, "ab") as out:
        pane = os.ttyname(slave)

        def in_the_pane() -> None:  # pragma: no cover - runs in the forked child
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "runner", "gateway", "run"],
            env=env, cwd=str(REPO), stdin=slave, stdout=out, stderr=out,
            start_new_session=True, preexec_fn=in_the_pane,
        )  # fmt: skip
        try:
            await wait_until(lambda: socket_is_live(socket_path(state_dir)) or daemon.poll() is not None, 60)
            assert daemon.poll() is None, log.read_text()[-3000:]
            with open(f"/proc/{daemon.pid}/stat") as stat:
                tty_nr = int(stat.read().rsplit(")", 1)[1].split()[4])
            assert tty_nr == os.stat(pane).st_rdev  # the pane is the daemon's controlling terminal
            main = await connect(state_dir, "main", operator=False)
            try:
                for target in (pane, "/dev/tty"):
                    done = await main.request(
                        "exec", {"command": f"echo FORGED-BY-MAIN | tee {target}", "workdir": str(tmp_path)}
                    )
                    assert done["details"]["status"] in ("completed", "failed"), done["text"]  # it ran
            finally:
                await main.close()
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        os.write(slave, b"OPERATOR-SENTINEL\n")
        shown = _read_until(master, b"OPERATOR-SENTINEL")
    assert b"FORGED" not in shown, "an agent's host command wrote into the gateway's own terminal"


async def test_a_host_runs_devpts_has_a_max_of_its_own(state_dir: Path, tmp_path: Path) -> None:
    """Every devpts instance but the host's own takes from kernel.pty.max less kernel.pty.reserve: a run's
    own has a max= (exechost-hostenter's RUN_PTYS), so one run never takes every terminal of the host."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            done = await operator.request(
                "exec", {"command": "grep ' /dev/pts ' /proc/self/mounts", "workdir": str(tmp_path)}
            )
        finally:
            await operator.close()
    assert "devpts" in done["text"] and ",max=256" in done["text"], done["text"]
