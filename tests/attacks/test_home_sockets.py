"""Issue 27 §1 (fresh round 10 a; from branch sock29): the operator's Unix sockets anywhere in the home (an
ssh ControlMaster, Docker Desktop's engine, a database's) are not a gateway-host run's
(engine.commands.homesockets)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import hostkeeper
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap

pytestmark = needs_bwrap

FULL = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n'
SECRET = "OPERATOR-SOCKET-ANSWERED"


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short root (socket paths <= 107 bytes) holding the state dir and the home."""
    root = Path(tempfile.mkdtemp(prefix="sk", dir="/tmp"))
    (root / "state").mkdir(mode=0o700)
    (root / "home").mkdir()
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(root / "home"))  # the home host views protect
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    yield root
    hostkeeper.stop()
    shutil.rmtree(root, ignore_errors=True)


class _Server:
    """The operator's socket: answers SECRET to whoever connects (a master or agent would run or sign)."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(SECRET.encode())

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)


def _master_like(path: Path) -> _Server:
    """Bound as ssh binds a ControlPath: at a temporary name beside it, then linked to its name and the
    temporary name removed (what /proc/net/unix lists is the temporary name)."""
    temp = path.with_name(path.name + ".Xq3ZpLk9aB")
    server = _Server(str(temp))
    os.link(temp, path)
    os.unlink(temp)
    return server


def _connect(address: str) -> str:
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1]); print(s.recv(64).decode())\n"
        "except OSError as e: print('refused', e)\n"
    )
    shown = address.replace("\0", "@")
    return f"python3 -c {_quote(code)} {_quote(shown)}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.parametrize(
    "place",
    [
        ".ssh/cm-node",
        ".ssh/sockets/cm-node",
        ".cache/ssh/cm-node",
        ".ansible/cp/0a1b2c3d",
        "proj/.s.PGSQL.5432",
        ".docker/desktop/docker.sock",
    ],
)
async def test_an_operators_socket_anywhere_in_the_home_is_not_a_host_runs(short: Path, place: str) -> None:
    """A ControlPath (or any socket the operator serves) in any directory of the home: a read-only home
    does not stop connect(2); the view covers every socket the operator has bound there."""
    sock = short / "home" / place
    sock.parent.mkdir(parents=True)
    server = _master_like(sock)
    try:
        out = await attempt(short / "state", _connect(str(sock)), config=FULL, host="gateway")
    finally:
        server.close()
    assert out["status"] == "completed", out
    assert SECRET not in out["_text"], out


async def test_a_socket_bound_after_a_kept_view_was_made_is_hidden_in_the_next_run(short: Path) -> None:
    """The kept view is made once and re-used: a socket the operator binds later changes what the view
    must cover, so the next run gets a view that covers it (the cache's key holds the sockets found)."""
    sock = short / "home" / ".ssh" / "cm-late"
    sock.parent.mkdir(mode=0o700)
    first = await attempt(short / "state", _connect(str(sock)), config=FULL, host="gateway")
    assert "refused" in first["_text"], first  # nothing there yet
    server = _master_like(sock)
    try:
        out = await attempt(short / "state", _connect(str(sock)), config=FULL, host="gateway")
    finally:
        server.close()
    assert SECRET not in out["_text"], out


async def test_a_socket_a_run_serves_in_its_writable_dir_reaches_the_next_run(short: Path) -> None:
    """Only the operator's sockets are covered: a run's own server (bound in a hostWritable dir, where
    runs write) is still there for the agent's next run."""
    work = short / "home" / "work"
    work.mkdir()
    sock = work / "app.sock"
    server = _Server(str(sock))  # stands for a server a previous run left listening there
    config = FULL + f'hostWritable = ["{work}"]\n'
    try:
        out = await attempt(short / "state", _connect(str(sock)), config=config, host="gateway")
    finally:
        server.close()
    assert SECRET in out["_text"], out
