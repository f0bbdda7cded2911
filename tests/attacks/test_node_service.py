"""Attacks on the `node run` service's socket: another uid on either end, a planted path, a second service,
an event flood while no gateway is linked, and an answer meant for a dead link."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.nodes.wire import NodeEvent, Request, Response, decode, encode
from runner.node.links import Output
from runner.node.serve import NodeServer
from runner.node.service import NodeService, NodeServiceError
from tests.helpers.sshd import EXECHOST, REPO

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv lives under a home another uid cannot enter
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


def _env(state: Path) -> dict[str, str]:
    return {
        "OPENCLAW_STATE_DIR": str(state),
        "HOME": str(state.parent),
        "EXECHOST_HOST_HOME": str(state.parent),  # a node starts only with the home its views protect
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": REPO,
    }


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A dir another uid can write to (never the state dir)."""
    path = Path(tempfile.mkdtemp(prefix="eh-x-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start_service(state: Path) -> subprocess.Popen[bytes]:
    """`node run`, once it says it listens: that line is logged after the socket's mode is set (0600), so a
    test that loosens the mode afterwards is not undone by the service's own chmod (a connect succeeds
    before it, which once raced a test here)."""
    proc = subprocess.Popen([EXECHOST, "node", "run"], env=_env(state), stderr=subprocess.PIPE)
    assert proc.stderr is not None
    said = b""
    for line in proc.stderr:
        said += line
        if b"node service listening on" in line:
            return proc
    proc.kill()
    raise RuntimeError(f"node run did not listen: {said.decode(errors='replace')}")


@as_root
def test_another_uid_on_the_service_socket_gets_nothing(state_dir: Path) -> None:
    """Even with the modes loosened by mistake, a peer of another uid is dropped before any hello."""
    proc = _start_service(state_dir)
    try:
        state_dir.parent.chmod(0o711)
        state_dir.chmod(0o711)
        (state_dir / "node.sock").chmod(0o666)
        probe = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({str(state_dir / 'node.sock')!r})\n"
            "s.settimeout(10)\n"
            "sys.stdout.write(repr(s.recv(65536)))\n"
        )
        out = subprocess.run(
            [SYSTEM_PYTHON, "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            user=NOBODY,
            cwd="/",
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == "b''"  # connected (the modes allowed it) but closed without a word
    finally:
        state_dir.chmod(0o700)
        state_dir.parent.chmod(0o700)
        proc.terminate()
        proc.wait(timeout=30)


@as_root
def test_relay_refuses_a_socket_served_by_another_uid(state_dir: Path, shared_dir: Path) -> None:
    """Someone else's listener moved into place as node.sock: `serve --stdio` refuses it, sends nothing."""
    fake = shared_dir / "fake.sock"
    got = shared_dir / "got"
    server = (
        "import socket, json, os\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.bind({str(fake)!r}); s.listen(1)\n"
        f"open({str(shared_dir / 'ready')!r}, 'w').close()\n"
        "c, _ = s.accept()\n"
        # The relay may already have hung up (it refuses before reading): that is the point, not a crash.
        "try:\n    c.sendall(json.dumps({'type': 'hello', 'protocol': 1, 'nodeId': 'evil',"
        " 'displayName': 'evil', 'version': '0', 'platform': 'linux', 'caps': [], 'pathEnv': ''}).encode()"
        " + b'\\n')\n"
        "except OSError:\n    pass\n"
        "c.settimeout(5)\n"
        "data = b''\n"
        "try:\n    data = c.recv(65536)\nexcept OSError:\n    pass\n"
        f"open({str(got)!r}, 'wb').write(data)\n"
    )
    listener = subprocess.Popen([SYSTEM_PYTHON, "-c", server], user=NOBODY, cwd="/")
    try:
        deadline = time.monotonic() + 10
        while not (shared_dir / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.rename(fake, state_dir / "node.sock")
        req = encode(Request("1", "system.run", {"command": ["/bin/sh", "-lc", "true"]}))
        out = subprocess.run(
            [EXECHOST, "node", "serve", "--stdio"],
            input=req,
            env=_env(state_dir),
            capture_output=True,
            timeout=30,
        )
        assert out.returncode == 1
        assert b"runs as uid 65534" in out.stderr and b"evil" not in out.stdout
        listener.wait(timeout=10)
        assert got.read_bytes() == b""  # the request never reached the impostor
    finally:
        listener.kill()
        listener.wait()


def test_planted_paths_are_never_replaced(state_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    (state_dir / "node.sock").symlink_to(target)
    out = subprocess.run(
        [EXECHOST, "node", "run"], env=_env(state_dir), capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 1 and "invalid (symlink); refusing to replace it" in out.stderr
    assert target.read_text() == "keep" and (state_dir / "node.sock").is_symlink()
    # The relay does not follow it either: it serves in-process.
    req = encode(Request("1", "ping", {}))
    served = subprocess.run(
        [EXECHOST, "node", "serve", "--stdio"],
        input=req,
        env=_env(state_dir),
        capture_output=True,
        timeout=30,
    )
    assert json.loads(served.stdout.splitlines()[0])["mode"] == "stdio"


def test_a_second_service_is_refused(state_dir: Path) -> None:
    proc = _start_service(state_dir)
    try:
        out = subprocess.run(
            [EXECHOST, "node", "run"], env=_env(state_dir), capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 1 and "already running" in out.stderr
        assert proc.poll() is None  # the first one is untouched
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_events_while_unlinked_are_bounded_then_delivered_in_order(state_dir: Path) -> None:
    server = NodeServer(state_dir, service=True)
    try:
        for i in range(1500):
            await server.links.emit(NodeEvent("system.event", {"sessionKey": "k", "text": f"e{i}"}))
        assert server.links.outbox.dropped("") == 500
        node_end, gateway_end = socket.socketpair()
        srv_reader, srv_writer = await asyncio.open_connection(sock=node_end)
        reader, writer = await asyncio.open_connection(sock=gateway_end)
        serving = asyncio.ensure_future(server.serve(srv_reader, Output(srv_writer)))
        assert decode(await reader.readline()).__class__.__name__ == "Hello"
        # A link that proves no gateway key says whose it is with its first request; what waited goes out
        # then, before that request's answer (runner.node.serve: Output.resend_pending).
        writer.write(encode(Request("p", "ping", {})))
        texts = [json.loads(await reader.readline())["payload"]["text"] for _ in range(1000)]
        assert texts == [f"e{i}" for i in range(500, 1500)]  # the newest kept, oldest first
        assert isinstance(decode(await reader.readline()), Response)
        writer.close()
        await asyncio.wait_for(serving, 10)
        srv_writer.close()
    finally:
        await server.sessions.close()


async def test_an_answer_never_goes_to_a_newer_link(state_dir: Path) -> None:
    """A request asked on link A and answered after link B took over is dropped, not sent to B."""
    server = NodeServer(state_dir, service=True)
    try:
        old, new = _Capture(), _Capture()
        server.links.up.append(old)  # link A asked
        new.resend_pending = old.resend_pending = False
        server.links.up.append(new)  # link B of the same gateway said so: A is let go
        await server.links.resend_to(new)
        old.frames.clear()
        await server.handle(Request("7", "ping", {}), old)
        assert new.frames == []
        await server.handle(Request("8", "ping", {}), new)
        assert [f["id"] for f in new.frames] == ["8"]
    finally:
        await server.sessions.close()


class _Capture(Output):
    def __init__(self) -> None:
        super().__init__(None)
        self.frames: list[dict[str, object]] = []

    async def write(self, data: bytes) -> None:
        self.frames.append(json.loads(data))


def test_service_refuses_a_too_long_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir(mode=0o700)
    with pytest.raises(NodeServiceError, match="too long"):
        asyncio.run(NodeService(deep).start())
