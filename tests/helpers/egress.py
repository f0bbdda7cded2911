"""Egress in tests: a real origin HTTP server on a loopback address, and the proxy reached through the real
forwarder binary run on the host (the sandbox tests run it inside real sandboxes)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from engine.sandbox.egress import forwarder


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    big = b""

    def do_GET(self) -> None:
        if self.path.startswith("/big"):
            body = self.big
        else:
            body = f"origin says hello to {self.headers.get('Host')} at {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Origin:
    host: str
    port: int
    server: ThreadingHTTPServer


@contextlib.contextmanager
def origin(host: str = "127.0.0.1", big: int = 0) -> Iterator[Origin]:
    """A threaded HTTP origin on a loopback address; `/big` answers `big` bytes."""
    handler = type("Handler", (_Handler,), {"big": b"x" * big})
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Origin(host, server.server_address[1], server)
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def host_forwarder(directory: Path) -> Iterator[int]:
    """The real forwarder binary on the host's loopback, handing connections to `<directory>/proxy.sock`."""
    binary = forwarder.ensure_binary()
    port = free_port()
    proc = subprocess.Popen([str(binary), str(port), str(directory / "proxy.sock")])
    try:
        for _ in range(500):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            threading.Event().wait(0.01)
        yield port
    finally:
        proc.kill()
        proc.wait()


async def curl(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "20", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()
