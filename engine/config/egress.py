"""Which names a sandbox may reach: `[sandbox.egress]` normalised (IDNA, case, trailing dot), its patterns,
the verdict of its lists (the proxy that applies it is engine.sandbox.egress).

A pattern is a name (`pypi.org`) or `*.` and a name (`*.pythonhosted.org`: every subdomain, not the name
itself), optionally with `:port` (`:*` for any port). Without a port, an `allow` entry admits what a URL
without a port means: plain `http://` requests to port 80, and tunnels (CONNECT, SOCKS5: TLS the proxy does
not read) to port 443 only, so `CONNECT name:80` needs `name:80`. An `http://` prefix admits plain requests
only (`http://name:8080`): what an allow-always of a plain request saves, so that approving a plain request
never admits an unread tunnel to its port. Without a port, a `deny` entry refuses every port. `deny` wins
over everything, and is checked again against every address a name resolves to
(engine.sandbox.egress.addresses); IP literals match only an entry that spells the same address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import idna

MODES = ("none", "allowlist", "open")
HTTP_PORT, TUNNEL_PORT = 80, 443  # what a port-less allow entry admits, for plain requests and tunnels
# `maxConnections`: proxy connections an agent's sandboxes hold at once. Enough for a package manager's
# parallel downloads and the bench's 200 at once; well under the proxy's 1,024 for every sandbox together.
MAX_CONNECTIONS = 256
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class BadName(ValueError):
    """Not a name a connection may be decided for (the proxy answers 400)."""


def ascii_number(text: str, digits: int) -> int | None:
    """`text` as a number when it is 1..`digits` ASCII digits, else None (`str.isdigit` also takes `¹`,
    `٣` and the like, which int() then refuses or reads as another number)."""
    if not 0 < len(text) <= digits or not all("0" <= c <= "9" for c in text):
        return None
    return int(text)


def normalize(name: str) -> str:
    """The comparable form of a host name: IDNA (UTS 46) A-labels, lowercase, no trailing dot; an IP
    literal in its canonical text. Raises BadName for anything else (a numeric last label, which a URL
    parser reads as an IPv4 address in another spelling; userinfo; empty labels; over-long names; an IPv6
    zone id, which `ipaddress` keeps as any text and compares as part of the address, while the kernel
    ignores it for a global address: `<own address>%1` would pass as another address than this host's)."""
    text = name.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        raise BadName(f"invalid host name {name!r} (an IPv6 zone id names no host)")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    text = text.rstrip(".") if text.endswith(".") and not text.endswith("..") else text
    if not text or len(text) > 253:
        raise BadName(f"invalid host name {name!r}")
    try:
        ascii_name = _a_labels(text)
    except UnicodeError:
        raise BadName(f"invalid host name {name!r} (not IDNA 2008)") from None
    labels = ascii_name.split(".")
    if len(ascii_name) > 253:
        raise BadName(f"invalid host name {name!r}")
    if any(not _LABEL.fullmatch(label) for label in labels):
        raise BadName(f"invalid host name {name!r}")
    last = labels[-1]
    if last.isdigit() or last.startswith("0x"):
        # 127.1, 2130706433, 0x7f.0.0.1: addresses in disguise, never names.
        raise BadName(f"invalid host name {name!r} (an address in another spelling)")
    return ascii_name


def _a_labels(text: str) -> str:
    """UTS 46 non-transitional processing, then IDNA 2008 A-labels: `straße.de` is xn--strae-oqa.de (what
    curl and browsers send), never strasse.de (IDNA 2003's mapping, another registrable domain), and a
    name IDNA 2008 refuses raises UnicodeError (idna.IDNAError). ASCII labels stay as they are, lowercased
    (`_LABEL` judges them: `_acme` names exist, which IDNA's STD3 rules refuse); an `xn--` label must
    decode, so no two spellings of one name and no invalid A-label pass."""
    if text.isascii():
        labels = text.lower().split(".")
    else:
        mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
        # (a full stop in another script, `。`, maps to `.`: a trailing one is the root, as `.` is)
        labels = (mapped[:-1] if mapped.endswith(".") and not mapped.endswith("..") else mapped).split(".")
    out = []
    for label in labels:
        if label.isascii():
            # (ulabel raises for an A-label IDNA 2008 would never produce)
            if label.startswith("xn--") and idna.alabel(idna.ulabel(label)).decode("ascii") != label:
                raise idna.IDNAError(f"{label!r} is not the A-label of its own U-label")
            out.append(label)
        else:
            out.append(idna.alabel(label).decode("ascii"))
    return ".".join(out)


@dataclass(frozen=True)
class Pattern:
    """One allow/deny entry: a normalised name or `*.` suffix, and its ports (None: any; `default`: none
    given, so 80 for a plain request and 443 for a tunnel)."""

    text: str
    name: str
    wildcard: bool
    ports: frozenset[int] | None
    default: bool = False
    plain: bool = False  # `http://…`: plain requests only, never a tunnel

    def matches(self, name: str, port: int, tunnel: bool) -> bool:
        """`tunnel`: a CONNECT or SOCKS5 connection (bytes the proxy does not read), not a plain request."""
        if self.plain and tunnel:
            return False
        if self.default:
            if port != (TUNNEL_PORT if tunnel else HTTP_PORT):
                return False
        elif self.ports is not None and port not in self.ports:
            return False
        if self.wildcard:
            return name.endswith("." + self.name)
        return name == self.name


def parse_pattern(text: str) -> Pattern:
    """`name`, `*.name`, either with `:port` or `:*`, optionally after `http://`; ValueError with the
    reason."""
    raw = text.strip()
    ports: frozenset[int] | None = None
    default = True
    plain = raw[:7].lower() == "http://"
    host = raw = raw[7:] if plain else raw
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"invalid egress entry {text!r}")
        host, rest = raw[: end + 1], raw[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"invalid egress entry {text!r}")
            ports, default = _ports(rest[1:], text), False
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
        ports, default = _ports(port_text, text), False
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise ValueError(f"invalid egress entry {text!r}: `*` only as a leading `*.`")
    try:
        name = normalize(host)
    except BadName as exc:
        raise ValueError(f"invalid egress entry {text!r}: {exc}") from None
    if wildcard and ("." not in name or _is_ip(name)):
        # `*.com` would admit a whole top-level domain; `*.1.2.3.4` is no name at all.
        raise ValueError(f"invalid egress entry {text!r}: a wildcard needs a domain of two labels or more")
    return Pattern(text.strip(), name, wildcard, ports, default, plain)


def _ports(text: str, entry: str) -> frozenset[int] | None:
    if text == "*":
        return None
    port = ascii_number(text, 5)
    if port is None or not 0 < port < 65536:
        raise ValueError(f"invalid egress entry {entry!r}: bad port {text!r}")
    return frozenset({port})


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class EgressPolicy:
    """One agent's `[sandbox.egress]`, parsed."""

    mode: str = "none"
    allow: tuple[Pattern, ...] = ()
    deny: tuple[Pattern, ...] = ()
    ask: bool = True
    resolve: Mapping[str, str] = field(default_factory=dict)  # normalised name -> address text
    max_connections: int = MAX_CONNECTIONS

    @classmethod
    def from_config(cls, raw: Mapping[str, object] | None) -> EgressPolicy:
        raw = dict(raw or {})
        pairs = _table(raw.get("resolve"))
        resolve = {normalize(str(k)): str(ipaddress.ip_address(str(v))) for k, v in pairs}
        return cls(
            mode=str(raw.get("mode", "none")),
            allow=tuple(parse_pattern(str(p)) for p in _list(raw.get("allow"))),
            # A port-less deny entry refuses every port (one that admitted 8443 would be no deny at all),
            # and an `http://` one tunnels too.
            deny=tuple(
                replace(p, default=False, plain=False)
                for p in map(parse_pattern, map(str, _list(raw.get("deny"))))
            ),
            ask=bool(raw.get("ask", True)),
            resolve=resolve,
            max_connections=int(str(raw.get("max_connections", MAX_CONNECTIONS))),
        )


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _table(value: object) -> list[tuple[object, object]]:
    return list(value.items()) if isinstance(value, Mapping) else []


@dataclass(frozen=True)
class Verdict:
    """`allow`, `deny` or `ask`, and the rule that said so (shown in the 403 body and the history)."""

    action: str
    rule: str


def first_match(patterns: Iterable[Pattern], name: str, port: int, tunnel: bool) -> Pattern | None:
    return next((p for p in patterns if p.matches(name, port, tunnel)), None)


def decide(
    policy: EgressPolicy, name: str, port: int, approved: Iterable[Pattern] = (), *, tunnel: bool = True
) -> Verdict:
    """The verdict of the lists alone: deny, then allow (config, then what the operator approved for
    good), then ask or refuse. `name` is normalised; `tunnel`: CONNECT or SOCKS5, not a plain request."""
    if policy.mode == "none":
        return Verdict("deny", "egress mode is none")
    hit = first_match(policy.deny, name, port, tunnel)
    if hit is not None:
        return Verdict("deny", f"deny entry {hit.text!r}")
    if policy.mode == "open":
        return Verdict("allow", "egress mode is open")
    hit = first_match(policy.allow, name, port, tunnel)
    if hit is not None:
        return Verdict("allow", f"allow entry {hit.text!r}")
    hit = first_match(approved, name, port, tunnel)
    if hit is not None:
        return Verdict("allow", f"approved entry {hit.text!r}")
    why = f"{name}:{port} is not in the allowlist"
    bare = next((p for p in policy.allow if p.default and p.matches(name, port, not tunnel)), None)
    if bare is not None:  # the name is there without a port: say what that admits
        what = "tunnels (CONNECT, SOCKS5) to 443 and plain http:// to 80"
        why += f" (entry {bare.text!r} admits {what} only; {approval_entry(name, port)!r} admits this)"
    if policy.ask:
        return Verdict("ask", why)
    return Verdict("deny", f"{why} (ask = false)")


def approval_entry(name: str, port: int, tunnel: bool = True) -> str:
    """What an allow-always saves: exactly the name and port that were asked for (`name:80` never opens
    443 too), and for a plain request `http://name:port`, which admits no tunnel (a CONNECT to port 80 is
    plain HTTP the proxy does not read)."""
    host = f"[{name}]" if ":" in name else name
    return f"{host}:{port}" if tunnel else f"http://{host}:{port}"
