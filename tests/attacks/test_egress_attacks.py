"""Attacks on the egress proxy: every trick a sandboxed program could use to reach a name or an address the
operator did not allow. Each goes through the real forwarder and the real proxy to a real loopback origin
(the proxy runs here as in the gateway; the sandbox tests show the same proxy from inside bwrap and Docker).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.config.egress import EgressPolicy, decide
from engine.config.loader import load_config_text
from engine.sandbox.egress import addresses
from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
from tests.helpers.egress import host_forwarder, origin


@dataclass
class Rig:
    port: int  # the forwarder's (the sandbox's 127.0.0.1:3128)
    origin: int
    records: list[Connection]
    directory: Path


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    records: list[Connection] = []
    with origin() as o:
        config = load_config_text(
            '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nask = false\n'
            f'allow = ["allowed.test:{o.port}", "*.wild.test:{o.port}", "localhost:{o.port}", '
            f'"denied.allowed.test:{o.port}", "allowed.test"]\n'
            'deny = ["denied.allowed.test:*"]\n'
            'resolve = { "allowed.test" = "127.0.0.1", "a.wild.test" = "127.0.0.1", '
            '"wild.test" = "127.0.0.1", "denied.allowed.test" = "127.0.0.1" }\n'
        )
        policy = EgressPolicy.from_config(config.sandbox.egress)

        async def decide_it(req: Request) -> Decision:
            verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
            allowed = verdict.action == "allow"
            return Decision(allowed, verdict.rule, "policy", dict(policy.resolve), policy.deny)

        proxy = EgressProxy(decide_it, records.append)
        directory = tmp_path / "eg"
        directory.mkdir(mode=0o700)
        await proxy.listen("sbx", "main", directory)
        try:
            with host_forwarder(directory) as port:
                yield Rig(port, o.port, records, directory)
        finally:
            await proxy.close()


async def _raw(rig: Rig, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return data


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else 0


def _get(target: str, host: str | None = None, extra: str = "") -> bytes:
    head = f"GET {target} HTTP/1.1\r\n"
    if host is not None:
        head += f"Host: {host}\r\n"
    return (head + extra + "\r\n").encode()


async def test_the_allowed_name_works_in_any_spelling(rig: Rig) -> None:
    for host in ("allowed.test", "ALLOWED.test", "allowed.test."):
        answer = await _raw(rig, _get(f"http://{host}:{rig.origin}/ok"))
        assert _status(answer) == 200 and b"at /ok" in answer, answer


async def test_ip_literals_in_every_spelling_are_refused(rig: Rig) -> None:
    o = rig.origin
    for target in (
        f"http://127.0.0.1:{o}/",
        f"http://[::1]:{o}/",
        f"http://[::ffff:127.0.0.1]:{o}/",
        f"http://0.0.0.0:{o}/",
        f"http://169.254.169.254:{o}/latest/meta-data/",
        f"http://100.64.0.1:{o}/",
        f"http://10.0.0.1:{o}/",
    ):
        answer = await _raw(rig, _get(target))
        assert _status(answer) == 403, (target, answer)
    for target in (
        f"http://2130706433:{o}/",
        f"http://0x7f000001:{o}/",
        f"http://127.1:{o}/",
        f"http://0177.0.0.1:{o}/",
    ):
        answer = await _raw(rig, _get(target))
        assert _status(answer) == 400, (target, answer)
    assert all(r.decision == "refused" and r.bytesDown == 0 for r in rig.records)


async def test_userinfo_fragment_and_host_header_tricks(rig: Rig) -> None:
    o = rig.origin
    assert _status(await _raw(rig, _get(f"http://allowed.test:{o}@evil.test:{o}/"))) == 400
    assert _status(await _raw(rig, _get(f"http://allowed.test@evil.test:{o}/"))) == 400
    # The fragment never moves the authority: this asks for evil.test, which is not allowed.
    assert _status(await _raw(rig, _get(f"http://evil.test:{o}#@allowed.test:{o}/"))) == 403
    assert _status(await _raw(rig, _get(f"http://evil.test:{o}\\@allowed.test:{o}/"))) in (400, 403)
    # A Host header naming another host than the URL (domain fronting through an allowed address).
    answer = await _raw(rig, _get(f"http://allowed.test:{o}/", host=f"evil.test:{o}"))
    assert _status(answer) == 400 and b"Host header" in answer
    # Origin-form (a direct request, Host only) and https:// absolute-form are not proxy requests.
    assert _status(await _raw(rig, _get("/", host=f"allowed.test:{o}"))) == 400
    assert _status(await _raw(rig, _get(f"https://allowed.test:{o}/"))) == 400
    # What reached the origin named the allowed host only.
    assert {r.name for r in rig.records if r.decision == "allowed"} <= {"allowed.test"}


async def test_connect_to_a_port_the_entry_does_not_name(rig: Rig) -> None:
    # `allowed.test` alone admits 80 and 443; `allowed.test:<origin>` that port. Nothing else.
    for port in (22, 25, 6379, rig.origin + 1 if rig.origin < 65535 else 1):
        answer = await _raw(rig, f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
        assert _status(answer) == 403, (port, answer)
    assert _status(await _raw(rig, b"CONNECT allowed.test HTTP/1.1\r\n\r\n")) == 400  # no port at all
    answer = await _raw(
        rig,
        f"CONNECT allowed.test:{rig.origin} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
    )
    assert _status(answer) == 200 and b"origin says" in answer


async def test_wildcards_deny_and_lookalike_names(rig: Rig) -> None:
    o = rig.origin
    assert _status(await _raw(rig, _get(f"http://a.wild.test:{o}/"))) == 200
    assert _status(await _raw(rig, _get(f"http://wild.test:{o}/"))) == 403  # `*.` is subdomains only
    assert _status(await _raw(rig, _get(f"http://evilwild.test:{o}/"))) == 403
    assert _status(await _raw(rig, _get(f"http://denied.allowed.test:{o}/"))) == 403  # deny wins
    # A Cyrillic "а" is another name (its IDNA form), never allowed.test.
    assert _status(await _raw(rig, _get(f"http://\u0430llowed.test:{o}/".encode().decode("latin-1")))) in (
        400,
        403,
    )
    # (this A-label spells `Ωllowed`, an upper-case letter IDNA 2008 never encodes: no name at all, 400)
    assert _status(await _raw(rig, _get(f"http://xn--llowed-2ve.test:{o}/"))) in (400, 403)
    assert _status(await _raw(rig, _get(f"http://xn--llowed-2nf.test:{o}/"))) == 403  # Cyrillic `аllowed`


async def test_a_name_dns_resolves_to_loopback_is_refused_even_when_allowed(rig: Rig) -> None:
    answer = await _raw(rig, _get(f"http://localhost:{rig.origin}/"))
    assert _status(answer) == 403 and b"non-public address" in answer
    # The sandbox is told no address it did not name itself (the operator's record has it).
    assert b"127.0.0.1" not in answer and b"::1" not in answer
    (record,) = [r for r in rig.records if r.name == "localhost"]
    assert record.address is None and "127.0.0.1" in str(record.detail) and "127.0.0.1" not in record.rule


async def test_rebinding_a_name_with_any_private_answer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS that answers a public and a private address (or changes its mind): refused before any connect,
    and the connection would use exactly the address checked (`Target`), never a second lookup."""
    calls = []

    def fake(host: str, port: int) -> list[tuple[object, ...]]:
        calls.append(host)
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(addresses, "system_lookup", fake)
    with pytest.raises(addresses.Refused, match="non-public") as refused:
        await addresses.resolve("rebind.test", 80, {})
    assert "127.0.0.1" not in str(refused.value) and "127.0.0.1" in refused.value.detail
    assert calls == ["rebind.test"]

    def public_only(host: str, port: int) -> list[tuple[object, ...]]:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:10.1.2.3", port, 0, 0))]

    monkeypatch.setattr(addresses, "system_lookup", public_only)
    with pytest.raises(addresses.Refused):
        await addresses.resolve("mapped.test", 80, {})


async def test_the_socket_takes_nothing_but_a_handed_over_tcp_socket(rig: Rig) -> None:
    """A program in the sandbox can reach the proxy's socket itself: raw HTTP, other descriptors, floods
    of descriptors are dropped, and the proxy keeps serving."""
    path = str(rig.directory / "proxy.sock")
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(f"GET http://allowed.test:{rig.origin}/ HTTP/1.1\r\n\r\n".encode())
    assert await _closed(s)
    r, w = os.pipe()
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socket.send_fds(s, [b"\0"], [r, w])  # two descriptors, and not sockets
    assert await _closed(s)
    os.close(r)
    os.close(w)
    a, b = socket.socketpair()
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socket.send_fds(s, [b"\0"], [a.fileno()])  # a Unix socket, not a TCP one
    s.close()
    a.close()
    assert await _closed(b)
    answer = await _raw(rig, _get(f"http://allowed.test:{rig.origin}/still"))
    assert _status(answer) == 200


async def _closed(sock: socket.socket) -> bool:
    """The proxy hung up without a word (an unread request may make that a reset)."""
    sock.settimeout(20)
    try:
        data = await asyncio.to_thread(sock.recv, 100)
    except ConnectionResetError:
        data = b""
    sock.close()
    return data == b""


async def test_an_oversized_head_is_cut_off(rig: Rig) -> None:
    big = _get(f"http://allowed.test:{rig.origin}/", extra="X-Pad: " + "a" * 100_000 + "\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
    writer.write(big)
    with pytest.raises(ConnectionError):
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 20)
        if not data:
            raise ConnectionResetError
    writer.close()


async def test_a_flood_of_silent_connections_cannot_exhaust_the_gateway(rig: Rig) -> None:
    """Connections past the per-sandbox cap are closed unread: a sandbox cannot make the proxy's process
    hold descriptors (or relay threads) without bound; once the flood ends, requests are served again."""
    from engine.sandbox.egress import proxy as proxy_mod

    path = str(rig.directory / "proxy.sock")
    before = len(os.listdir("/proc/self/fd"))
    flood = []
    for _ in range(proxy_mod.MAX_PER_SANDBOX + 50):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        flood.append(s)
    closed = 0
    for s in flood[-40:]:  # the last ones came after the cap: closed at once, unread
        s.settimeout(20)
        try:
            closed += await asyncio.to_thread(s.recv, 1) == b""
        except ConnectionResetError:
            closed += 1
    assert closed == 40
    held = len(os.listdir("/proc/self/fd")) - before - len(flood)
    assert held <= proxy_mod.MAX_PER_SANDBOX + 8  # one per accepted connection, at most
    for s in flood:
        s.close()

    async def served() -> bool:
        return _status(await _raw(rig, _get(f"http://allowed.test:{rig.origin}/after"))) == 200

    from tests.helpers.gateway import wait_until

    await wait_until(served, timeout=30, interval=0.1)


async def test_socks5_is_decided_like_http(rig: Rig) -> None:
    """SOCKS5 on the same port: names are decided and resolved by the proxy like HTTP ones; IP literals,
    unknown names, other commands and authentication-only clients are refused with SOCKS reply codes."""
    from tests.helpers.egress import curl

    via = f"socks5h://127.0.0.1:{rig.port}"
    code, out, err = await curl("-x", via, f"http://allowed.test:{rig.origin}/socks")
    assert code == 0 and "at /socks" in out, err
    code, _, err = await curl("-x", via, f"http://evil.test:{rig.origin}/")
    assert code == 97 and "(2)" in err, err  # reply 2: connection not allowed by ruleset
    code, _, _ = await curl("-x", f"socks5://127.0.0.1:{rig.port}", f"http://localhost:{rig.origin}/")
    assert code != 0  # curl resolved it to 127.0.0.1 itself: an IP literal, refused

    def connect_request(cmd: int, host: bytes, port: int) -> bytes:
        return b"\x05\x01\x00" + bytes([5, cmd, 0, 3, len(host)]) + host + port.to_bytes(2, "big")

    answer = await _raw(rig, connect_request(2, b"allowed.test", rig.origin))  # BIND
    assert answer[:2] == b"\x05\x00" and answer[2:4] == b"\x05\x07", answer
    answer = await _raw(rig, b"\x05\x01\x02")  # username/password only
    assert answer == b"\x05\xff", answer
    answer = await _raw(rig, connect_request(1, b"allowed.test", 22))  # a port the entry does not name
    assert answer[2:4] == b"\x05\x02", answer
    answer = await _raw(rig, b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01" + rig.origin.to_bytes(2, "big"))
    assert answer[2:4] == b"\x05\x02", answer  # 127.0.0.1 as an IPv4 address
    methods = {(r.name, r.method, r.decision) for r in rig.records}
    assert ("allowed.test", "SOCKS5", "allowed") in methods and ("evil.test", "SOCKS5", "refused") in methods


async def test_a_pipelined_second_request_never_goes_upstream(tmp_path: Path) -> None:
    """Plain HTTP: a request's body is its Content-Length; a second request pipelined behind it (naming
    another Host, to be fronted through the allowed address) is never sent upstream; chunked bodies, whose
    end only parsing finds, are refused (400)."""
    import threading

    received: list[bytes] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    origin_port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                size = int(next((v for k, v in _headers(head) if k == "content-length"), "0"))
                while len(body) < size:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                conn.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    body += conn.recv(65536)  # whatever else arrived with it
                received.append(head + b"\r\n\r\n" + body)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    policy = EgressPolicy.from_config(
        {
            "mode": "allowlist",
            "allow": [f"allowed.test:{origin_port}"],
            "resolve": {"allowed.test": "127.0.0.1"},
        }
    )

    async def decide_it(req: Request) -> Decision:
        verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
        return Decision(verdict.action == "allow", verdict.rule, "policy", dict(policy.resolve), policy.deny)

    proxy = EgressProxy(decide_it, lambda _c: None)
    directory = tmp_path / "eg"
    directory.mkdir(mode=0o700)
    await proxy.listen("sbx", "main", directory)
    try:
        with host_forwarder(directory) as port:
            rig = Rig(port, origin_port, [], directory)
            smuggled = b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
            first = f"POST http://allowed.test:{origin_port}/up HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
            answer = await _raw(rig, first.encode() + smuggled)
            assert _status(answer) == 200, answer
            first = f"GET http://allowed.test:{origin_port}/get HTTP/1.1\r\n\r\n"
            assert _status(await _raw(rig, first.encode() + smuggled)) == 200
            chunked = (
                f"POST http://allowed.test:{origin_port}/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n0\r\n\r\n"
            )
            assert _status(await _raw(rig, chunked.encode())) == 400
            twice = (
                f"POST http://allowed.test:{origin_port}/c HTTP/1.1\r\n"
                "Content-Length: 1\r\nContent-Length: 9\r\n\r\nx"
            )
            assert _status(await _raw(rig, twice.encode())) == 400
    finally:
        await proxy.close()
        server.close()
    assert len(received) == 2
    assert received[0].endswith(b"\r\n\r\nhello") and b"evil" not in received[0]
    assert received[1].startswith(b"GET /get HTTP/1.1") and b"evil" not in received[1]


def _headers(head: bytes) -> list[tuple[str, str]]:
    out = []
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        out.append((key.strip().lower(), value.strip()))
    return out
