"""Grants: an allow-always with limits (a duration, a number of uses, one session), kept apart from
exec-approvals.json so OpenClaw's reader of that file never sees a field it does not know.

A grant stores exactly what allow-always would have saved (the inner executables' paths or the exact
command's bound `=command:` hash) and matches the same way, until it expires or is used up. The file is
`<state>/exec-grants.json`: 0600, written atomically under `<file>.lock`; every use is counted under that
lock, so two runs at once can never exceed the limit, also across processes.

A grant's id is chosen when the operator decides (`new_grant_id`), and the decision is journaled with it
before the grant is made (`ensure`, idempotent by id): a gateway killed in between makes the same grant
again, never a second one. The ids of grants that ended (used up, expired, revoked) are kept as `spent`,
so a decision taken up again after a crash never brings back a grant that already ran out.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from engine import statefs
from engine.approvals.schema import ApprovalsFileError
from engine.commands.allowlist import ALLOW_ALWAYS_SOURCE, AllowlistEntry
from engine.errors import InvalidInput

__all__ = [
    "EGRESS_PREFIX",
    "GRANTS_NAME",
    "GRANT_PREFIX",
    "Grant",
    "GrantLimits",
    "GrantStore",
    "new_grant_id",
    "parse_duration",
]

GRANT_PREFIX = "grant:"  # the entry ids a grant's patterns carry in a decision
GRANTS_NAME = "exec-grants.json"  # in the state dir, apart from exec-approvals.json (which OpenClaw reads)
EGRESS_PREFIX = "egress:"  # a grant's pattern for a sandbox's egress name (never a command's executable)
MAX_GRANT_MS = 30 * 24 * 3600 * 1000
MAX_USES = 1_000_000
MAX_SPENT = 4096  # ids of ended grants remembered (a restored decision naming one never makes it again)
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNIT_MS = {"": 60_000, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def new_grant_id() -> str:
    """A grant's id, chosen with the decision (ApprovalManager.resolve) and journaled before it is made."""
    return uuid.uuid4().hex[:12]


def parse_duration(text: str) -> int:
    """`30m`, `8h`, `2d`, `90s` (a bare number is minutes) → milliseconds; at most 30 days."""
    match = _DURATION.match(text or "")
    if match is None:
        raise InvalidInput(f"invalid duration {text!r} (e.g. 30m, 8h, 2d)")
    ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if ms <= 0 or ms > MAX_GRANT_MS:
        raise InvalidInput(f"duration {text!r} must be more than 0 and at most 30d")
    return ms


@dataclass(frozen=True)
class GrantLimits:
    """What the operator chose in the approve dialog or with `approve … --for/--uses/--session`."""

    duration_ms: int | None = None
    uses: int | None = None
    session_only: bool = False

    def __post_init__(self) -> None:
        if self.duration_ms is not None and not 0 < self.duration_ms <= MAX_GRANT_MS:
            raise InvalidInput("a grant's duration must be more than 0 and at most 30d")
        if self.uses is not None and not 0 < self.uses <= MAX_USES:
            raise InvalidInput("a grant's uses must be at least 1")

    @property
    def limited(self) -> bool:
        return self.duration_ms is not None or self.uses is not None or self.session_only

    def to_json(self) -> dict[str, Any]:
        return {"forMs": self.duration_ms, "uses": self.uses, "sessionOnly": self.session_only}

    @classmethod
    def from_json(cls, raw: Any) -> GrantLimits | None:
        """The wire form (`{"forMs", "uses", "sessionOnly"}`); None when absent. Raises InvalidInput."""
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise InvalidInput("grant must be an object")
        duration, uses = raw.get("forMs"), raw.get("uses")
        for name, value in (("forMs", duration), ("uses", uses)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise InvalidInput(f"grant.{name} must be an integer")
        limits = cls(duration, uses, bool(raw.get("sessionOnly")))
        return limits if limits.limited else None

    def describe(self) -> str:
        parts = []
        if self.duration_ms is not None:
            parts.append(f"for {_span(self.duration_ms)}")
        if self.uses is not None:
            parts.append(f"{self.uses} use{'s' if self.uses != 1 else ''}")
        if self.session_only:
            parts.append("this session only")
        return ", ".join(parts)


@dataclass(frozen=True)
class Grant:
    id: str
    agent_id: str
    patterns: tuple[str, ...]
    command: str  # what was approved (shown in listings)
    created_at_ms: int
    expires_at_ms: int | None
    uses_left: int | None
    session_key: str | None  # set = only this session's runs match
    granted_by: str = "operator"

    def live(self, now_ms: int) -> bool:
        return (self.expires_at_ms is None or now_ms < self.expires_at_ms) and (
            self.uses_left is None or self.uses_left > 0
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["patterns"] = list(self.patterns)
        return {_camel(k): v for k, v in out.items()}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Grant:
        return cls(
            id=str(raw["id"]),
            agent_id=str(raw["agentId"]),
            patterns=tuple(str(p) for p in raw["patterns"]),
            command=str(raw.get("command", "")),
            created_at_ms=int(raw["createdAtMs"]),
            expires_at_ms=None if raw.get("expiresAtMs") is None else int(raw["expiresAtMs"]),
            uses_left=None if raw.get("usesLeft") is None else int(raw["usesLeft"]),
            session_key=None if raw.get("sessionKey") is None else str(raw["sessionKey"]),
            granted_by=str(raw.get("grantedBy") or "operator"),
        )

    def left(self, now_ms: int | None = None) -> str:
        """`12m left, 3 uses left`: what the Policy pane and `approvals grants` show."""
        now = _now_ms() if now_ms is None else now_ms
        parts = []
        if self.expires_at_ms is not None:
            parts.append(f"{_span(max(0, self.expires_at_ms - now))} left")
        if self.uses_left is not None:
            parts.append(f"{self.uses_left} use{'s' if self.uses_left != 1 else ''} left")
        if self.session_key:
            parts.append(f"session {self.session_key}")
        return ", ".join(parts) or "no limit"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _span(ms: int) -> str:
    secs = ms // 1000
    if secs >= 86_400:
        return f"{secs // 86_400}d{secs % 86_400 // 3600}h"
    if secs >= 3600:
        return f"{secs // 3600}h{secs % 3600 // 60:02d}m"
    if secs >= 60:
        return f"{secs // 60}m"
    return f"{secs}s"


def _now_ms() -> int:
    return int(time.time() * 1000)


class GrantStore:
    """`<state>/exec-grants.json`. Reads are cached by the file's stat; every write holds the lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cache: tuple[tuple[int, ...], tuple[Grant, ...]] | None = None

    # -- reading

    def _read(self) -> tuple[Grant, ...]:
        return self._read_all()[0]

    def _read_all(self, *, writing: bool = False) -> tuple[tuple[Grant, ...], tuple[str, ...]]:
        """(grants, ids of grants that ended). A damaged file grants nothing (fail closed); one about to
        be written raises instead, so it is never overwritten: its spent list is what keeps an ended
        grant from being made again by a restored decision."""
        text = statefs.read_text(self.path)
        if not text:
            return (), ()
        try:
            raw = json.loads(text)
            grants = tuple(Grant.from_json(g) for g in raw.get("grants") or [])
            spent = tuple(str(i) for i in raw.get("spent") or [])
            return grants, spent
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if writing:
                where = f"line {exc.lineno}: " if isinstance(exc, json.JSONDecodeError) else ""
                raise ApprovalsFileError(
                    self.path,
                    f"{where}cannot be read ({exc}); it is left as it is and no grant is made or used until "
                    "it is fixed or removed",
                ) from None
            return (), ()

    def all(self) -> tuple[Grant, ...]:
        try:
            st = self.path.stat()
        except OSError:
            return ()
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        grants = self._read()
        self._cache = (key, grants)
        return grants

    def active(self, agent_id: str | None = None, now_ms: int | None = None) -> list[Grant]:
        now = _now_ms() if now_ms is None else now_ms
        return [g for g in self.all() if g.live(now) and (agent_id is None or g.agent_id == agent_id)]

    def entries(self, agent_id: str, session_key: str | None) -> list[AllowlistEntry]:
        """The live grants of this agent (and this session) as allow-always entries, id `grant:<id>`."""
        out: list[AllowlistEntry] = []
        for grant in self.active(agent_id):
            # A session grant belongs to the session it names; one naming none (an older file's "")
            # belongs to no one: "" is what every sessionless call carries, never one session.
            if grant.session_key is not None and (not grant.session_key or grant.session_key != session_key):
                continue
            out += [
                AllowlistEntry(pattern=p, id=GRANT_PREFIX + grant.id, source=ALLOW_ALWAYS_SOURCE)
                for p in grant.patterns
                if not p.startswith(EGRESS_PREFIX)
            ]
        return out

    # -- writing

    def _write(
        self, grants: Sequence[Grant], before: Sequence[Grant] = (), spent: Sequence[str] = ()
    ) -> None:
        """Write `grants`; each of `before` no longer among them is remembered as spent."""
        kept = {g.id for g in grants}
        ended = [*spent, *(g.id for g in before if g.id not in kept and g.id not in spent)][-MAX_SPENT:]
        text = json.dumps({"version": 1, "grants": [g.to_json() for g in grants], "spent": ended}, indent=2)
        statefs.atomic_write(self.path, text + "\n")
        self._cache = None

    def add(
        self,
        agent_id: str,
        patterns: Sequence[str],
        command: str,
        limits: GrantLimits,
        session_key: str | None = None,
        granted_by: str = "operator",
    ) -> Grant:
        """A new grant under a new id (`ensure` makes the one a decision named)."""
        grant = self.ensure(new_grant_id(), agent_id, patterns, command, limits, session_key, granted_by)
        assert grant is not None  # a new id is never spent
        return grant

    def ensure(
        self,
        grant_id: str,
        agent_id: str,
        patterns: Sequence[str],
        command: str,
        limits: GrantLimits,
        session_key: str | None = None,
        granted_by: str = "operator",
    ) -> Grant | None:
        """Make grant `grant_id` unless it exists (returned as it is) or already ended (None): however often
        a decision is taken up again (coalesced asks, a restart), its grant is made once."""
        if limits.session_only and not session_key:
            raise InvalidInput(
                "a 'this session only' grant needs the session it belongs to (this ask had none)"
            )
        now = _now_ms()
        grant = Grant(
            id=grant_id,
            agent_id=agent_id,
            patterns=tuple(patterns),
            command=command[:4096],
            created_at_ms=now,
            expires_at_ms=now + limits.duration_ms if limits.duration_ms is not None else None,
            uses_left=limits.uses,
            session_key=session_key if limits.session_only else None,
            granted_by=granted_by[:80],
        )
        with statefs.file_lock(self.path):
            grants, spent = self._read_all(writing=True)
            if grant_id in spent:
                return None
            for existing in grants:
                if existing.id == grant_id:
                    return existing
            kept = [g for g in grants if g.live(now)]  # expired ones are dropped on every write
            self._write([*kept, grant], grants, spent)
        return grant

    def consume(self, grant_ids: Sequence[str]) -> bool:
        """Take one use of each grant, all or none: False when one expired, ran out or was revoked
        since the decision (the run then asks again)."""
        wanted = set(grant_ids)
        now = _now_ms()
        with statefs.file_lock(self.path):
            grants, spent = self._read_all(writing=True)
            found = {g.id: g for g in grants if g.id in wanted}
            if set(found) != wanted or not all(g.live(now) for g in found.values()):
                return False
            out = []
            for grant in grants:
                if grant.id in wanted and grant.uses_left is not None:
                    grant = replace(grant, uses_left=grant.uses_left - 1)
                if grant.live(now):
                    out.append(grant)
            if any(g.uses_left is not None for g in found.values()):
                self._write(out, grants, spent)
        return True

    def revoke(self, grant_id: str, mine: Callable[[Grant], bool] | None = None) -> Grant | None:
        """Remove a grant by id or unique prefix; the removed grant, or None when none matched. `mine`:
        which grants the asker may name at all (a node's: its gateway's own), the others as if absent."""
        key = grant_id.strip().removeprefix(GRANT_PREFIX)
        if not key:
            return None
        with statefs.file_lock(self.path):
            grants, spent = self._read_all(writing=True)
            named = [g for g in grants if mine is None or mine(g)]
            hits = [g for g in named if g.id == key] or [g for g in named if g.id.startswith(key)]
            if len(hits) != 1:
                return None
            self._write([g for g in grants if g is not hits[0]], grants, spent)
        return hits[0]
