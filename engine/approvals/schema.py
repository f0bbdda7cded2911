"""exec-approvals.json v1 as data: the normalised shapes, how raw JSON becomes them, and back."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import jsontext
from engine.commands.allowlist import ALLOW_ALWAYS_SOURCE, COMMAND_HASH_PREFIX, AllowlistEntry
from engine.errors import ExecHostError, InvalidInput
from engine.principals import LEGACY_MAIN

DEFAULT_AGENT = "main"
LEGACY_DEFAULT_AGENT = LEGACY_MAIN  # (one spelling: engine.principals)
WILDCARD_AGENT = "*"
ALLOW_ALWAYS = ALLOW_ALWAYS_SOURCE
# The key the operator's own allow-always entries are filed under (an ask of its exec naming no agent, whose
# agent is its policy only): no agent id starts with `_` (principals.NAME_RE) and a shared node's owners hold
# a `/`, so no agent's decision reads it (`agent()` never resolves to it); the operator's own calls do
# (`operators_entries`). It also keys the operator's own share of pending asks (engine.approvals.pending).
OPERATOR_PRINCIPAL = "_operator"

SECURITY_VALUES = ("deny", "allowlist", "full")
ASK_VALUES = ("off", "on-miss", "always")
# JSON key -> (dataclass attribute, allowed values); autoAllowSkills is the boolean fourth field.
_ENUM_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "security": ("security", SECURITY_VALUES),
    "ask": ("ask", ASK_VALUES),
    "askFallback": ("ask_fallback", SECURITY_VALUES),
}
_POLICY_KEYS = (*_ENUM_FIELDS, "autoAllowSkills")
_ENTRY_KEYS = ("id", "pattern", "argPattern", "source", "lastUsedAt", "lastUsedCommand", "lastResolvedPath")
_ID_NAMESPACE = uuid.UUID("6f1d8c52-3e0b-4d8e-9a57-0c2b8e4f7a11")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ApprovalsFileError(ExecHostError):
    """The approvals file is unreadable or unsafe; it is left exactly as it is."""

    code = "tool_error"

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclass
class AllowlistRecord:
    """One allowlist entry as stored (`ExecAllowlistEntry`)."""

    id: str
    pattern: str
    arg_pattern: str | None = None
    source: str | None = None
    last_used_at: int | None = None
    last_used_command: str | None = None
    last_resolved_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept so a write loses nothing

    @property
    def key(self) -> tuple[str, str]:
        """Identity for de-duplication: matching is case-sensitive, and so is this."""
        return (self.pattern, self.arg_pattern or "")

    def arg_pattern_valid(self) -> bool:
        if self.arg_pattern is None:
            return True
        try:
            re.compile(self.arg_pattern)
        except re.error:
            return False
        return True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "pattern": self.pattern}
        optional = {
            "argPattern": self.arg_pattern,
            "source": self.source,
            "lastUsedAt": self.last_used_at,
            "lastUsedCommand": self.last_used_command,
            "lastResolvedPath": self.last_resolved_path,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        out.update(self.extra)
        return out


@dataclass
class PolicyBlock:
    """`defaults` or one `agents.<id>` object. Invalid values are masked here but kept in the file."""

    security: str | None = None
    ask: str | None = None
    ask_fallback: str | None = None
    auto_allow_skills: bool | None = None
    allowlist: list[AllowlistRecord] = field(default_factory=list)
    # Present-but-invalid policy values (JSON key -> raw value). They mask the field (it falls back
    # to `defaults`, never to the wildcard) and are written back verbatim: dropping them on write
    # would silently hand the field to `agents.*`, which can be broader.
    invalid: dict[str, Any] = field(default_factory=dict)
    # Allowlist items that are not usable entries (no pattern, wrong types): ignored, and written back
    # verbatim after the valid ones, so an edit by exechost never destroys what a human must fix.
    invalid_entries: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def value(self, key: str) -> Any:
        return self.auto_allow_skills if key == "autoAllowSkills" else getattr(self, _ENUM_FIELDS[key][0])

    def present(self, key: str) -> bool:
        return key in self.invalid or self.value(key) is not None

    def is_empty(self) -> bool:
        return not (self.allowlist or self.invalid_entries or self.invalid or self.extra) and all(
            self.value(k) is None for k in _POLICY_KEYS
        )

    def to_json(self, with_allowlist: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _POLICY_KEYS:
            if key in self.invalid:
                out[key] = self.invalid[key]
            elif self.value(key) is not None:
                out[key] = self.value(key)
        if with_allowlist and (self.allowlist or self.invalid_entries):
            out["allowlist"] = [entry.to_json() for entry in self.allowlist] + self.invalid_entries
        out.update(self.extra)
        return out


@dataclass
class AgentApprovals:
    """One agent's view of the file: its own fields, else `agents.*`, else `defaults` (None = unset)."""

    security: str | None
    ask: str | None
    ask_fallback: str | None
    auto_allow_skills: bool | None
    allowlist: list[AllowlistRecord]
    # Which file key decided each field, e.g. {"security": "agents.main.security", "ask": None}.
    sources: dict[str, str | None] = field(default_factory=dict)


@dataclass
class ApprovalsFile:
    """The whole file, normalised."""

    version: int = 1
    socket_path: str | None = None
    socket_token: str | None = None
    defaults: PolicyBlock = field(default_factory=PolicyBlock)
    agents: dict[str, PolicyBlock] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def agent(self, agent_id: str, owner: str | None = None) -> AgentApprovals:
        """Resolve per reference §3.2: agent, then wildcard, then defaults; an invalid field masks.

        `owner`: whose entries apply, when that is not the agent's plain name (a node shared by several
        gateways: `<gateway namespace><agent>`, ExecContext.owner). The owner's block is its own key in
        `agents`, where its humans' allow-always entries are filed; its policy fields, when it has any,
        come before the name's. Under the plain name, what the node operator wrote (policy fields, entries
        of any source but an allow-always: no gateway can write one) applies to every gateway's agent of
        that name, as the node's config does; an allow-always entry there (a yes from before entries were
        filed by owner, whose gateway is not recorded) is the anonymous namespace's alone."""
        agent_id = normalize_agent_id(agent_id)
        own = self.agents.get(agent_id) or PolicyBlock()
        wildcard = self.agents.get(WILDCARD_AGENT) or PolicyBlock()
        owner = agent_id if owner is None else normalize_agent_id(owner)  # (as the store files it)
        mine = own if owner == agent_id else self.agents.get(owner) or PolicyBlock()
        values: dict[str, Any] = {}
        sources: dict[str, str | None] = {}
        for key in _POLICY_KEYS:
            if mine is not own and mine.present(key) and key not in mine.invalid:
                values[key], sources[key] = mine.value(key), f"agents.{owner}.{key}"
                continue
            values[key], sources[key] = self._resolve_field(key, agent_id, own, wildcard)
        allowlist = list(wildcard.allowlist)
        if agent_id != WILDCARD_AGENT and mine is not own:
            allowlist += [e for e in own.allowlist if e.source != ALLOW_ALWAYS]
        if agent_id != WILDCARD_AGENT:
            allowlist += mine.allowlist
        return AgentApprovals(
            security=values["security"],
            ask=values["ask"],
            ask_fallback=values["askFallback"],
            auto_allow_skills=values["autoAllowSkills"],
            allowlist=allowlist,
            sources=sources,
        )

    def _resolve_field(
        self, key: str, agent_id: str, own: PolicyBlock, wildcard: PolicyBlock
    ) -> tuple[Any, str | None]:
        fallback = self.defaults.value(key)
        from_defaults = (fallback, f"defaults.{key}" if fallback is not None else None)
        for block, name in ((own, agent_id), (wildcard, WILDCARD_AGENT)):
            if block.present(key):
                if key in block.invalid:
                    return from_defaults
                return block.value(key), f"agents.{name}.{key}"
        return from_defaults

    def entries(self, agent_id: str, owner: str | None = None) -> list[AllowlistEntry]:
        """The agent's (or `owner`'s: agent()) allowlist for matching. An entry whose argPattern does not
        compile is left out: it can never match, and dropping the argPattern instead would widen it to
        any arguments."""
        return [
            AllowlistEntry(pattern=r.pattern, arg_pattern=r.arg_pattern, id=r.id, source=r.source)
            for r in self.agent(agent_id, owner).allowlist
            if r.arg_pattern_valid()
        ]

    def operators_entries(self) -> list[AllowlistEntry]:
        """The operator's own allow-always entries (OPERATOR_PRINCIPAL): matched for the operator's calls
        naming no agent, beside its policy agent's; never part of any agent's list."""
        block = self.agents.get(OPERATOR_PRINCIPAL) or PolicyBlock()
        return [
            AllowlistEntry(pattern=r.pattern, arg_pattern=r.arg_pattern, id=r.id, source=r.source)
            for r in block.allowlist
            if r.source == ALLOW_ALWAYS and r.arg_pattern_valid()
        ]

    def find_entry(self, agent_id: str, entry_id: str) -> AllowlistRecord | None:
        """An entry of the agent's view by id: the agent's own list first, then the wildcard's; for an
        owner (`<namespace><agent>`, agent()) its own, then the plain name's (ids are unique file-wide)."""
        owner = normalize_agent_id(agent_id)
        plain = owner.rpartition("/")[2] if "/" in owner else owner
        for name in dict.fromkeys((owner, normalize_agent_id(plain), WILDCARD_AGENT)):
            for entry in (self.agents.get(name) or PolicyBlock()).allowlist:
                if entry.id == entry_id:
                    return entry
        return None

    def problems(self) -> list[str]:
        """Invalid values that are being ignored, for `exechost approvals get`."""
        out = []
        blocks = [("defaults", self.defaults)] + [(f"agents.{k}", b) for k, b in self.agents.items()]
        for name, block in blocks:
            for key, raw in block.invalid.items():
                out.append(f"{name}.{key}: invalid value {json.dumps(raw)} ignored")
            for raw in block.invalid_entries:
                shown = json.dumps(raw)[:200]
                out.append(f"{name}.allowlist: invalid entry {shown} ignored (kept in the file)")
            for entry in block.allowlist:
                if not entry.arg_pattern_valid():
                    out.append(
                        f"{name}.allowlist {entry.pattern}: argPattern {entry.arg_pattern!r} is not a "
                        "valid regex; entry never matches"
                    )
                if entry.pattern.startswith(COMMAND_HASH_PREFIX) and entry.source != ALLOW_ALWAYS:
                    out.append(
                        f"{name}.allowlist {entry.pattern}: not written by an allow-always approval; "
                        "entry never matches"
                    )
        return out

    def to_json(self) -> dict[str, Any]:
        socket: dict[str, Any] = {}
        if self.socket_path:
            socket["path"] = self.socket_path
        if self.socket_token:
            socket["token"] = self.socket_token
        return {
            "version": self.version,
            "socket": socket,
            "defaults": self.defaults.to_json(with_allowlist=False),
            "agents": {name: block.to_json() for name, block in self.agents.items()},
            **self.extra,
        }


def normalize_agent_id(agent_id: str | None) -> str:
    """Strip; empty means main; the legacy `default` agent is `main`. Control characters are refused."""
    value = (agent_id or "").strip() or DEFAULT_AGENT
    if _CONTROL.search(value):
        raise InvalidInput(f"invalid agent id {agent_id!r}: control characters")
    return DEFAULT_AGENT if value == LEGACY_DEFAULT_AGENT else value


def clean_pattern(pattern: str) -> str:
    value = pattern.strip()
    if not value:
        raise InvalidInput("allowlist pattern is empty")
    if _CONTROL.search(value):
        raise InvalidInput(f"allowlist pattern {pattern!r} contains control characters")
    return value


def clean_arg_pattern(arg_pattern: str | None) -> str | None:
    """None means any arguments; empty (or blank) means no arguments (`^$`); else a regular expression."""
    if arg_pattern is None:
        return None
    value = arg_pattern.strip()
    if not value:
        return "^$"
    try:
        re.compile(value)
    except re.error as exc:
        raise InvalidInput(f"invalid argPattern {value!r}: not a valid regular expression ({exc})") from None
    return value


# ---- parsing ---------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not valid JSON")


def decode_approvals(text: str, path: Path | str) -> dict[str, Any]:
    """The file's JSON object, or ApprovalsFileError naming the file and the reason."""
    if not text.strip():
        raise ApprovalsFileError(path, 'file is empty; expected a JSON object with "version": 1')
    try:
        raw = jsontext.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ApprovalsFileError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise ApprovalsFileError(path, f"invalid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ApprovalsFileError(path, f"top level must be a JSON object, got {_type_name(raw)}")
    if "version" not in raw:
        raise ApprovalsFileError(path, 'missing "version" (expected 1)')
    version = raw["version"]
    if isinstance(version, bool) or version != 1:
        raise ApprovalsFileError(path, f"unsupported version {json.dumps(version)} (expected 1)")
    return raw


def parse_approvals(text: str, path: Path | str) -> ApprovalsFile:
    """Parse and normalise the file's text; anything that cannot be understood raises ApprovalsFileError."""
    return normalize_approvals(decode_approvals(text, path), path)


def normalize_approvals(raw: dict[str, Any], path: Path | str) -> ApprovalsFile:
    """Reference §3.1 normalisation. Containers of the wrong type raise rather than being dropped."""

    def obj(value: Any, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ApprovalsFileError(path, f"{where} must be an object, got {_type_name(value)}")
        return value

    socket = obj(raw.get("socket"), "socket")
    socket_values: dict[str, str | None] = {}
    for key in ("path", "token"):
        value = socket.get(key)
        if value is not None and not isinstance(value, str):
            raise ApprovalsFileError(path, f"socket.{key} must be a string, got {_type_name(value)}")
        socket_values[key] = (value or "").strip() or None

    defaults = _parse_block(obj(raw.get("defaults"), "defaults"), "defaults", path, with_allowlist=False)
    agents: dict[str, PolicyBlock] = {}
    for name, value in obj(raw.get("agents"), "agents").items():
        if value is None:
            continue
        agents[name] = _parse_block(obj(value, f"agents.{name}"), f"agents.{name}", path)
    legacy = agents.pop(LEGACY_DEFAULT_AGENT, None)
    if legacy is not None:
        main = agents.get(DEFAULT_AGENT)
        agents[DEFAULT_AGENT] = legacy if main is None else _merge_legacy(main, legacy)
    for block in agents.values():
        block.allowlist = _dedupe(block.allowlist)
    _assign_ids(agents)
    extra = {k: v for k, v in raw.items() if k not in ("version", "socket", "defaults", "agents")}
    return ApprovalsFile(
        socket_path=socket_values["path"],
        socket_token=socket_values["token"],
        defaults=defaults,
        agents=agents,
        extra=extra,
    )


def _parse_block(
    raw: dict[str, Any], where: str, path: Path | str, with_allowlist: bool = True
) -> PolicyBlock:
    block = PolicyBlock()
    for key, (attr, allowed) in _ENUM_FIELDS.items():
        value = raw.get(key)
        if value is None:
            continue
        # Exact lowercase only, as OpenClaw reads them: "FULL" is invalid (masked, stricter default).
        normalized = value if isinstance(value, str) else None
        if normalized in allowed:
            setattr(block, attr, normalized)
        else:
            block.invalid[key] = value
    skills = raw.get("autoAllowSkills")
    if isinstance(skills, bool):
        block.auto_allow_skills = skills
    elif skills is not None:
        block.invalid["autoAllowSkills"] = skills
    known = set(_POLICY_KEYS)
    if with_allowlist:
        known.add("allowlist")
        items = raw.get("allowlist")
        if items is not None and not isinstance(items, list):
            raise ApprovalsFileError(path, f"{where}.allowlist must be an array, got {_type_name(items)}")
        for item in items or []:
            entry = _parse_entry(item)
            if entry is None:
                block.invalid_entries.append(item)
            else:
                block.allowlist.append(entry)
    block.extra = {k: v for k, v in raw.items() if k not in known}
    return block


def _parse_entry(item: Any) -> AllowlistRecord | None:
    """Bare strings become entries; None for items without a usable pattern (ignored, reference §3.1)."""
    if isinstance(item, str):
        item = {"pattern": item}
    if not isinstance(item, dict):
        return None
    pattern = item.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        return None
    arg_pattern = item.get("argPattern")
    if arg_pattern is not None and not isinstance(arg_pattern, str):
        return None  # fail closed: ignoring it would widen the entry to any arguments
    entry_id = item.get("id")
    last_used = item.get("lastUsedAt")
    return AllowlistRecord(
        id=entry_id.strip() if isinstance(entry_id, str) else "",
        pattern=pattern.strip(),
        arg_pattern=(arg_pattern or "").strip() or None,
        source=_str_or_none(item.get("source")),
        last_used_at=int(last_used)
        if isinstance(last_used, int | float) and not isinstance(last_used, bool) and last_used >= 0
        else None,
        last_used_command=_str_or_none(item.get("lastUsedCommand")),
        last_resolved_path=_str_or_none(item.get("lastResolvedPath")),
        # `commandText` is legacy plaintext and is stripped (reference §3.1).
        extra={k: v for k, v in item.items() if k not in _ENTRY_KEYS and k != "commandText"},
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _dedupe(entries: list[AllowlistRecord]) -> list[AllowlistRecord]:
    seen: set[tuple[str, str]] = set()
    out = []
    for entry in entries:
        if entry.key not in seen:
            seen.add(entry.key)
            out.append(entry)
    return out


def _merge_legacy(main: PolicyBlock, legacy: PolicyBlock) -> PolicyBlock:
    """`agents.default` folds into `agents.main`; main's fields win, allowlists concatenate (main first)."""
    merged = PolicyBlock(
        allowlist=_dedupe(main.allowlist + legacy.allowlist),
        invalid_entries=main.invalid_entries + legacy.invalid_entries,
    )
    for key in _POLICY_KEYS:
        winner = main if main.present(key) else legacy
        if key in winner.invalid:
            merged.invalid[key] = winner.invalid[key]
        elif key == "autoAllowSkills":
            merged.auto_allow_skills = winner.auto_allow_skills
        else:
            setattr(merged, _ENUM_FIELDS[key][0], winner.value(key))
    merged.extra = {**legacy.extra, **main.extra}
    return merged


def _assign_ids(agents: dict[str, PolicyBlock]) -> None:
    """Missing or duplicate ids get a UUID derived from (agent, pattern, argPattern): stable across
    loads, so an id handed out by one read still names the same entry in the next write."""
    seen: set[str] = set()
    for name, block in agents.items():
        for entry in block.allowlist:
            if not entry.id or entry.id in seen:
                basis = f"{name}\0{entry.key[0]}\0{entry.key[1]}"
                candidate = str(uuid.uuid5(_ID_NAMESPACE, basis))
                counter = 0
                while candidate in seen:
                    counter += 1
                    candidate = str(uuid.uuid5(_ID_NAMESPACE, f"{basis}\0{counter}"))
                entry.id = candidate
            seen.add(entry.id)
