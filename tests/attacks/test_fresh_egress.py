"""Fresh attacks on the sandbox egress proxy (attackD): each test states what must hold and fails while the
hole is open.

1. A sandbox can freeze the gateway's event loop: it hands the proxy a TCP socket it keeps a copy of, and
   after the proxy made the shared file description non-blocking, clears O_NONBLOCK again; the proxy's next
   `loop.sock_recv` is then a blocking recv(2) on the gateway's loop (every agent, every ask, every
   console) until the sandbox chooses to send or close.
2. A bare LF in a plain-http head is forwarded verbatim: a second request with another Host, behind a bare
   `\\n\\n`, reaches the allowed address (a lenient origin such as Python's http.server or nginx serves it).
3. A Content-Length or port spelled with a Latin-1 digit (`¹`) passes `str.isdigit()` and raises
   ValueError: the connection is dropped unanswered and unrecorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request

ALLOWED = "allowed.test"


class _KeepAlive(BaseHTTPRequestHandler):
    """An origin that keeps connections alive (as nginx does) and says which Host it served."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"served host={self.headers.get('Host')} path={self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _origin() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _proxy(records: list[Connection]) -> EgressProxy:
    async def decide(req: Request) -> Decision:
        ok = req.name == ALLOWED
        return Decision(
            ok, f"allow entry {ALLOWED!r}" if ok else "not allowed", resolve={ALLOWED: "127.0.0.1"}
        )

    return EgressProxy(decide, records.append)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """(the client end, the accepted end) of a loopback TCP connection: what the forwarder hands over."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        client = socket.create_connection(lst.getsockname())
        accepted, _ = lst.accept()
    return client, accepted


async def _through(proxy: EgressProxy, raw: bytes) -> bytes:
    client, accepted = _tcp_pair()
    try:
        client.sendall(raw)
        client.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(proxy.serve(accepted, "agentA", "sb"), 10)
        client.settimeout(5)
        out = b""
        while chunk := client.recv(65536):
            out += chunk
        return out
    finally:
        client.close()


async def test_a_sandbox_cannot_make_the_gateway_loop_block_on_its_socket(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    records: list[Connection] = []
    proxy = _proxy(records)
    directory = tmp_path / "egress"
    directory.mkdir(mode=0o700)
    await proxy.listen("sb", "agentA", directory)
    outcome: dict[str, object] = {}

    def sandbox() -> None:
        # What any program in the sandbox can do: the proxy socket is bind-mounted in and is its uid's.
        client, accepted = _tcp_pair()
        unix = socket.socket(socket.AF_UNIX)
        try:
            unix.connect(str(directory / "proxy.sock"))
            socket.send_fds(unix, [b"\0"], [accepted.fileno()])
            fd = accepted.fileno()  # our copy shares the file description the proxy now holds
            for _ in range(5000):
                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK:
                    break
                threading.Event().wait(0.001)
            else:
                outcome["armed"] = False
                return
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            client.sendall(b"GET ")  # a partial head: the proxy reads again
            outcome["armed"] = True
            # Is the gateway's loop still running? (A liveness bound, not a timing assertion.)
            probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
            try:
                probe.result(timeout=10)
                outcome["alive"] = True
            except TimeoutError:
                outcome["alive"] = False
        finally:
            client.close()  # releases the blocked recv, if any
            accepted.close()
            unix.close()

    try:
        await asyncio.to_thread(sandbox)
    finally:
        await proxy.close()
    assert outcome.get("armed") is True
    assert outcome.get("alive") is True, "a sandbox froze the gateway's event loop"


async def test_a_bare_lf_cannot_smuggle_a_request_for_another_host() -> None:
    records: list[Connection] = []
    proxy = _proxy(records)
    try:
        with _origin() as port:
            raw = (
                f"GET http://{ALLOWED}:{port}/ HTTP/1.1\r\nHost: {ALLOWED}:{port}\r\nX-A: 1\n\n"
                "GET /secret HTTP/1.1\nHost: other.test\nX-B: 2\r\n\r\n"
            ).encode()
            answer = await _through(proxy, raw)
    finally:
        await proxy.close()
    assert b"host=other.test" not in answer, answer.decode(errors="replace")


@pytest.mark.parametrize(
    "head",
    [
        "POST http://allowed.test/ HTTP/1.1\r\nContent-Length: \xb9\r\n\r\n",
        "GET http://allowed.test:\xb2/ HTTP/1.1\r\n\r\n",
    ],
)
async def test_a_latin1_digit_is_answered_400_and_recorded(head: str) -> None:
    records: list[Connection] = []
    proxy = _proxy(records)
    try:
        answer = await _through(proxy, head.encode("latin-1"))
    except ValueError as exc:
        pytest.fail(f"the proxy crashed on the head: {exc}")
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert records and records[-1].status == 400


async def test_a_denied_address_is_not_reached_through_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """`deny = ["1.1.1.1"]` in open mode: a name whose DNS answer is that address (any wildcard-DNS service
    spells every address as a name) must not be connected to. Nothing is sent: DNS is stubbed and only the
    decision and the resolved target are checked."""
    from engine.config.egress import EgressPolicy, decide
    from engine.sandbox.egress import addresses

    def fake_getaddrinfo(host: str, port: int) -> list[tuple[object, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("1.1.1.1", port))]

    monkeypatch.setattr(addresses, "system_lookup", fake_getaddrinfo)
    policy = EgressPolicy.from_config({"mode": "open", "deny": ["1.1.1.1"]})
    assert decide(policy, "1.1.1.1", 443).action == "deny"
    name = "1-1-1-1.sslip.example"
    if decide(policy, name, 443).action == "allow":
        with pytest.raises(addresses.Refused):
            await addresses.resolve(name, 443, {}, policy.deny)
