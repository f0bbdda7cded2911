"""node.sock speaks only to a peer in the service's own namespaces (runner.node.peerns): a process of the
same uid in a view of its own (a gateway's host run on a machine that is also a node, fresh round 10 a)
gets nothing there, and a link's relay does not take a service listening from inside a view."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.node.relay import relay_to_service
from runner.node.service import NodeService

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap")


def _in_view(code: str, *args: str) -> list[str]:
    """python3 -c `code` in a mount and PID namespace of its own, as a host view is."""
    assert BWRAP is not None
    return [
        BWRAP,
        "--dev-bind",
        "/",
        "/",
        "--unshare-pid",
        "--proc",
        "/proc",
        sys.executable,
        "-c",
        code,
        *args,
    ]


_PROBE = """import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(30)
print(repr(s.recv(65536)))
"""


@needs_bwrap
async def test_a_peer_in_a_view_of_its_own_gets_nothing_and_ours_gets_the_hello(state_dir: Path) -> None:
    service = NodeService(state_dir)
    await service.start()
    try:
        sock = str(state_dir / "node.sock")
        viewed = await asyncio.to_thread(
            subprocess.run, _in_view(_PROBE, sock), capture_output=True, text=True, timeout=60
        )
        ours = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", _PROBE, sock], capture_output=True, text=True, timeout=60
        )
    finally:
        await service.stop()
    assert viewed.returncode == 0 and viewed.stdout.strip() == "b''", viewed  # closed before any hello
    assert '"hello"' in ours.stdout, ours


_FAKE = """import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b'{"type":"hello","fake":true}\\n')
"""


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data


@needs_bwrap
async def test_the_relay_does_not_take_a_service_listening_from_a_view(state_dir: Path) -> None:
    sock = state_dir / "node.sock"
    fake = subprocess.Popen(_in_view(_FAKE, str(sock)))
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and fake.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # waiting for the event (the socket bound), bounded
        assert sock.exists(), "the fake service did not listen"
        stdin = asyncio.StreamReader()
        stdin.feed_eof()
        sink = _Sink()
        assert await relay_to_service(state_dir, stdin, sink) == 1
        assert sink.data == b""
    finally:
        fake.kill()
        fake.wait()
