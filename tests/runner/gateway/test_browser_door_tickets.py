"""The browser door's noVNC link: a one-use ticket for the wrapper page and the trade, never CDP; the
traded secret opens one websocket."""

from __future__ import annotations

import asyncio
import json

from runner.gateway.browser_proxy import BrowserProxy


async def _ask(port: int, method: str, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_a_ticket_opens_the_page_and_one_trade_and_never_cdp() -> None:
    proxy = BrowserProxy()
    await proxy.start()
    try:
        proxy.open("b1", "/nonexistent/cdp.sock", "/nonexistent/vnc.sock", "c1")
        url = proxy.novnc_url("b1")
        assert url is not None and proxy.door("b1") is not None
        token = proxy.door("b1").token  # type: ignore[union-attr]
        assert token not in url
        ticket = url.split("/")[3]
        port = proxy.port
        page = await _ask(port, "GET", f"/{ticket}/novnc/vnc.html")
        assert page.startswith(b"HTTP/1.1 200") and b"trade" in page and token.encode() not in page
        for path in ("/json/version", "/json", "/devtools/browser/x", "/novnc/websockify"):
            assert (await _ask(port, "GET", f"/{ticket}{path}")).startswith(b"HTTP/1.1 403"), path
        traded = await _ask(port, "POST", f"/{ticket}/novnc/trade")
        assert traded.startswith(b"HTTP/1.1 200")
        ws = json.loads(traded.split(b"\r\n\r\n", 1)[1])["websocket"]
        secret = ws.split("/")[3]
        assert token not in ws and secret != ticket
        # Spent: the page, the trade and the files all refuse the ticket now.
        assert (await _ask(port, "POST", f"/{ticket}/novnc/trade")).startswith(b"HTTP/1.1 403")
        assert (await _ask(port, "GET", f"/{ticket}/novnc/vnc.html")).startswith(b"HTTP/1.1 403")
        # The secret opens only the websocket, once (here its socket is absent: 502, then 403).
        assert (await _ask(port, "GET", f"/{secret}/json/version")).startswith(b"HTTP/1.1 403")
        assert (await _ask(port, "GET", f"/{secret}/novnc/websockify")).startswith(b"HTTP/1.1 502")
        assert (await _ask(port, "GET", f"/{secret}/novnc/websockify")).startswith(b"HTTP/1.1 403")
        # A closed door's tickets die with it.
        other = proxy.novnc_url("b1")
        assert other is not None
        proxy.shut("b1")
        assert (await _ask(port, "GET", "/" + other.split("/")[3] + "/novnc/vnc.html")).startswith(
            b"HTTP/1.1 403"
        )
    finally:
        await proxy.close()
