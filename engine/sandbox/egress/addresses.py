"""Where a decided name may be connected to: resolved here (never in the sandbox), `resolve` first, and only
public addresses unless the operator mapped the name explicitly. The proxy connects to exactly the address
checked here (pinned), so a second lookup can never rebind the name to another host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

RESOLVE_TIMEOUT_SEC = 5.0
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """No address this name may be connected to; str() names why (the 403 body)."""


@dataclass(frozen=True)
class Target:
    """A checked address to connect to, and how it was found."""

    family: int
    address: str
    port: int
    via: str  # "resolve" (the config's map), "dns", "literal"


def public(ip: IPAddress) -> bool:
    """A globally routable unicast address: not loopback, private, link-local, CGNAT, documentation,
    reserved, multicast or unspecified; an IPv4-mapped/6to4/Teredo IPv6 address is judged by its IPv4."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            return public(inner)
        if ip in ipaddress.IPv6Network("64:ff9b::/96"):  # NAT64 carries an IPv4 address
            return public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip.is_link_local or ip.is_private:
        return False
    return bool(ip.is_global)


async def resolve(name: str, port: int, mapping: Mapping[str, str]) -> Target:
    """The one address to connect to for `name` (normalised): the `resolve` map's (any address: the
    operator chose it), an IP literal's own (public only), else DNS's (every answer public, else refused:
    a name with one private answer is a rebinding attempt or a mistake)."""
    mapped = mapping.get(name)
    if mapped is not None:
        ip = ipaddress.ip_address(mapped)
        return Target(_family(ip), str(ip), port, "resolve")
    try:
        literal: IPAddress | None = ipaddress.ip_address(name)
    except ValueError:
        literal = None
    if literal is not None:
        if not public(literal):
            raise Refused(f"{name} is not a public address (map a name to it in `resolve` to allow it)")
        return Target(_family(literal), str(literal), port, "literal")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SEC):
            infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, TimeoutError) as exc:
        raise Refused(f"{name} does not resolve ({exc.__class__.__name__}: {exc})") from None
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    if not addresses:
        raise Refused(f"{name} has no address")
    bad = [str(a) for a in addresses if not public(a)]
    if bad:
        raise Refused(
            f"{name} resolves to {', '.join(sorted(set(bad)))}, which is not public (a `resolve` entry "
            "maps a name to a private address on purpose)"
        )
    first = addresses[0]
    return Target(_family(first), str(first), port, "dns")


def _family(ip: IPAddress) -> int:
    return socket.AF_INET6 if ip.version == 6 else socket.AF_INET
