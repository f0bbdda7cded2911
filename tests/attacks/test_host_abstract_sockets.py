"""Issue 27 class 1: an abstract Unix socket has no path a mount could cover (an X server's
@/tmp/.X11-unix/X0, a session bus at unix:abstract=), so a gateway-host run is scoped by landlock (ABI >= 6,
exechost-hostenter) and reaches none made outside it. (From branch sock29; its path-socket half waits.)"""

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
from engine.sandbox import landlock
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap

pytestmark = needs_bwrap

FULL = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n'
SECRET = "OPERATOR-SOCKET-ANSWERED"
_CONNECT = (
    "python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
    'try:\n s.connect("\\0"+sys.argv[1]); print(s.recv(64).decode())\n'
    'except OSError as e: print("refused", e)\n\' '
)


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
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
    """The operator's socket: answers SECRET to whoever connects."""

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


async def test_an_operators_abstract_socket_is_not_a_host_runs(short: Path) -> None:
    if landlock.kernel_abi()[0] < 6:
        pytest.skip("the kernel's landlock has no abstract-socket scope (ABI < 6)")
    name = f"exechost-test-{os.getpid()}-{short.name}"
    server = _Server("\0" + name)
    try:
        out = await attempt(short / "state", _CONNECT + f"'{name}'", config=FULL, host="gateway")
    finally:
        server.close()
    assert out["status"] == "completed", out
    assert "refused" in out["_text"], out
    assert SECRET not in out["_text"], out


async def test_a_runs_own_abstract_socket_still_works_inside_it(short: Path) -> None:
    """The scope refuses only sockets made outside the run: a program and its own children still talk."""
    code = (
        "import socket,os\n"
        "s=socket.socket(socket.AF_UNIX); s.bind('\\0exechost-own-'+str(os.getpid())); s.listen(1)\n"
        "c=socket.socket(socket.AF_UNIX); c.connect(s.getsockname()); a,_=s.accept(); a.sendall(b'own-ok')\n"
        "print(c.recv(16).decode())\n"
    )
    quoted = "'" + code.replace("'", "'\\''") + "'"
    out = await attempt(short / "state", f"python3 -c {quoted}", config=FULL, host="gateway")
    assert out["status"] == "completed" and "own-ok" in out["_text"], out
