"""The token-protected loopback door to browser sandboxes: CDP and noVNC, relayed to their Unix sockets.

A browser container publishes no port: its CDP and noVNC listen on Unix sockets in a 0700 dir only the
gateway's user can enter. CDP clients (Playwright's `connect_over_cdp`, the operator's tools) and the
operator's web browser (noVNC) need a TCP URL, so the gateway listens on 127.0.0.1 and relays requests
whose path starts with a browser's secret token; anything else gets a bare 403 and nothing of the
browser. Chromium names its WebSocket URLs after the Host header, so `/json*` answers are rewritten to
carry the token, or a client could not follow them back through this door.

The token is the gateway's own (its browser tool's way in) and is never shown: a URL outlives its use in
shell histories, process lists and browser profiles, which other accounts and host runs read (fresh round
12 a). The operator gets one-use keys instead: a noVNC link's ticket (below), and a CDP URL whose ticket
opens one `/json*` answer, whose websocket URLs carry a one-use secret for one CDP websocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import secrets
from dataclasses import dataclass

from engine import redact
from engine.preauth import PreAuth
from engine.sandbox.browser import open_browser_socket
from engine.webkeys import SECRET_TTL_S, TICKET_TTL_S, OneUseKeys

log = logging.getLogger(__name__)

HEAD_LIMIT = 16 * 1024  # an HTTP request head longer than this is not a CDP or noVNC client
JSON_LIMIT = 1024 * 1024  # a /json answer (targets list) larger than this is refused
HEAD_TIMEOUT = 10.0  # a head must be whole by then; one without a door's token has engine.preauth's 5 s
FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_REQUEST_LINE = re.compile(rb"^([A-Z]{3,10}) (/[^ ]*) (HTTP/1\.[01])$")


@dataclass(frozen=True)
class Door:
    """One browser's way in: its token and the Unix sockets its container listens on."""

    token: str
    cdp_socket: str
    novnc_socket: str | None
    container_id: str  # only a peer in this container is the browser (the socket dir is its to write)


# The operator's noVNC link holds a one-use ticket, never the door's token (a URL a browser opened stays in
# its profile, which host runs can read: fresh round 11 a). The ticket opens our wrapper page and noVNC's
# public files, never CDP; the page trades it once (POST .../novnc/trade) for a secret only its memory
# holds, and proves that secret once by its websocket (`/<secret>/novnc/websockify`). Both expire soon.
WRAPPER = b"""<!doctype html><html><head><meta charset="utf-8"><title>noVNC</title>
<style>html,body,#screen{margin:0;width:100%;height:100%;background:#222}</style></head>
<body><div id="screen"></div><script type="module">
import RFB from "./core/rfb.js";
const answer = await fetch("trade", {method: "POST", cache: "no-store"});
if (answer.ok) {
  const rfb = new RFB(document.getElementById("screen"), (await answer.json()).websocket);
  rfb.scaleViewport = true;
} else {
  document.body.textContent = "This link was used or expired: ask exechost for a new one.";
}
</script></body></html>
"""
_ASSET = re.compile(rb"^/novnc/(?:app|core|vendor)/[A-Za-z0-9_./-]+\.(?:js|mjs|css|svg|png)$")
# What a CDP URL's ticket opens once (Playwright's connect_over_cdp and Puppeteer ask /json/version/)
_JSON = re.compile(rb"^/json(?:/list|/version)?/?$")


class BrowserProxy:
    """One loopback listener for every browser sandbox of this gateway."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._server: asyncio.Server | None = None
        self._doors: dict[str, Door] = {}  # browser (container) name → door
        self._tickets: dict[str, OneUseKeys] = {}  # browser name → its noVNC links' tickets
        self._secrets: dict[str, OneUseKeys] = {}  # browser name → secrets traded for them
        self._cdp_tickets: dict[str, OneUseKeys] = {}  # browser name → its CDP URLs' tickets
        self._cdp_secrets: dict[str, OneUseKeys] = {}  # browser name → the websocket keys they gave
        self._tasks: set[asyncio.Task[None]] = set()
        # Connections that have not shown a door's token: a few slots, oldest shed first, 5 s each (2,000
        # tokenless peers held 2,000 of the gateway's descriptors for 10 s each).
        self.preauth = PreAuth()
        self.port = 0

    async def start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, self._host, 0, limit=HEAD_LIMIT)
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()

    def open(self, name: str, cdp_socket: str, novnc_socket: str | None, container_id: str) -> Door:
        """The door for browser `name` (kept while its container is the same: URLs stay valid)."""
        door = self._doors.get(name)
        wanted = (cdp_socket, novnc_socket, container_id)
        if door is None or (door.cdp_socket, door.novnc_socket, door.container_id) != wanted:
            if door is not None:
                redact.forget(door.token)
            door = Door(secrets.token_urlsafe(24), *wanted)
            self._tickets[name] = OneUseKeys(TICKET_TTL_S)
            self._secrets[name] = OneUseKeys(SECRET_TTL_S)
            self._cdp_tickets[name] = OneUseKeys(TICKET_TTL_S)
            self._cdp_secrets[name] = OneUseKeys(SECRET_TTL_S)
            redact.register(door.token, "<token>")  # never in an error an agent sees
            self._doors[name] = door
        return door

    def shut(self, name: str) -> None:
        door = self._doors.pop(name, None)
        for keys in (self._tickets, self._secrets, self._cdp_tickets, self._cdp_secrets):
            keys.pop(name, None)
        if door is not None:
            redact.forget(door.token)

    def novnc_url(self, name: str) -> str | None:
        """A new noVNC link for browser `name`: a one-use ticket for our wrapper page (never the token)."""
        door = self._doors.get(name)
        if door is None or not self.port:
            return None
        return f"http://{self._host}:{self.port}/{self._tickets[name].make()}/novnc/vnc.html"

    def cdp_url(self, name: str) -> str | None:
        """A new CDP URL for browser `name`: a one-use ticket (never the token) that opens one `/json*`
        answer, whose websocket URLs carry a one-use secret for one CDP websocket."""
        door = self._doors.get(name)
        if door is None or not self.port:
            return None
        return f"http://{self._host}:{self.port}/{self._cdp_tickets[name].make()}"

    def door(self, name: str) -> Door | None:
        return self._doors.get(name)

    def base_url(self, name: str) -> str | None:
        """The door's own URL, with its token: the gateway's browser tool's, never shown to anyone."""
        door = self._doors.get(name)
        if door is None or not self.port:
            return None
        return f"http://{self._host}:{self.port}/{door.token}"

    def _find(self, token: str) -> Door | None:
        found = None
        for door in self._doors.values():  # compare against every door: no early exit on a match
            if hmac.compare_digest(door.token.encode(), token.encode()):
                found = door
        return found

    # -- one connection -----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.preauth.arrived(writer, writer.transport.abort)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass  # the door closed under it (gateway stopping): a top-level task nothing awaits
        finally:
            self.preauth.gone(writer)
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HEAD_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        match = _REQUEST_LINE.match(lines[0])
        if match is None:
            writer.write(FORBIDDEN)
            return
        method, path, version = match.groups()
        token, _, rest = path[1:].partition(b"/")
        key = token.decode("ascii", "replace")
        door = self._find(key) if token else None
        if door is None and token:
            await self._ticketed(key, method, rest, version, lines, reader, writer)
            return
        if door is None:
            writer.write(FORBIDDEN)
            await writer.drain()
            return
        self.preauth.admitted(writer)
        target, inner = door.cdp_socket, b"/" + rest
        if rest == b"novnc" or rest.startswith((b"novnc/", b"novnc?")):
            if door.novnc_socket is None:
                writer.write(FORBIDDEN)
                return
            target, inner = door.novnc_socket, b"/" + rest[len(b"novnc") :].lstrip(b"/")
        host = _header(lines, b"host") or b"127.0.0.1"
        rewrite = target == door.cdp_socket and inner.startswith(b"/json")
        headers = [ln for ln in lines[1:] if not (rewrite and ln.lower().startswith(b"connection:"))]
        if rewrite:
            headers.append(b"Connection: close")  # one answer to rewrite, then done
        try:
            up_reader, up_writer = await open_browser_socket(target, door.container_id, HEAD_LIMIT)
        except OSError:  # gone, or NotTheBrowser: a link to some other socket on this host
            writer.write(BAD_GATEWAY)
            return
        try:
            up_writer.write(b"\r\n".join([b" ".join([method, inner, version]), *headers]) + b"\r\n\r\n")
            if rewrite:
                await _rewrite_json(up_reader, writer, host, door.token.encode())
                return
            await _pipe_both(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _ticketed(
        self,
        key: str,
        method: bytes,
        rest: bytes,
        version: bytes,
        lines: list[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """A path led by a noVNC ticket or a traded secret: only the wrapper page, noVNC's public files,
        the trade (ticket) and one websocket (secret). Nothing else, and never CDP. Or by a CDP ticket or
        secret (_cdp)."""
        inner = b"/" + rest.split(b"?", 1)[0]
        if await self._cdp(key, method, rest, version, lines, reader, writer):
            return
        for name, door in list(self._doors.items()):
            tickets, traded = self._tickets.get(name), self._secrets.get(name)
            if tickets is None or traded is None:
                continue
            if method == b"GET" and inner == b"/novnc/websockify" and traded.redeem(key):
                self.preauth.admitted(writer)
                await self._upstream(
                    door, door.novnc_socket, b"GET /websockify " + version, lines, reader, writer
                )
                return
            if not tickets.valid(key):
                continue
            self.preauth.admitted(writer)
            if method == b"GET" and inner == b"/novnc/vnc.html":
                # no worker from this page either: what it imports is the container's
                writer.write(
                    _answer(
                        b"text/html; charset=utf-8",
                        WRAPPER,
                        b"Content-Security-Policy: worker-src 'none'\r\n",
                    )
                )
            elif method == b"POST" and inner == b"/novnc/trade" and tickets.redeem(key):
                host = (_header(lines, b"host") or b"127.0.0.1").decode("latin-1")
                ws = f"ws://{host}/{traded.make()}/novnc/websockify"
                writer.write(_answer(b"application/json", json.dumps({"websocket": ws}).encode()))
            elif method == b"GET" and _ASSET.match(inner) and door.novnc_socket is not None:
                await _asset(door, door.novnc_socket, inner[len(b"/novnc") :], writer)
                return
            else:
                writer.write(FORBIDDEN)
            await writer.drain()
            return
        writer.write(FORBIDDEN)
        await writer.drain()

    async def _cdp(
        self,
        key: str,
        method: bytes,
        rest: bytes,
        version: bytes,
        lines: list[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """A CDP URL's ticket, spent on one `/json*` answer asked for in the door's own words, its
        websocket URLs given a one-use secret; that secret, spent on one `/devtools/...` websocket. False:
        the key is neither."""
        inner = b"/" + rest.split(b"?", 1)[0]
        for name, door in list(self._doors.items()):
            tickets, traded = self._cdp_tickets.get(name), self._cdp_secrets.get(name)
            if tickets is None or traded is None:
                continue
            if method == b"GET" and _JSON.match(inner) and tickets.redeem(key):
                self.preauth.admitted(writer)
                host = _header(lines, b"host") or b"127.0.0.1"
                await _json_once(door, inner, host, traded.make().encode(), writer)
                return True
            if method == b"GET" and inner.startswith(b"/devtools/") and traded.redeem(key):
                self.preauth.admitted(writer)
                request = b"GET /" + rest + b" " + version
                await self._upstream(door, door.cdp_socket, request, lines, reader, writer)
                return True
        return False

    async def _upstream(
        self,
        door: Door,
        target: str | None,
        request: bytes,
        lines: list[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if target is None:
            writer.write(FORBIDDEN)
            return
        try:
            up_reader, up_writer = await open_browser_socket(target, door.container_id, HEAD_LIMIT)
        except OSError:
            writer.write(BAD_GATEWAY)
            return
        try:
            up_writer.write(b"\r\n".join([request, *lines[1:]]) + b"\r\n\r\n")
            await _pipe_both(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()


async def _json_once(door: Door, path: bytes, host: bytes, key: bytes, writer: asyncio.StreamWriter) -> None:
    """One `/json*` answer of the browser's, asked for in the door's own words, every websocket URL in it
    led by `key` (a one-use secret)."""
    try:
        up_reader, up_writer = await open_browser_socket(door.cdp_socket, door.container_id, HEAD_LIMIT)
    except OSError:
        writer.write(BAD_GATEWAY)
        return
    try:
        up_writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n")
        await _rewrite_json(up_reader, writer, host, key)
    finally:
        up_writer.close()


async def _asset(door: Door, target: str, path: bytes, writer: asyncio.StreamWriter) -> None:
    """One of noVNC's public files for a ticket's page, asked for by the door in words of its own (GET,
    the path the asset pattern matched, a fixed head, `Connection: close`) and its one answer relayed:
    nothing of the client's head or of what it sent after (an Upgrade, which websockify honours on any
    path; a pipelined `GET /websockify`) reaches websockify, so a ticket opens no VNC (fresh round 12 a)."""
    try:
        up_reader, up_writer = await open_browser_socket(target, door.container_id, HEAD_LIMIT)
    except OSError:
        writer.write(BAD_GATEWAY)
        return
    try:
        up_writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: novnc\r\nConnection: close\r\n\r\n")
        if up_writer.can_write_eof():
            up_writer.write_eof()
        head = asset_head(await up_reader.readuntil(b"\r\n\r\n"))
        if head is None:
            writer.write(BAD_GATEWAY)
            return
        writer.write(head)
        await _pipe(up_reader, writer)
    finally:
        up_writer.close()


# The headers of a noVNC file's answer that reach the operator's browser: the container is hostile (its
# files are its own), and every door shares one origin; a `Service-Worker-Allowed: /` would let a worker
# registered from its script take every later noVNC link of every browser.
_ASSET_HEADERS = (b"content-type", b"content-length", b"last-modified", b"etag")
# Sent with each: no worker from it, and a document it is opened as (an SVG) runs in an origin of its own.
_ASSET_POLICY = b"Content-Security-Policy: sandbox; worker-src 'none'\r\nX-Content-Type-Options: nosniff\r\n"
_STATUS_LINE = re.compile(rb"^HTTP/1\.[01] [1-5][0-9]{2}(?: [ -~]*)?$")


def asset_head(raw: bytes) -> bytes | None:
    """A noVNC file's answer head as the door relays it: its status line and the headers of
    _ASSET_HEADERS, then the door's own policy, no-store and `Connection: close`; None: not an answer."""
    lines = raw[:-4].split(b"\r\n")
    if not _STATUS_LINE.match(lines[0]):
        return None
    kept = [ln for ln in lines[1:] if ln.partition(b":")[0].strip().lower() in _ASSET_HEADERS]
    own = _ASSET_POLICY + b"Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    return b"\r\n".join([lines[0], *kept]) + b"\r\n" + own


def _answer(kind: bytes, body: bytes, extra: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nCache-Control: no-store\r\n" + extra
    return head + b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    for line in lines[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return None


def _with_token(body: bytes, host: bytes, token: bytes) -> bytes:
    """A /json answer with the token in every URL of the door's own origin: the websocket URLs, and a
    same-origin DevTools frontend's `ws=`. A frontend on another origin (Chromium offers Google's
    appspot one) is dropped, never given the token: following it would send the token there and leave
    it in the history (fresh round 10 a)."""
    ws = b"ws://" + host + b"/"
    body = body.replace(ws, ws + token + b"/")
    try:
        listing = json.loads(body)
    except ValueError:
        return body
    targets = listing if isinstance(listing, list) else [listing]
    for target in targets:
        front = target.get("devtoolsFrontendUrl") if isinstance(target, dict) else None
        if not isinstance(front, str):
            continue
        if front.startswith("/") and not front.startswith("//"):
            near = "ws=" + host.decode("latin-1") + "/"
            target["devtoolsFrontendUrl"] = front.replace(near, near + token.decode("latin-1") + "/")
        else:
            del target["devtoolsFrontendUrl"]
    return json.dumps(listing).encode()


async def _rewrite_json(
    up: asyncio.StreamReader, writer: asyncio.StreamWriter, host: bytes, token: bytes
) -> None:
    """Relay a /json answer with every `ws://<host>/` (and devtools' `ws=<host>/`) pointing at the token."""
    head = await up.readuntil(b"\r\n\r\n")
    length = _header([b"", *head[:-4].split(b"\r\n")], b"content-length")
    if length is None or not length.isdigit() or int(length) > JSON_LIMIT:
        writer.write(BAD_GATEWAY)  # Chromium always sends a length; it keeps the connection open
        return
    body = _with_token(await up.readexactly(int(length)), host, token)
    lines = [
        ln
        for ln in head[:-4].split(b"\r\n")
        if not ln.lower().startswith((b"content-length:", b"connection:", b"transfer-encoding:"))
    ]
    lines += [b"Content-Length: " + str(len(body)).encode(), b"Connection: close"]
    writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
    await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    finally:
        with contextlib.suppress(OSError):
            if dst.can_write_eof():
                dst.write_eof()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    # Data the client sent after its head (a WebSocket's first frames) is still in `reader`'s buffer.
    tasks = [asyncio.create_task(_pipe(reader, up_writer)), asyncio.create_task(_pipe(up_reader, writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        # The container closing ends the exchange; a client half-close still lets the answer finish.
        if tasks[1].done():
            return
        await tasks[1]
    finally:
        for t in tasks:
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
