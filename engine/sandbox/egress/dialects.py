"""How the egress proxy talks to a sandbox's client in each dialect it accepts on one port: HTTP forward
proxying (absolute-form requests and CONNECT) and SOCKS5 CONNECT — the request read, the refusal answered (an
HTTP status or a SOCKS reply code), the tunnel's acceptance."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from engine.sandbox.egress import httphead, sockio, socks

_HTTP_REFUSALS = {
    "bad": (400, "Bad Request"),
    "timeout": (408, "Request Timeout"),
    "forbidden": (403, "Forbidden"),
    "busy": (429, "Too Many Requests"),
    "unreachable": (502, "Bad Gateway"),
}
_SOCKS_REFUSALS = {
    "bad": socks.GENERAL_FAILURE,
    "timeout": socks.GENERAL_FAILURE,
    "forbidden": socks.NOT_ALLOWED,
    "busy": socks.NOT_ALLOWED,
    "unreachable": socks.HOST_UNREACHABLE,
}
ANSWER_TIMEOUT_SEC = 5.0  # a refusal fits any socket buffer; a client that will not take it is left
# method, name, port, head to send upstream, bytes read after it, body length (None: a tunnel's, no end)
Parsed = tuple[str, str, int, bytes, bytes, int | None]


class Http:
    """HTTP forward proxying: an absolute-form request, or CONNECT; refusals are HTTP answers."""

    method = "HTTP"

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.connect = False

    async def read(self, first: bytes) -> Parsed | None:
        head, rest = await httphead.read_head(self.client, first)
        if not head:
            return None
        method, name, port, forward, body = httphead.parse(head)
        self.method, self.connect = method, method == "CONNECT"
        return method, name, port, forward, rest, body

    async def refuse(self, kind: str, text: str) -> int:
        code, reason = _HTTP_REFUSALS[kind]
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(ANSWER_TIMEOUT_SEC):
                await httphead.answer(self.client, code, reason, text)
        return code

    async def established(self) -> int | None:
        if self.connect:
            await sockio.sendall(self.client, b"HTTP/1.1 200 Connection established\r\n\r\n")
            return 200
        return None


class Socks:
    """SOCKS5 CONNECT (engine.sandbox.egress.socks); refusals are SOCKS reply codes."""

    method = socks.METHOD

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.answered = False
        self.code: int | None = None  # the handshake's own reply to a request it refused

    async def read(self, first: bytes) -> Parsed | None:
        try:
            name, port, rest = await socks.handshake(self.client, first)
        except socks.SocksError as exc:
            self.answered, self.code = exc.code is None, exc.code  # (the greeting's refusal went already)
            raise httphead.BadRequest(str(exc)) from None
        return self.method, name, port, b"", rest, None

    async def refuse(self, kind: str, text: str) -> int:
        code = self.code if kind == "bad" and self.code is not None else _SOCKS_REFUSALS[kind]
        if not self.answered:
            self.answered = True
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(ANSWER_TIMEOUT_SEC):
                    await sockio.sendall(self.client, socks.reply(code))
        return code

    async def established(self) -> int:
        await sockio.sendall(self.client, socks.reply(socks.SUCCEEDED))
        return socks.SUCCEEDED


def refusal(name: str, port: int, why: str) -> str:
    return f"exechost egress refused {name}:{port}: {why}"
