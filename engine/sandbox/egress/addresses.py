"""Where a decided name may be connected to: resolved here (never in the sandbox), `resolve` first, and only
public addresses unless the operator mapped the name explicitly. Every address a name resolves to is checked
(public, and named by no `deny` entry) and the proxy connects to exactly the address checked here (pinned),
so a second lookup can never rebind the name to another host.

"Public" is an allowlist: an address is public only when, with any IPv4 it carries in an IPv6 spelling
(mapped, compatible, translated, NAT64) taken for itself, it is globally routable unicast, lies in no
special-purpose block (IANA's registries, whatever this Python's `ipaddress` knows), and is none of this
host's own addresses. Anything new or odd is therefore refused until it is known to be public.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.config.egress import Pattern, first_match

RESOLVE_TIMEOUT_SEC = 5.0
# Lookups run in pools of their own, never the loop's default executor that the rest of the gateway's
# blocking work shares: a DNS server that never answers keeps a thread until the libc resolver gives up,
# and the timeout above only stops waiting for it. Each principal (an agent, or the shared sandboxes
# together) has its own lane: its own threads and its own cap of lookups in flight, counted until the
# thread is free again. So names that never answer hold only their own principal's threads and places,
# and past the cap that principal's next name is refused at once; no other principal's lookup ever waits
# for them or is refused because of them. A lane idle for LANE_IDLE_SEC is dropped (its threads end) at
# the next lookup of any principal: kept that long, a burst of lookups reuses its threads instead of making
# a pool each time it runs dry.
RESOLVER_THREADS = 8  # per principal
MAX_LOOKUPS_IN_FLIGHT = 64  # per principal
LANE_IDLE_SEC = 60.0
_lanes: dict[str, _Lane] = {}
_lanes_lock = threading.Lock()  # lanes are counted down in their worker threads, whichever loop waits
_in_flight = 0  # every principal's together (status, tests)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPv6Address = ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# IANA IPv4 special-purpose registry, every entry (also those it calls globally reachable: anycast
# infrastructure such as 192.0.0.9 or AS112 is nothing a sandbox needs), and the multicast/reserved rest.
SPECIAL_V4 = tuple(
    _V4(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "192.175.48.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)
GLOBAL_UNICAST_V6 = _V6("2000::/3")
# Inside 2000::/3, IANA's IPv6 special-purpose blocks (6to4 and Teredo tunnel to addresses judged nowhere).
SPECIAL_V6 = tuple(
    _V6(n)
    for n in (
        "2001::/23",
        "2001:db8::/32",
        "2002::/16",
        "2620:4f:8000::/48",
        "3fff::/20",
    )
)
_MAPPED = _V6("::ffff:0:0/96")
_COMPATIBLE = _V6("::/96")
_TRANSLATED = _V6("::ffff:0:0:0/96")
_NAT64 = _V6("64:ff9b::/96")


class Refused(Exception):
    """No address this name may be connected to. str() is what the sandbox is told, which never names an
    address it did not give itself; `detail` is what the history records (the addresses, for the operator)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


@dataclass(frozen=True)
class Target:
    """A checked address to connect to, and how it was found."""

    family: int
    address: str
    port: int
    via: str  # "resolve" (the config's map), "dns", "literal"


def carried_ipv4(ip: IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 spelling stands for: ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d
    (translated), ::a.b.c.d (compatible, ::1 and :: included) and 64:ff9b::a.b.c.d (NAT64)."""
    if any(ip in net for net in (_MAPPED, _TRANSLATED, _COMPATIBLE, _NAT64)):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def canonical(ip: IPAddress) -> IPAddress:
    """The address judged: the IPv4 an IPv6 spelling carries, else the address itself without a zone id
    (which `ipaddress` compares as part of the address, and the kernel ignores for a global one)."""
    if isinstance(ip, ipaddress.IPv6Address):
        return carried_ipv4(ip) or ipaddress.IPv6Address(int(ip))
    return ip


def public(ip: IPAddress, own: Iterable[IPAddress | IPNetwork] = ()) -> bool:
    """Globally routable unicast, in no special-purpose block, and not one of `own` (this host's: its
    addresses, or the prefixes it delivers locally, `own_networks`)."""
    ip = canonical(ip)
    for mine in own:
        if ip == mine if not isinstance(mine, _V4 | _V6) else ip in mine:
            return False
    if isinstance(ip, ipaddress.IPv4Address):
        if any(ip in net for net in SPECIAL_V4) or ip == ipaddress.IPv4Address("255.255.255.255"):
            return False
    elif ip not in GLOBAL_UNICAST_V6 or any(ip in net for net in SPECIAL_V6) or ip.is_site_local:
        return False
    odd = ip.is_multicast, ip.is_unspecified, ip.is_loopback, ip.is_link_local, ip.is_private, ip.is_reserved
    return bool(ip.is_global) and not any(odd)


def own_addresses() -> set[IPAddress]:
    """This host's interface addresses (in the gateway's network namespace), read afresh each time: an
    address a DHCP lease or a VPN adds is refused from that moment. (The kernel builds /proc/net/fib_trie on
    each read, ~0.2 ms: `resolve` reads it in a worker thread, alongside the DNS lookup.)"""
    out: set[IPAddress] = set()
    with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii") as f:
        for line in f:
            text = line.split(" ", 1)[0]
            if len(text) == 32:
                out.add(ipaddress.IPv6Address(int(text, 16)))
    with contextlib.suppress(OSError), open("/proc/net/fib_trie", encoding="ascii") as f:
        last = ""
        for line in f:
            item = line.strip()
            if item.startswith("|-- "):
                last = item[4:]
            elif item == "/32 host LOCAL" and last:
                with contextlib.suppress(ValueError):
                    out.add(ipaddress.IPv4Address(last))
    return out


RTF_LOCAL = 0x80000000  # /proc/net/ipv6_route: a route of the local table (delivered to this host)


def own_networks() -> list[IPAddress | IPNetwork]:
    """Every destination this host delivers to itself: its interface addresses, and each prefix of a
    `local` route (`ip route add local 2001:db8::/64 dev lo`, AnyIP: the host answers every address in it
    though no interface lists them) — the kernel's local routing table for IPv4 (fib_trie, any length) and
    IPv6 (ipv6_route's RTF_LOCAL entries), read afresh each time."""
    out: list[IPAddress | IPNetwork] = list(own_addresses())
    with contextlib.suppress(OSError), open("/proc/net/ipv6_route", encoding="ascii") as f:
        for line in f:
            fields = line.split()
            with contextlib.suppress(ValueError, IndexError):
                if int(fields[8], 16) & RTF_LOCAL:
                    out.append(_V6((int(fields[0], 16), int(fields[1], 16))))
    with contextlib.suppress(OSError), open("/proc/net/fib_trie", encoding="ascii") as f:
        last = ""
        for line in f:
            item = line.strip()
            if item.startswith("|-- "):
                last = item[4:]
            elif item.startswith("/") and item.endswith(" host LOCAL") and last:
                with contextlib.suppress(ValueError):
                    out.append(_V4(f"{last}/{item[1:].split(' ', 1)[0]}", strict=False))
    return out


async def resolve(
    name: str,
    port: int,
    mapping: Mapping[str, str],
    deny: Iterable[Pattern] = (),
    *,
    tunnel: bool = True,
    principal: str = "",
) -> Target:
    """The one address to connect to for `name` (normalised): the `resolve` map's (any address: the
    operator chose it), an IP literal's own (public only), else DNS's (every answer public, else refused:
    a name with one private answer is a rebinding attempt or a mistake). Whichever way, an address a
    `deny` entry names refuses the name (`deny = ["1.1.1.1"]` is not undone by a name that resolves there).
    `principal`: whose lane the lookup takes (see RESOLVER_THREADS)."""
    deny = tuple(deny)
    mapped = mapping.get(name)
    if mapped is not None:
        ip = ipaddress.ip_address(mapped)
        _check_deny(name, [ip], port, deny, tunnel)
        return _target(ip, port, "resolve")
    try:
        literal: IPAddress | None = ipaddress.ip_address(name)
    except ValueError:
        literal = None
    loop = asyncio.get_running_loop()
    if literal is not None:
        _check_deny(name, [literal], port, deny, tunnel)
        if not public(literal, await loop.run_in_executor(None, own_networks)):
            raise Refused(f"{name} is not a public address (map a name to it in `resolve` to allow it)")
        return _target(literal, port, "literal")
    own = loop.run_in_executor(None, own_networks)  # (never fails: unreadable files give no addresses)
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SEC):
            infos = await _lookup(loop, name, port, principal)
    except (OSError, TimeoutError) as exc:
        raise Refused(f"{name} does not resolve ({exc.__class__.__name__}: {exc})") from None
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    if not addresses:
        raise Refused(f"{name} has no address")
    _check_deny(name, addresses, port, deny, tunnel)
    mine = await own
    bad = sorted({str(a) for a in addresses if not public(a, mine)})
    if bad:
        raise Refused(
            f"{name} resolves to a non-public address (a `resolve` entry maps a name to one on purpose)",
            f"{name} resolves to {', '.join(bad)}, which is not public",
        )
    return _target(addresses[0], port, "dns")


def system_lookup(name: str, port: int) -> list[tuple]:
    """The system resolver's answer for a TCP connect (blocking: run in the resolver pool)."""
    return socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)


@dataclass
class _Lane:
    """One principal's lookups: its threads, and how many of its lookups hold one or wait for one."""

    pool: concurrent.futures.ThreadPoolExecutor
    in_flight: int = 0
    idle_since: float = field(default_factory=time.monotonic)


async def _lookup(loop: asyncio.AbstractEventLoop, name: str, port: int, principal: str) -> list[tuple]:
    """getaddrinfo in `principal`'s own lane (see RESOLVER_THREADS)."""
    lane = _take_place(principal)
    abandoned = threading.Event()

    def run() -> list[tuple]:
        try:
            # Still queued when its caller stopped waiting (the timeout): never started, so a lane's
            # hanging names hold at most its threads, not its whole queue, once their callers gave up.
            return [] if abandoned.is_set() else system_lookup(name, port)
        finally:
            _leave(principal, lane)

    try:
        future = loop.run_in_executor(lane.pool, run)
    except BaseException:
        _leave(principal, lane)
        raise
    try:
        return await asyncio.shield(future)  # (the work item itself is never cancelled: it counts down)
    except asyncio.CancelledError:
        abandoned.set()
        raise


def _take_place(principal: str) -> _Lane:
    global _in_flight
    with _lanes_lock:
        _drop_idle_lanes(time.monotonic() - LANE_IDLE_SEC)
        lane = _lanes.get(principal)
        if lane is None:
            pool = concurrent.futures.ThreadPoolExecutor(RESOLVER_THREADS, thread_name_prefix="egress-dns")
            lane = _lanes[principal] = _Lane(pool)
        if lane.in_flight >= MAX_LOOKUPS_IN_FLIGHT:
            raise OSError(
                f"{lane.in_flight} lookups of {principal or 'this sandbox'} are still waiting for DNS"
            )
        lane.in_flight += 1
        _in_flight += 1
        return lane


def _leave(principal: str, lane: _Lane) -> None:
    global _in_flight
    with _lanes_lock:
        lane.in_flight -= 1
        _in_flight -= 1
        if lane.in_flight == 0:
            lane.idle_since = time.monotonic()


def _drop_idle_lanes(before: float) -> None:
    """(under _lanes_lock) End the lanes idle since before `before`."""
    for principal, lane in list(_lanes.items()):
        if lane.in_flight == 0 and lane.idle_since <= before:
            del _lanes[principal]
            lane.pool.shutdown(wait=False)


def in_flight(principal: str) -> int:
    """Lookups of `principal` holding or waiting for one of its threads."""
    with _lanes_lock:
        lane = _lanes.get(principal)
        return lane.in_flight if lane is not None else 0


def _check_deny(
    name: str, found: list[IPAddress], port: int, deny: tuple[Pattern, ...], tunnel: bool
) -> None:
    for ip in found:
        for spelling in {str(ip), str(canonical(ip))}:
            hit = first_match(deny, spelling, port, tunnel)
            if hit is not None:
                raise Refused(
                    f"an address of {name} is denied",
                    f"{name} resolves to {ip}, which deny entry {hit.text!r} names",
                )


def _target(ip: IPAddress, port: int, via: str) -> Target:
    """Connect to what was checked: a mapped ::ffff:a.b.c.d goes out as the IPv4 it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return Target(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, str(ip), port, via)
