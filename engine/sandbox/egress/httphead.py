"""The HTTP side of the egress proxy: a forward proxy's request head read, checked and rewritten.

Only an absolute `http://` URL or `CONNECT host:port` is a proxy request. The head is parsed by what it may
hold, not by what it may not: every line ends in CRLF (a bare LF or CR, which a lenient origin reads as a
line end and the proxy would not, is refused), the method and header names are tokens, the request target is
printable ASCII, header values hold no control characters, and numbers (ports, Content-Length) are ASCII
digits. The authority is parsed strictly (no userinfo, no `\\` or `%`, brackets for IPv6), a `Host` header
must name the same host, and the head sent upstream is rebuilt: origin-form path, the Host from the URL, no
hop-by-hop or proxy headers, `Connection: close` (one request per proxied connection).
"""

from __future__ import annotations

import socket
import string

from engine.config.egress import BadName, ascii_number, normalize
from engine.sandbox.egress import sockio

MAX_HEAD = 64 * 1024

# Never forwarded: hop-by-hop, the proxy's own, and Host (rewritten from the URL).
HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "host",
}


class BadRequest(Exception):
    """Not a proxy request this proxy serves (answered 400, recorded)."""


_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_TARGET = frozenset(chr(c) for c in range(0x21, 0x7F))  # printable ASCII, no space


async def read_head(client: socket.socket, buf: bytes = b"") -> tuple[bytes, bytes]:
    """(head, the bytes after it) from `buf` (what was read already) and the socket; b"" when closed. A
    bare LF or CR is refused as soon as it arrives (it cannot end a head this proxy reads)."""
    if not buf:
        return b"", b""
    while b"\r\n\r\n" not in buf:
        check_line_ends(buf[:-1] if buf.endswith(b"\r") else buf)
        if len(buf) > MAX_HEAD:
            raise BadRequest(f"request head larger than {MAX_HEAD // 1024} KiB")
        chunk = await sockio.recv(client, 16384)
        if not chunk:
            return b"", b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def check_line_ends(data: bytes) -> None:
    """Every LF is preceded by a CR and every CR followed by an LF."""
    pairs = data.count(b"\r\n")
    if data.count(b"\n") != pairs or data.count(b"\r") != pairs:
        raise BadRequest("a bare LF or CR in the request head (lines end with CRLF)")


def split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if not authority or "@" in authority or any(c in authority for c in " \t\\%"):
        raise BadRequest(f"invalid authority {authority!r}")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadRequest(f"invalid authority {authority!r}")
        host, rest = authority[: end + 1], authority[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    else:
        host, sep, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "")
        if sep and ":" in host:
            raise BadRequest(f"invalid authority {authority!r} (an IPv6 address goes in brackets)")
    if port_text is None:
        raise BadRequest(f"invalid authority {authority!r}")
    if port_text:
        port = ascii_number(port_text, 5)
        if port is None or not 0 < port < 65536:
            raise BadRequest(f"invalid port in {authority!r}")
    elif default_port is None:
        raise BadRequest(f"CONNECT needs host:port, got {authority!r}")
    else:
        port = default_port
    try:
        name = normalize(host)
    except BadName as exc:
        raise BadRequest(str(exc)) from None
    return name, port


def parse(head: bytes) -> tuple[str, str, int, bytes, int | None]:
    """(method, name, port, the head to send upstream: b"" for CONNECT, how many body bytes follow it:
    None for CONNECT, whose tunnel carries anything). A plain request's body is its Content-Length and
    nothing more: bytes after it (a second, pipelined request naming another Host) never go upstream."""
    check_line_ends(head)
    text = head.decode("latin-1")  # (decodes every byte; what may stand where is checked below)
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest("malformed request line")
    method, target, version = parts
    if not method or not all("A" <= c <= "Z" for c in method):
        raise BadRequest(f"invalid method {method!r}")
    if not target or not set(target) <= _TARGET:
        raise BadRequest("the request target is not printable ASCII")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise BadRequest("malformed header line")
        value = value.strip(" \t")
        if any((c < " " and c != "\t") or "\x7f" <= c <= "\x9f" for c in value):  # C0, DEL, C1
            raise BadRequest(f"a control character in the {name} header")
        headers.append((name, value))
    if method == "CONNECT":
        host, port = split_authority(target, None)
        return method, host, port, b"", None
    if not target.lower().startswith("http://"):
        if target.lower().startswith("https://"):
            raise BadRequest("https:// goes through CONNECT (set https_proxy)")
        raise BadRequest("this is a proxy: absolute http:// URLs or CONNECT only")
    rest = target[len("http://") :]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    host, port = split_authority(authority, 80)
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    for key, value in headers:
        if key.lower() == "host":
            try:
                given, _ = split_authority(value, 80)
            except BadRequest:
                raise BadRequest(f"Host header {value!r} is not a host") from None
            if given != host:  # (its port is the URL's anyway: the Host sent upstream is rewritten)
                raise BadRequest(f"Host header {value!r} names another host than the URL")
    body = _body_length(headers)
    shown = host if ":" not in host else f"[{host}]"
    out = [f"{method} {path} {version}", f"Host: {shown}" + (f":{port}" if port != 80 else "")]
    out += [f"{k}: {v}" for k, v in headers if k.lower() not in HOP]
    out.append("Connection: close")
    return method, host, port, ("\r\n".join(out) + "\r\n\r\n").encode("latin-1"), body


def _body_length(headers: list[tuple[str, str]]) -> int:
    """A plain request's body size: its Content-Length (all equal), else 0. A chunked body's end is known
    only by parsing it: such a request goes through CONNECT (https) instead."""
    if any(k.lower() == "transfer-encoding" for k, _ in headers):
        raise BadRequest("a chunked request body is not proxied over plain http (use https)")
    lengths = {v for k, v in headers if k.lower() == "content-length"}
    if not lengths:
        return 0
    length = ascii_number(next(iter(lengths)), 18) if len(lengths) == 1 else None
    if length is None:
        raise BadRequest("conflicting or invalid Content-Length")
    return length


async def answer(client: socket.socket, code: int, reason: str, body: str) -> None:
    data = (body + "\n").encode()
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nX-Proxy-Error: {reason}\r\nConnection: close\r\n\r\n"
    )
    await sockio.sendall(client, head.encode() + data)
