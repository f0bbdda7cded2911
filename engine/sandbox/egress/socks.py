"""SOCKS5 (RFC 1928) on the proxy's port, for clients that speak it (`curl --socks5-hostname`,
`socks5h://` URLs): CONNECT only, no authentication, and names sent as names — the proxy resolves them, as
for HTTP. A SOCKS client's first byte is 5; no HTTP request starts so, so one port serves both."""

from __future__ import annotations

import ipaddress
import socket

from engine.config.egress import BadName, normalize
from engine.sandbox.egress import sockio

VERSION = 5
METHOD = "SOCKS5"  # how its connections are recorded
NO_AUTH = 0
NO_ACCEPTABLE = 0xFF
CONNECT = 1
# Reply codes.
SUCCEEDED = 0
GENERAL_FAILURE = 1
NOT_ALLOWED = 2
HOST_UNREACHABLE = 4
CONNECTION_REFUSED = 5
COMMAND_UNSUPPORTED = 7
ADDRESS_UNSUPPORTED = 8


class SocksError(Exception):
    """The request cannot go on; `code` is the reply to send (None: the greeting failed, reply sent)."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Reader:
    def __init__(self, sock: socket.socket, initial: bytes) -> None:
        self.sock, self.buf = sock, initial

    async def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = await sockio.recv(self.sock, 4096)
            if not chunk:
                raise ConnectionError("the client went away mid-handshake")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def reply(code: int) -> bytes:
    """A reply with an all-zero bound address (the client has no use for ours)."""
    return bytes([VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def handshake(client: socket.socket, initial: bytes) -> tuple[str, int, bytes]:
    """Greeting and request: (normalised name, port, bytes the client sent past the request)."""
    r = _Reader(client, initial)
    version, count = await r.exactly(2)
    methods = await r.exactly(count)
    if version != VERSION or NO_AUTH not in methods:
        await sockio.sendall(client, bytes([VERSION, NO_ACCEPTABLE]))
        raise SocksError(None, "SOCKS5 without the no-authentication method")
    await sockio.sendall(client, bytes([VERSION, NO_AUTH]))
    version, command, _reserved, kind = await r.exactly(4)
    if version != VERSION:
        raise SocksError(GENERAL_FAILURE, f"SOCKS version {version} in the request")
    if kind == 1:
        host = str(ipaddress.IPv4Address(await r.exactly(4)))
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await r.exactly(16)))
    elif kind == 3:
        (length,) = await r.exactly(1)
        raw = await r.exactly(length)
        try:
            host = raw.decode("ascii")
        except UnicodeDecodeError:
            raise SocksError(GENERAL_FAILURE, "a SOCKS name that is not ASCII") from None
    else:
        raise SocksError(ADDRESS_UNSUPPORTED, f"SOCKS address type {kind}")
    port = int.from_bytes(await r.exactly(2), "big")
    if command != CONNECT:
        raise SocksError(COMMAND_UNSUPPORTED, f"SOCKS command {command} (only CONNECT)")
    if not 0 < port < 65536:
        raise SocksError(GENERAL_FAILURE, f"SOCKS port {port}")
    try:
        name = normalize(host)
    except BadName as exc:
        raise SocksError(GENERAL_FAILURE, str(exc)) from None
    return name, port, r.buf
