"""Which names a sandbox may reach: `[sandbox.egress]` normalised (IDNA, case, trailing dot), its patterns,
the verdict of its lists (the proxy that applies it is engine.sandbox.egress).

A pattern is a name (`pypi.org`) or `*.` and a name (`*.pythonhosted.org`: every subdomain, not the name
itself), optionally with `:port` (`:*` for any port); without a port it admits 80 and 443 only. `deny` wins
over everything; IP literals match only an entry that spells the same address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MODES = ("none", "allowlist", "open")
DEFAULT_PORTS = frozenset({80, 443})
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class BadName(ValueError):
    """Not a name a connection may be decided for (the proxy answers 400)."""


def normalize(name: str) -> str:
    """The comparable form of a host name: IDNA (UTS 46) A-labels, lowercase, no trailing dot; an IP
    literal in its canonical text. Raises BadName for anything else (a numeric last label, which a URL
    parser reads as an IPv4 address in another spelling; userinfo; empty labels; over-long names)."""
    text = name.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    text = text.rstrip(".") if text.endswith(".") and not text.endswith("..") else text
    if not text or len(text) > 253:
        raise BadName(f"invalid host name {name!r}")
    try:
        ascii_name = text.encode("idna").decode("ascii").lower() if not text.isascii() else text.lower()
    except UnicodeError:
        raise BadName(f"invalid host name {name!r} (not IDNA)") from None
    labels = ascii_name.split(".")
    if any(not _LABEL.fullmatch(label) for label in labels):
        raise BadName(f"invalid host name {name!r}")
    last = labels[-1]
    if last.isdigit() or last.startswith("0x"):
        # 127.1, 2130706433, 0x7f.0.0.1: addresses in disguise, never names.
        raise BadName(f"invalid host name {name!r} (an address in another spelling)")
    return ascii_name


@dataclass(frozen=True)
class Pattern:
    """One allow/deny entry: a normalised name or `*.` suffix, and its ports (None: any)."""

    text: str
    name: str
    wildcard: bool
    ports: frozenset[int] | None

    def matches(self, name: str, port: int) -> bool:
        if self.ports is not None and port not in self.ports:
            return False
        if self.wildcard:
            return name.endswith("." + self.name)
        return name == self.name


def parse_pattern(text: str) -> Pattern:
    """`name`, `*.name`, either with `:port` or `:*`; ValueError with the reason."""
    raw = text.strip()
    ports: frozenset[int] | None = DEFAULT_PORTS
    host = raw
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"invalid egress entry {text!r}")
        host, rest = raw[: end + 1], raw[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"invalid egress entry {text!r}")
            ports = _ports(rest[1:], text)
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
        ports = _ports(port_text, text)
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
    return Pattern(raw, name, wildcard, ports)


def _ports(text: str, entry: str) -> frozenset[int] | None:
    if text == "*":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"invalid egress entry {entry!r}: bad port {text!r}")
    return frozenset({int(text)})


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

    @classmethod
    def from_config(cls, raw: Mapping[str, object] | None) -> EgressPolicy:
        raw = dict(raw or {})
        pairs = _table(raw.get("resolve"))
        resolve = {normalize(str(k)): str(ipaddress.ip_address(str(v))) for k, v in pairs}
        return cls(
            mode=str(raw.get("mode", "none")),
            allow=tuple(parse_pattern(str(p)) for p in _list(raw.get("allow"))),
            deny=tuple(parse_pattern(str(p)) for p in _list(raw.get("deny"))),
            ask=bool(raw.get("ask", True)),
            resolve=resolve,
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


def first_match(patterns: Iterable[Pattern], name: str, port: int) -> Pattern | None:
    return next((p for p in patterns if p.matches(name, port)), None)


def decide(policy: EgressPolicy, name: str, port: int, approved: Iterable[Pattern] = ()) -> Verdict:
    """The verdict of the lists alone: deny, then allow (config, then what the operator approved for
    good), then ask or refuse. `name` is normalised."""
    if policy.mode == "none":
        return Verdict("deny", "egress mode is none")
    hit = first_match(policy.deny, name, port)
    if hit is not None:
        return Verdict("deny", f"deny entry {hit.text!r}")
    if policy.mode == "open":
        return Verdict("allow", "egress mode is open")
    hit = first_match(policy.allow, name, port)
    if hit is not None:
        return Verdict("allow", f"allow entry {hit.text!r}")
    hit = first_match(approved, name, port)
    if hit is not None:
        return Verdict("allow", f"approved entry {hit.text!r}")
    if policy.ask:
        return Verdict("ask", f"{name}:{port} is not in the allowlist")
    return Verdict("deny", f"{name}:{port} is not in the allowlist (ask = false)")


def approval_entry(name: str, port: int) -> str:
    """What an allow-always saves: the name (its default ports), or `name:port` for another port."""
    host = f"[{name}]" if ":" in name else name
    return host if port in DEFAULT_PORTS else f"{host}:{port}"
