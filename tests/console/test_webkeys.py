"""The web console's one-use keys (console.webkeys) and the routes that spend them (console.web): a ticket
opens its page until the page trades it, once; the trade's secret opens one websocket; nothing spent or
expired opens anything; the page's code is public and admits no connection."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from console.web import GuardedServer
from console.webkeys import SECRET_TTL_S, TICKET_TTL_S, OneUseKeys


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_redeemed_once() -> None:
    keys = OneUseKeys(60, Clock())
    key = keys.make()
    assert keys.valid(key) and keys.valid(key)  # looking uses nothing
    assert keys.redeem(key)
    assert not keys.redeem(key) and not keys.valid(key)
    assert len(keys) == 0


def test_a_key_expires_and_is_forgotten() -> None:
    clock = Clock()
    keys = OneUseKeys(60, clock)
    old = keys.make()
    clock.now += 59.9
    assert keys.valid(old)
    new = keys.make()
    clock.now += 0.1
    assert not keys.valid(old) and not keys.redeem(old)
    assert keys.redeem(new)
    assert len(keys) == 0


def test_only_keys_made_here_are_good() -> None:
    keys = OneUseKeys(60, Clock())
    key = keys.make()
    others = OneUseKeys(60, Clock())
    assert not others.valid(key) and not others.redeem(key)
    for wrong in ("", key[:-1], key + "x", "\udcff"):
        assert not keys.valid(wrong) and not keys.redeem(wrong)
    assert keys.redeem(key)


def test_the_lifetimes_are_short() -> None:
    assert TICKET_TTL_S <= 60 and SECRET_TTL_S <= 60


@pytest.fixture
async def server() -> AsyncIterator[tuple[GuardedServer, TestClient[object, object]]]:
    guarded = GuardedServer("true", 0)
    client = TestClient(TestServer(await guarded._make_app(), host="127.0.0.1"))
    await client.start_server()
    port = client.server.port
    guarded.port = port
    guarded.allowed_hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
    try:
        yield guarded, client
    finally:
        await client.close()


async def test_a_ticket_opens_its_page_until_the_trade_spends_it(
    server: tuple[GuardedServer, TestClient[object, object]],
) -> None:
    guarded, client = server
    ticket = guarded.new_url().rstrip("/").rsplit("/", 1)[1]
    for _ in range(2):  # the page holds no key: loading it spends nothing
        page = await client.get(f"/{ticket}/")
        assert page.status == 200
        html = await page.text()
        assert ticket not in html and '<script src="/exechost.js">' in html
        assert "fonts.googleapis" not in html
    trade = await client.post(f"/{ticket}/session")
    assert trade.status == 200 and trade.headers["Cache-Control"] == "no-store"
    websocket = (await trade.json())["websocket"]
    secret = websocket.rsplit("/", 2)[1]
    assert websocket == f"ws://127.0.0.1:{guarded.port}/{secret}/ws" and secret != ticket
    assert guarded.secrets.valid(secret)
    # spent: the page, the trade and a websocket under the ticket all refused
    assert (await client.get(f"/{ticket}/")).status == 403
    assert (await client.post(f"/{ticket}/session")).status == 403
    assert (await client.get(f"/{ticket}/ws")).status == 403
    # the secret opens no page and no trade; it is good for the websocket only
    assert (await client.get(f"/{secret}/")).status == 403
    assert (await client.post(f"/{secret}/session")).status == 403
    assert guarded.secrets.valid(secret)


async def test_the_trade_is_refused_from_another_origin_and_for_an_expired_ticket(
    server: tuple[GuardedServer, TestClient[object, object]],
) -> None:
    guarded, client = server
    clock = Clock()
    guarded.tickets = OneUseKeys(TICKET_TTL_S, clock)
    ticket = guarded.new_url().rstrip("/").rsplit("/", 1)[1]
    other = {"Origin": "http://127.0.0.1:1"}  # an agent's dev server on another port
    assert (await client.post(f"/{ticket}/session", headers=other)).status == 403
    assert guarded.tickets.valid(ticket)  # a refused trade spends nothing
    clock.now += TICKET_TTL_S
    assert (await client.get(f"/{ticket}/")).status == 403
    assert (await client.post(f"/{ticket}/session")).status == 403


async def test_the_websocket_needs_a_live_secret(
    server: tuple[GuardedServer, TestClient[object, object]],
) -> None:
    guarded, client = server
    secret = guarded.secrets.make()
    guarded.secrets.redeem(secret)  # spent (by the page's websocket)
    assert (await client.get(f"/{secret}/ws")).status == 403
    assert (await client.get("/ws")).status == 403
    assert (await client.get("/")).status == 403


async def test_the_pages_code_is_public(server: tuple[GuardedServer, TestClient[object, object]]) -> None:
    _, client = server
    boot = await client.get("/exechost.js")
    assert boot.status == 200 and 'fetch("session"' in await boot.text()
    assert (await client.get("/static/js/textual.js")).status == 200
    assert (await client.get("/static/../server.py")).status in (403, 404)
    wrong_host = await client.get("/exechost.js", headers={"Host": "evil.example"})
    assert wrong_host.status == 403
