"""Round 13 (c): ambient credentials on the gateway's own surfaces (the one-use keys behind its URLs)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.webkeys import OneUseKeys


class _Clock:
    """A clock the test moves, so expiry is decided by events, not the wall."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_console_ticket_replayed_from_an_access_log_is_refused() -> None:
    """A ticket that leaked (a URL in a log or a browser history) after the operator used it acts no more."""
    keys = OneUseKeys(ttl=30.0, clock=_Clock())
    ticket = keys.make()
    assert keys.redeem(ticket)
    assert not keys.valid(ticket)
    assert not keys.redeem(ticket)


def test_an_unused_ticket_read_after_it_expired_is_refused() -> None:
    clock = _Clock()
    keys = OneUseKeys(ttl=30.0, clock=clock)
    ticket = keys.make()
    clock.now += 30.0
    assert not keys.valid(ticket)
    assert not keys.redeem(ticket)
    assert len(keys) == 0


def test_near_variants_of_a_live_ticket_redeem_nothing() -> None:
    """Case, padding, a trailing NUL or newline, or a prefix of a live key are not that key."""
    keys = OneUseKeys(ttl=30.0, clock=_Clock())
    ticket = keys.make()
    variants = [
        ticket.upper(),
        ticket.lower(),
        ticket + "=",
        ticket + "\x00",
        ticket + "\n",
        ticket[:-1],
        "",
        " " + ticket,
    ]
    for variant in variants:
        if variant != ticket:
            assert not keys.redeem(variant), variant
    assert keys.redeem(ticket)


def test_keys_of_one_store_are_not_keys_of_another() -> None:
    """A noVNC ticket is not a console ticket: each surface has its own store."""
    console, door = OneUseKeys(ttl=30.0, clock=_Clock()), OneUseKeys(ttl=30.0, clock=_Clock())
    ticket = door.make()
    assert not console.redeem(ticket)
    assert door.redeem(ticket)


async def test_a_console_ticket_is_spent_by_its_trade_and_cross_origin_is_refused() -> None:
    """The web console's ticket trades once for one websocket secret; another origin gets nothing."""
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from console.web import GuardedServer, free_port

    port = free_port()
    guarded = GuardedServer("true", port)
    server = TestServer(await guarded._make_app(), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        url = guarded.new_url()
        async with ClientSession() as http:
            evil = {"Origin": f"http://127.0.0.1:{free_port()}"}
            async with http.post(url + "session", headers=evil) as answer:
                assert answer.status == 403
            async with http.post(url + "session") as answer:
                assert answer.status == 200
                assert "websocket" in await answer.json()
            async with http.post(url + "session") as answer:
                assert answer.status == 403
            async with http.get(url) as answer:
                assert answer.status == 403
    finally:
        await server.close()


async def test_a_novnc_ticket_opens_no_cdp_and_no_vnc_socket(tmp_path: Path) -> None:
    """A noVNC link's ticket (shown to the operator) asks for CDP or VNC: refused before any upstream
    (403, not the 502 a tried but missing browser socket would give)."""
    from runner.gateway.browser_proxy import BrowserProxy

    proxy = BrowserProxy()
    await proxy.start()
    try:
        proxy.open("b", str(tmp_path / "cdp.sock"), str(tmp_path / "vnc.sock"), "0" * 64)
        url = proxy.novnc_url("b")
        assert url is not None
        base = url.removesuffix("novnc/vnc.html")
        for path in ("json/version", "devtools/browser/x", "novnc/websockify", "novnc/trade?x", ""):
            answer = await _raw_get(proxy.port, "/" + base.split("/", 3)[3] + path)
            assert answer.startswith(b"HTTP/1.1 403"), (path, answer[:40])
        # The ticket was live all along: its own page still opens.
        page = await _raw_get(proxy.port, "/" + base.split("/", 3)[3] + "novnc/vnc.html")
        assert page.startswith(b"HTTP/1.1 200")
    finally:
        await proxy.close()


async def _raw_get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_a_cdp_ticket_opens_only_the_json_answer_once(tmp_path: Path) -> None:
    """A CDP URL's ticket: not the noVNC page, not `/json/new` (which opens a tab at a URL of the asker's
    choosing), and its one `/json/version` is spent even when the browser is not there."""
    from runner.gateway.browser_proxy import BrowserProxy

    proxy = BrowserProxy()
    await proxy.start()
    try:
        proxy.open("b", str(tmp_path / "cdp.sock"), str(tmp_path / "vnc.sock"), "0" * 64)
        url = proxy.cdp_url("b")
        assert url is not None
        ticket = url.split("/", 3)[3].split("/", 1)[0]
        for path in (
            "novnc/vnc.html",
            "json/new?http://127.0.0.1:1/",
            "json/activate/x",
            "devtools/browser/x",
        ):
            answer = await _raw_get(proxy.port, f"/{ticket}/{path}")
            assert answer.startswith(b"HTTP/1.1 403"), (path, answer[:40])
        first = await _raw_get(proxy.port, f"/{ticket}/json/version")
        assert first.startswith(b"HTTP/1.1 502"), first[:40]  # tried: the browser socket is missing
        again = await _raw_get(proxy.port, f"/{ticket}/json/version")
        assert again.startswith(b"HTTP/1.1 403"), again[:40]
    finally:
        await proxy.close()


async def test_a_rebound_host_name_cannot_trade_a_console_ticket() -> None:
    """DNS rebinding: a page at attacker.example that resolves to 127.0.0.1 sends its own Host; refused,
    and the ticket it tried stays the operator's."""
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from console.web import GuardedServer, free_port

    port = free_port()
    guarded = GuardedServer("true", port)
    server = TestServer(await guarded._make_app(), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        url = guarded.new_url()
        async with ClientSession() as http:
            for host in (f"attacker.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}"):
                async with http.post(url + "session", headers={"Host": host}) as answer:
                    assert answer.status == 403, host
            async with http.post(url + "session") as answer:
                assert answer.status == 200
    finally:
        await server.close()
