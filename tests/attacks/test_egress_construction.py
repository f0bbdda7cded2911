"""Egress proxy holes found by reading it after attackD's tests (tests/attacks/test_fresh_egress.py), each
closed by construction and kept here as an attack that must keep failing:

- the sandbox owns the O_NONBLOCK flag (and SO_LINGER) of the socket it hands over: flipping it must
  neither freeze the gateway's loop (any protocol, any read, the close) nor cut a relay short;
- a request head is accepted by what it may hold (CRLF lines, tokens, printable ASCII targets, ASCII
  digits), and every refusal — bad, late, too many — is answered and recorded;
- `deny` holds for addresses as well as names, whatever spelling DNS answers in;
- "public" is an allowlist: every special-purpose block, every IPv6 spelling of an IPv4 address, and the
  host's own addresses are refused;
- refusals tell the sandbox no address it did not name itself;
- a per-agent cap on proxy connections (`maxConnections`), refused with a clear 429 and a record, and the
  shared sandbox's connections recorded as the principal "shared";
- a port-less entry admits plain http to 80 and tunnels to 443, never `CONNECT name:80`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.config.egress import EgressPolicy, Pattern, decide
from engine.config.loader import ConfigError, load_config_text
from engine.sandbox.egress import addresses
from engine.sandbox.egress import proxy as proxy_mod
from engine.sandbox.egress.proxy import SHARED, Connection, Decision, EgressProxy, Request
from tests.helpers.egress import origin

ALLOWED = "allowed.test"
SIOCOUTQ = 0x5411  # bytes a Unix socket's peer has not read yet


def _rig(
    records: list[Connection],
    config: dict[str, object] | None = None,
    cap: Callable[[str], int] | None = None,
) -> EgressProxy:
    """A proxy deciding by a real policy (allowed.test on any port, mapped to 127.0.0.1, unless `config`)."""
    policy = EgressPolicy.from_config(
        config
        or {"mode": "allowlist", "ask": False, "allow": [f"{ALLOWED}:*"], "resolve": {ALLOWED: "127.0.0.1"}}
    )

    async def decide_it(req: Request) -> Decision:
        verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
        return Decision(verdict.action == "allow", verdict.rule, "policy", dict(policy.resolve), policy.deny)

    return EgressProxy(decide_it, records.append, cap)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """(the sandbox's client end, the accepted end the forwarder hands over)."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        client = socket.create_connection(lst.getsockname())
        accepted, _ = lst.accept()
    return client, accepted


def _read_all(sock: socket.socket, timeout: float = 20) -> bytes:
    sock.settimeout(timeout)
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 20):
            out += chunk
    return out


def _read_head(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = sock.recv(1)
        if not chunk:
            break
        out += chunk
    return out


def _set_nonblocking(fd: int, on: bool) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK if on else flags & ~os.O_NONBLOCK)


# -- the sandbox owns the flags ---------------------------------------------------------------------


@pytest.mark.parametrize("partial", [b"\x05", b"\x05\x01\x00\x05", b"GET http://allowed.test/ HTTP/1.1\r\n"])
async def test_clearing_o_nonblock_mid_handshake_never_blocks_the_loop(partial: bytes) -> None:
    """attackD's freeze, on the SOCKS5 greeting and request and a plain head: the sandbox clears O_NONBLOCK
    on its copy once the proxy set it, then sends part of what the proxy reads next."""
    loop = asyncio.get_running_loop()
    records: list[Connection] = []
    proxy = _rig(records)
    client, accepted = _tcp_pair()
    mine = accepted.dup()  # the sandbox's copy: the same open file description
    serving = loop.create_task(proxy.serve(accepted, "agentA", "sb"))
    outcome: dict[str, bool] = {}

    def sandbox() -> None:
        for _ in range(5000):
            if fcntl.fcntl(mine.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK:
                break
            threading.Event().wait(0.001)
        _set_nonblocking(mine.fileno(), False)
        client.sendall(partial)
        probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
        try:
            probe.result(timeout=10)  # a liveness bound, not a timing assertion
            outcome["alive"] = True
        except TimeoutError:
            outcome["alive"] = False
        client.close()

    try:
        await asyncio.to_thread(sandbox)
        await asyncio.wait_for(serving, 20)
    finally:
        mine.close()
        await proxy.close()
    assert outcome == {"alive": True}, "a sandbox froze the gateway's event loop"


async def test_setting_o_nonblock_during_a_relay_does_not_cut_it_short() -> None:
    """The relay's threads wait in poll(2) when the sandbox makes its socket non-blocking: a 32 MiB
    download through CONNECT arrives whole (EAGAIN was taken for an end before)."""
    records: list[Connection] = []
    proxy = _rig(records)
    size = 32 << 20
    with origin(big=size) as o:
        client, accepted = _tcp_pair()
        mine = accepted.dup()
        serving = asyncio.get_running_loop().create_task(proxy.serve(accepted, "agentA", "sb"))

        def sandbox() -> bytes:
            client.sendall(f"CONNECT {ALLOWED}:{o.port} HTTP/1.1\r\n\r\n".encode())
            assert _read_head(client).startswith(b"HTTP/1.1 200")
            for _ in range(5000):  # the relay has begun once the proxy made the socket blocking again
                if not fcntl.fcntl(mine.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK:
                    break
                threading.Event().wait(0.001)
            _set_nonblocking(mine.fileno(), True)
            client.sendall(f"GET /big HTTP/1.1\r\nHost: {ALLOWED}\r\n\r\n".encode())
            try:
                return _read_all(client)
            finally:
                client.close()  # (the upload direction ends when the sandbox closes)

        try:
            answer = await asyncio.to_thread(sandbox)
            await asyncio.wait_for(serving, 30)
        finally:
            client.close()
            mine.close()
            await proxy.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and len(body) == size, (head, len(body))
    assert records[-1].decision == "allowed" and records[-1].bytesDown >= size


async def test_a_lingering_close_never_blocks_the_loop() -> None:
    """SO_LINGER is the sandbox's to set on the socket it shares, too: with a long linger, its own copy
    closed and the proxy's last bytes unread, a close(2) waits for their acknowledgement. The proxy closes
    the sandbox's socket off the loop."""
    loop = asyncio.get_running_loop()
    records: list[Connection] = []
    proxy = _rig(records)
    outcome: dict[str, bool] = {}
    with origin(big=64 << 10) as o:
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window it never drains
        client.connect(lst.getsockname())
        accepted, _ = lst.accept()
        lst.close()
        mine = accepted.dup()
        serving = loop.create_task(proxy.serve(accepted, "agentA", "sb"))

        def sandbox() -> None:
            client.sendall(f"CONNECT {ALLOWED}:{o.port} HTTP/1.1\r\n\r\n".encode())
            assert _read_head(client).startswith(b"HTTP/1.1 200")
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 60))
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)  # the answer fits, unsent
            mine.close()
            client.sendall(f"GET /big HTTP/1.1\r\nHost: {ALLOWED}\r\n\r\n".encode())
            client.shutdown(socket.SHUT_WR)  # the relay ends: the download sits in the proxy's buffer
            while not records:  # the proxy is done with the connection (then it closes the socket)
                threading.Event().wait(0.01)
            probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
            try:
                probe.result(timeout=10)  # a liveness bound, not a timing assertion
                outcome["alive"] = True
            except TimeoutError:
                outcome["alive"] = False
            client.close()  # (a reset: the lingering close, wherever it waits, ends)

        try:
            await asyncio.to_thread(sandbox)
            await asyncio.wait_for(serving, 30)
        finally:
            client.close()
            await proxy.close()
    assert outcome == {"alive": True}, "a lingering close froze the gateway's event loop"


def _lingering_socket() -> tuple[socket.socket, socket.socket]:
    """(a TCP socket whose close(2) would wait up to 60 s: SO_LINGER on, bytes unsent to a peer that reads
    nothing; that peer)."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        peer = socket.socket()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        peer.connect(lst.getsockname())
        sender, _ = lst.accept()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            sender.send(b"x" * 65536)
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 60))
    return sender, peer


@pytest.mark.parametrize("how", ["second descriptor", "wrong byte", "second message", "over the cap"])
async def test_a_lingering_descriptor_in_flight_never_blocks_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Descriptors the proxy never takes up are closed by the kernel in whichever thread releases them (a
    second one in the message, truncated; all of a message left unread on a socket the proxy closes): a
    lingering one would wait there. The proxy releases sandbox descriptors only in worker threads."""
    loop = asyncio.get_running_loop()
    records: list[Connection] = []
    proxy = _rig(records)
    if how == "over the cap":
        monkeypatch.setattr(proxy_mod, "MAX_PER_SANDBOX", 0)
    directory = tmp_path / "eg"
    directory.mkdir(mode=0o700)
    await proxy.listen("sb", "agentA", directory)
    lingering, peer = _lingering_socket()
    client, accepted = _tcp_pair()
    outcome: dict[str, bool] = {}

    # Sent from the loop's own thread, so that the proxy handles none of it before all of it is sent.
    unix = socket.socket(socket.AF_UNIX)
    unix.connect(str(directory / "proxy.sock"))
    if how == "second descriptor":
        socket.send_fds(unix, [b"\0"], [accepted.fileno(), lingering.fileno()])
    elif how == "second message":
        socket.send_fds(unix, [b"\0"], [accepted.fileno()])
        socket.send_fds(unix, [b"\0"], [lingering.fileno()])  # (a message the proxy never reads)
    elif how == "wrong byte":
        socket.send_fds(unix, [b"\1"], [lingering.fileno()])
    else:
        socket.send_fds(unix, [b"\0"], [lingering.fileno()])
    lingering.close()  # the proxy's copy is the last
    accepted.close()

    def sandbox() -> None:
        if how == "second descriptor":  # released as the proxy receives: once nothing is left unread
            for _ in range(20000):
                if not struct.unpack("i", fcntl.ioctl(unix, SIOCOUTQ, b"\0" * 4))[0]:
                    break
                threading.Event().wait(0.001)
        else:  # released as the proxy closes the Unix socket
            unix.settimeout(20)
            with contextlib.suppress(OSError):
                while unix.recv(1):
                    pass
        probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
        try:
            probe.result(timeout=10)  # a liveness bound, not a timing assertion
            outcome["alive"] = True
        except TimeoutError:
            outcome["alive"] = False
        unix.close()
        peer.close()  # (a reset ends the lingering close, wherever it waits)
        client.close()

    try:
        await asyncio.to_thread(sandbox)
    finally:
        await proxy.close()
    assert outcome == {"alive": True}, f"a lingering descriptor ({how}) froze the gateway's event loop"


# -- heads: what they may hold; every refusal answered and recorded -------------------------------------


async def _answer(proxy: EgressProxy, raw: bytes, shut: bool = False) -> bytes:
    """What the proxy answers to `raw` (the sandbox keeps its side open unless `shut`)."""
    client, accepted = _tcp_pair()
    serving = asyncio.get_running_loop().create_task(proxy.serve(accepted, "agentA", "sb"))
    try:
        client.sendall(raw)
        if shut:
            client.shutdown(socket.SHUT_WR)
        answer = await asyncio.to_thread(_read_all, client)
        await asyncio.wait_for(serving, 20)
        return answer
    finally:
        client.close()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        # No CRLF CRLF at all: refused when the bare LF arrives, not after the head timeout.
        (b"GET http://allowed.test/ HTTP/1.1\nHost: other.test\n\n", b"bare LF"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: 1\rHost: other.test\r\n\r\n", b"bare LF or CR"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\x0bb\r\n\r\n", b"control character"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX-A: a\x85b\r\n\r\n", b"control character"),
        (b"GET http://allowed.test/\xe9 HTTP/1.1\r\n\r\n", b"not printable ASCII"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX A: 1\r\n\r\n", b"malformed header"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:\xb9\r\n\r\n", b"Host header"),
        (b"CONNECT allowed.test:\xb94\xb3 HTTP/1.1\r\n\r\n", b"not printable ASCII"),
        (b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 1\xb2\r\n\r\n", b"Content-Length"),
        (b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", b"Content"),
        (b"G\xc9T http://allowed.test/ HTTP/1.1\r\n\r\n", b"invalid method"),
        (b"GET http://allowed.test/ HTTP/2.0\r\n\r\n", b"malformed request line"),
    ],
)
async def test_a_head_is_refused_400_answered_and_recorded(raw: bytes, why: bytes) -> None:
    records: list[Connection] = []
    proxy = _rig(records)
    try:
        answer = await _answer(proxy, raw)
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 400") and why in answer, answer
    assert len(records) == 1 and records[0].status == 400 and records[0].decision == "refused"


@pytest.mark.parametrize("port", ["\xb9", "\xb2\xb3", "\u0663", "+80", "08080808", ""])
def test_a_port_is_ascii_digits_only(port: str) -> None:
    from engine.sandbox.egress.httphead import BadRequest, split_authority

    with pytest.raises(BadRequest):
        split_authority(f"{ALLOWED}:{port}", None)


async def test_an_oversized_head_is_answered_and_recorded() -> None:
    records: list[Connection] = []
    proxy = _rig(records)
    try:
        raw = b"GET http://allowed.test/ HTTP/1.1\r\nX-Pad: " + b"a" * 100_000
        with contextlib.suppress(ConnectionError):
            answer = await _answer(proxy, raw)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer  # (a reset may eat it)
    finally:
        await proxy.close()
    assert records and records[0].status == 400 and "larger than" in records[0].rule


async def test_a_head_that_never_ends_is_answered_408_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_mod, "HEAD_TIMEOUT_SEC", 0.2)
    records: list[Connection] = []
    proxy = _rig(records)
    try:
        answer = await _answer(proxy, b"GET http://allowed.test/ HTTP/1.1\r\nX-Slow: 1\r\n")
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert records and records[0].status == 408


async def test_a_client_that_goes_away_mid_head_is_recorded() -> None:
    records: list[Connection] = []
    proxy = _rig(records)
    try:
        answer = await _answer(proxy, b"GET http://allowed.test/ HTTP/1.1\r\n", shut=True)
    finally:
        await proxy.close()
    assert answer == b""
    assert records and "went away" in records[0].rule and records[0].decision == "refused"


# -- deny holds for addresses ---------------------------------------------------------------------------


def _dns(monkeypatch: pytest.MonkeyPatch, *answers: str) -> list[str]:
    asked: list[str] = []

    def fake(host: str, port: int) -> list[tuple[object, ...]]:
        asked.append(host)
        out: list[tuple[object, ...]] = []
        for a in answers:
            ip = ipaddress.ip_address(a)
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            out.append((family, socket.SOCK_STREAM, 6, "", (a, port, 0, 0) if ip.version == 6 else (a, port)))
        return out

    monkeypatch.setattr(addresses, "system_lookup", fake)
    return asked


@pytest.mark.parametrize("answer", ["1.1.1.1", "::ffff:1.1.1.1", "64:ff9b::101:101", "::ffff:0:101:101"])
async def test_a_denied_address_is_refused_through_any_name_and_spelling(
    monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    """Open mode, `deny = ["1.1.1.1"]`: a name whose DNS answer is that address, in any IPv6 spelling of
    it, is refused before any connect; the sandbox is not told the address, the record is."""
    asked = _dns(monkeypatch, "9.9.9.9", answer)
    records: list[Connection] = []
    proxy = _rig(records, {"mode": "open", "deny": ["1.1.1.1"]})
    try:
        reply = await _answer(proxy, b"CONNECT one.example:443 HTTP/1.1\r\n\r\n")
    finally:
        await proxy.close()
    assert reply.startswith(b"HTTP/1.1 403") and b"denied" in reply, reply
    assert b"1.1.1.1" not in reply and answer.encode() not in reply
    (rec,) = records
    assert rec.address is None and "deny entry '1.1.1.1'" in str(rec.detail) and asked == ["one.example"]


async def test_a_resolve_entry_does_not_undo_a_deny_entry() -> None:
    with pytest.raises(addresses.Refused, match="denied"):
        await addresses.resolve("mirror.test", 443, {"mirror.test": "10.0.0.5"}, _deny("10.0.0.5"))


def _deny(*entries: str) -> tuple[Pattern, ...]:
    return EgressPolicy.from_config({"mode": "open", "deny": list(entries)}).deny


# -- "public" is an allowlist ---------------------------------------------------------------------------

NOT_PUBLIC = [
    "127.0.0.1",
    "10.1.2.3",
    "100.64.0.1",
    "169.254.169.254",
    "192.0.0.8",
    "192.0.0.9",
    "192.0.2.1",
    "192.88.99.1",
    "198.18.0.1",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "0.0.0.0",
    "::",
    "::1",
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::ffff:7f00:1",  # IPv4-mapped
    "::ffff:0:7f00:1",  # IPv4-translated
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::808:808",  # local-use NAT64
    "fec0::1",  # site-local
    "fc00::1",
    "fe80::1",
    "ff02::1",
    "100::1",
    "2001:db8::1",
    "2001::1",  # Teredo
    "2002:808:808::1",  # 6to4
    "3fff::1",
    "5f00::1",
    "4000::1",  # outside 2000::/3 (unassigned)
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("text", NOT_PUBLIC)
def test_special_purpose_addresses_are_not_public(text: str) -> None:
    assert not addresses.public(ipaddress.ip_address(text))


@pytest.mark.parametrize("text", PUBLIC)
def test_global_unicast_is_public(text: str) -> None:
    assert addresses.public(ipaddress.ip_address(text))


async def test_the_hosts_own_addresses_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's interface addresses are refused even when global (a VM's public IP reaches the
    gateway's own services); they are read afresh each time, so a new one counts at once."""
    own = addresses.own_addresses()
    assert ipaddress.ip_address("127.0.0.1") in own  # (read from /proc/net, not assumed)
    mine: set[addresses.IPAddress] = set()
    monkeypatch.setattr(addresses, "own_addresses", lambda: set(mine))
    _dns(monkeypatch, "8.8.4.4")
    assert (await addresses.resolve("host.example", 443, {})).address == "8.8.4.4"
    mine.add(ipaddress.ip_address("8.8.4.4"))
    with pytest.raises(addresses.Refused, match="non-public") as refused:
        await addresses.resolve("host.example", 443, {})
    assert "8.8.4.4" not in str(refused.value) and "8.8.4.4" in refused.value.detail
    with pytest.raises(addresses.Refused):
        await addresses.resolve("8.8.4.4", 443, {})


async def test_a_mapped_answer_is_connected_to_as_the_ipv4_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    _dns(monkeypatch, "::ffff:8.8.8.8")
    target = await addresses.resolve("mapped.example", 443, {})
    assert (target.family, target.address) == (socket.AF_INET, "8.8.8.8")


async def test_a_connect_failure_names_no_address() -> None:
    """A `resolve` entry may map a name to a private address: a failed connect tells the sandbox the name."""
    records: list[Connection] = []
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = _rig(records)
    try:
        reply = await _answer(proxy, f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert reply.startswith(b"HTTP/1.1 502") and ALLOWED.encode() in reply and b"127.0.0.1" not in reply
    assert records[0].error is not None and "127.0.0.1" in records[0].error


# -- a cap per agent; the shared sandbox -------------------------------------------------------------


async def test_an_agent_past_its_connection_cap_gets_a_clear_429() -> None:
    """`maxConnections = 1`: a second connection from any of the agent's sandboxes, while one is open, is
    answered 429 naming the key, and recorded; another agent is not affected; once the first ends, the
    next goes through."""
    records: list[Connection] = []
    proxy = _rig(records, cap=lambda agent: 1)
    loop = asyncio.get_running_loop()
    with origin() as o:
        hold, accepted = _tcp_pair()
        first = loop.create_task(proxy.serve(accepted, "agentA", "sb1"))
        try:
            hold.sendall(f"CONNECT {ALLOWED}:{o.port} HTTP/1.1\r\n\r\n".encode())
            assert (await asyncio.to_thread(_read_head, hold)).startswith(b"HTTP/1.1 200")
            get = f"GET http://{ALLOWED}:{o.port}/x HTTP/1.1\r\n\r\n".encode()
            client, accepted2 = _tcp_pair()
            client.sendall(get)
            await proxy.serve(accepted2, "agentA", "sb2")  # another sandbox of the same agent
            busy = await asyncio.to_thread(_read_all, client)
            client.close()
            assert busy.startswith(b"HTTP/1.1 429") and b"maxConnections" in busy, busy
            assert records[-1].status == 429 and records[-1].decision == "refused"
            other, accepted3 = _tcp_pair()
            other.sendall(get)
            await proxy.serve(accepted3, "agentB", "sb3")
            assert (await asyncio.to_thread(_read_all, other)).startswith(b"HTTP/1.1 200")
            other.close()
        finally:
            hold.close()
            await asyncio.wait_for(first, 20)
        assert proxy.held == {}
        again = await _answer(proxy, f"GET http://{ALLOWED}:{o.port}/y HTTP/1.1\r\n\r\n".encode())
    await proxy.close()
    assert again.startswith(b"HTTP/1.1 200"), again


async def test_an_agents_sandboxes_together_cannot_hold_the_gateways_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before their head is read, an agent's connections (all its sandboxes together) are capped too, at
    its `maxConnections` + UNREAD_HEADROOM: the rest are closed unread, so one agent with many sandboxes
    cannot take the gateway's 1,024; another agent is still served."""
    from tests.helpers.gateway import wait_until

    monkeypatch.setattr(proxy_mod, "HANDOFF_TIMEOUT_SEC", 120.0)  # silent ones stay until the cap acts
    records: list[Connection] = []
    proxy = _rig(records, cap=lambda agent: 1)
    limit = 1 + proxy_mod.UNREAD_HEADROOM
    paths = {}
    for name, agent in (("sb1", "agentA"), ("sb2", "agentA"), ("sb3", "agentB")):
        directory = tmp_path / name
        directory.mkdir(mode=0o700)
        await proxy.listen(name, agent, directory)
        paths[name] = str(directory / "proxy.sock")
    held: list[socket.socket] = []

    def connect(name: str) -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        s.connect(paths[name])
        held.append(s)
        return s

    try:
        for _ in range(limit - 10):
            connect("sb1")
        await wait_until(lambda: proxy.open.get("agentA") == limit - 10)
        late = [connect("sb2") for _ in range(25)]  # 10 fit; the other 15 are closed unread
        for s in late[10:]:
            s.settimeout(20)
            with contextlib.suppress(ConnectionResetError):
                assert await asyncio.to_thread(s.recv, 1) == b""
        assert proxy.open["agentA"] == limit
        connect("sb3")
        await wait_until(lambda: proxy.open.get("agentB") == 1)
    finally:
        for s in held:
            s.close()
        await proxy.close()


async def test_the_gateway_reads_max_connections_per_agent_as_the_config_changes(tmp_path: Path) -> None:
    """The hub's cap follows the agent's own key over the global one, and a reloaded config at once."""
    from types import SimpleNamespace

    from engine.approvals.generations import Generations
    from runner.egress import EgressHub

    text = (
        '[agents.defaults.sandbox.egress]\nmode = "open"\nmaxConnections = 7\n'
        '[[agents.list]]\nid = "b"\nsandbox.egress.maxConnections = 3\n'
    )
    current = {"config": load_config_text(text)}
    approvals = SimpleNamespace(generations=Generations())  # (the hub follows revokes through it)
    services = SimpleNamespace(state_dir=tmp_path, config=lambda: current["config"], approvals=approvals)
    hub = EgressHub(services)  # type: ignore[arg-type]
    try:
        assert (hub.cap("main"), hub.cap("b")) == (7, 3)
        current["config"] = load_config_text(text.replace("= 7", "= 9"))
        assert (hub.cap("main"), hub.cap("b")) == (9, 3)
        current["config"] = load_config_text("")
        assert hub.cap("main") == proxy_mod.MAX_CONNECTIONS
    finally:
        await hub.proxy.close()


def test_max_connections_is_a_config_key() -> None:
    cfg = load_config_text('[agents.defaults.sandbox.egress]\nmode = "open"\nmaxConnections = 8\n')
    assert EgressPolicy.from_config(cfg.sandbox.egress).max_connections == 8
    assert EgressPolicy.from_config({}).max_connections == proxy_mod.MAX_CONNECTIONS
    for bad in ("0", "100000", '"8"'):
        with pytest.raises(ConfigError, match="maxConnections"):
            load_config_text(f'[agents.defaults.sandbox.egress]\nmode = "open"\nmaxConnections = {bad}\n')


async def test_the_shared_sandbox_records_its_connections_as_shared(tmp_path: Path) -> None:
    """Every agent's commands run in the shared sandbox as one uid behind one loopback: a connection
    carries nothing that says whose command opened it, so it is recorded as the principal "shared" (and
    counted against one cap), never charged to the agent that happened to start the sandbox."""
    from engine.sandbox.settings import container_name, is_shared, resolve_settings, scope_key

    for scope, shared in (("shared", True), ("agent", False), ("session", False)):
        settings = resolve_settings(load_config_text(f'[agents.defaults.sandbox]\nscope = "{scope}"\n'), "a")
        assert is_shared(container_name(settings, scope_key(scope, "a", "agent:a:main"))) is shared
    records: list[Connection] = []
    seen: list[str] = []

    def cap(agent: str) -> int:
        seen.append(agent)
        return 5

    proxy = _rig(records, cap=cap)
    directory = tmp_path / "eg"
    directory.mkdir(mode=0o700)
    await proxy.listen("x-shared", "agentA", directory, shared=True)
    try:
        client, accepted = _tcp_pair()
        unix = socket.socket(socket.AF_UNIX)
        unix.connect(str(directory / "proxy.sock"))
        socket.send_fds(unix, [b"\0"], [accepted.fileno()])
        accepted.close()
        unix.close()
        client.sendall(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        reply = await asyncio.to_thread(_read_all, client)
        client.close()
    finally:
        await proxy.close()
    assert reply.startswith(b"HTTP/1.1 403")
    (rec,) = records
    assert rec.principal == SHARED and rec.agentId == "agentA" and set(seen) == {"agentA"}
    from runner.cli.sandboxtext import format_egress

    assert "shared (settings of agentA)" in format_egress([rec.to_json()])


# -- ports ---------------------------------------------------------------------------------------------


async def test_a_port_less_entry_does_not_admit_connect_to_port_80() -> None:
    records: list[Connection] = []
    proxy = _rig(records, {"mode": "allowlist", "ask": False, "allow": [ALLOWED]})
    try:
        reply = await _answer(proxy, f"CONNECT {ALLOWED}:80 HTTP/1.1\r\n\r\n".encode())
        socks = await _answer(proxy, b"\x05\x01\x00\x05\x01\x00\x03\x0c" + ALLOWED.encode() + b"\x00\x50")
    finally:
        await proxy.close()
    assert reply.startswith(b"HTTP/1.1 403") and b"not in the allowlist" in reply, reply
    assert b"admits tunnels (CONNECT, SOCKS5) to 443" in reply  # (says why, and what would admit it)
    assert socks[2:4] == b"\x05\x02", socks  # SOCKS5 is a tunnel too: "not allowed by ruleset"
    assert [r.decision for r in records] == ["refused", "refused"]
