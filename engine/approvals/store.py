"""exec-approvals.json (v1) on disk: locked read-modify-write edits, allowlist use, the socket token."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import ostext, statefs
from engine.approvals.schema import (
    ALLOW_ALWAYS,
    DEFAULT_AGENT,
    LEGACY_DEFAULT_AGENT,
    WILDCARD_AGENT,
    AgentApprovals,
    AllowlistRecord,
    ApprovalsFile,
    ApprovalsFileError,
    PolicyBlock,
    clean_arg_pattern,
    clean_pattern,
    decode_approvals,
    normalize_agent_id,
    normalize_approvals,
    parse_approvals,
)
from engine.commands.allowlist import AllowlistEntry

# The data model lives in engine.approvals.schema; its names stay importable from here.
__all__ = [
    "ALLOW_ALWAYS",
    "DEFAULT_AGENT",
    "FILE_NAME",
    "LEGACY_DEFAULT_AGENT",
    "MAX_LAST_USED_COMMAND",
    "SOCKET_NAME",
    "WILDCARD_AGENT",
    "AgentApprovals",
    "AllowlistRecord",
    "ApprovalsFile",
    "ApprovalsFileError",
    "ApprovalsStore",
    "PolicyBlock",
    "Use",
    "clean_arg_pattern",
    "clean_pattern",
    "decode_approvals",
    "generate_token",
    "normalize_agent_id",
    "normalize_approvals",
    "parse_approvals",
]

FILE_NAME = "exec-approvals.json"
SOCKET_NAME = "exec-approvals.sock"
# Keeps one runaway command line from bloating a file every exec reads.
MAX_LAST_USED_COMMAND = 4096


@dataclass(frozen=True)
class Use:
    """One allowlisted run to stamp on the entry that let it through."""

    agent_id: str
    entry_id: str
    command: str
    resolved_path: str | None
    at_ms: int

    def __post_init__(self) -> None:
        # What the operator reads back (lastResolvedPath, lastUsedCommand): a path that is not UTF-8 in
        # its one exact, showable form (engine.ostext), as in an ask's record, so the stamp can be written.
        if self.resolved_path is not None:
            object.__setattr__(self, "resolved_path", ostext.shown(self.resolved_path))
        object.__setattr__(self, "command", ostext.shown(self.command))


def generate_token() -> str:
    """24 random bytes, base64url without padding (32 chars), as OpenClaw's node and Swift sides make it."""
    return base64.urlsafe_b64encode(secrets.token_bytes(24)).rstrip(b"=").decode("ascii")


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    """Changes with any write, replacement, chmod or chown (ctime covers the last two)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid)


# ---- the store -------------------------------------------------------------------------------------


class ApprovalsStore:
    """Load and edit exec-approvals.json: every edit is read-modify-write under a cross-process lock."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else statefs.state_dir() / FILE_NAME
        # (stat key, file) of the last read: every exec reads the file, few execs follow an edit.
        self._snapshot: tuple[tuple[int, ...], ApprovalsFile] | None = None

    @property
    def default_socket_path(self) -> str:
        return str(self.path.parent / SOCKET_NAME)

    def _read(self) -> tuple[ApprovalsFile, Any, int, tuple[int, ...]] | None:
        """(normalised file, raw JSON, mode, stat key) or None when absent. Refuses symlinks and files that
        someone else could have written: a forged allowlist would be honoured."""
        try:
            statefs.refuse_symlink(self.path.parent)
            statefs.refuse_symlink(self.path)
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not hang us
        except FileNotFoundError:
            return None
        except (statefs.StateFileError, OSError) as exc:
            raise ApprovalsFileError(self.path, f"cannot open: {_reason(exc)}") from None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            key = _stat_key(st)
            if not stat.S_ISREG(st.st_mode):
                raise ApprovalsFileError(self.path, "not a regular file")
            if st.st_uid != os.geteuid():
                raise ApprovalsFileError(self.path, f"owned by uid {st.st_uid}, not by this user")
            mode = stat.S_IMODE(st.st_mode)
            if mode & 0o022:
                raise ApprovalsFileError(
                    self.path, f"unsafe mode {mode:04o} (writable by group or others); run chmod 600"
                )
            data = fh.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApprovalsFileError(self.path, f"not valid UTF-8 at byte {exc.start}") from None
        raw = decode_approvals(text, self.path)
        return normalize_approvals(raw, self.path), raw, mode, key

    def exists(self) -> bool:
        return self._read() is not None

    def load(self) -> ApprovalsFile:
        """The normalised file; a missing file is an empty v1 file. Never writes."""
        found = self._read()
        return found[0] if found is not None else ApprovalsFile()

    def snapshot(self) -> ApprovalsFile:
        """Like load(), but shared and read-only: a cached copy while a stat of the file matches the last
        read (inode, size, mtime, ctime, mode, owner), so another process's edit is seen at once."""
        cached = self._snapshot
        if cached is not None:
            try:
                statefs.refuse_symlink(self.path.parent)
                st = os.lstat(self.path)
            except (statefs.StateFileError, OSError):
                st = None  # _read gives the error (or the empty file)
            if st is not None and _stat_key(st) == cached[0]:
                return cached[1]
        found = self._read()
        if found is None:
            return ApprovalsFile()
        self._snapshot = (found[3], found[0])  # nobody else holds this normalisation, so it can be shared
        return found[0]

    @contextlib.contextmanager
    def _edit(self, persist: bool = False) -> Iterator[ApprovalsFile]:
        """Lock, re-read, let the caller mutate, then write atomically if the caller changed something
        (or `persist`: create the file, fill in the socket, save normalisation, fix the mode).
        A file that fails to parse raises before the caller runs, so it is never overwritten."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(statefs.file_lock(self.path))
            except (statefs.StateFileError, OSError) as exc:
                raise ApprovalsFileError(self.path, f"cannot lock: {_reason(exc)}") from None
            found = self._read()
            current = found[0] if found is not None else ApprovalsFile()
            before = current.to_json()
            yield current
            if not persist and current.to_json() == before:
                return
            if not current.socket_path:
                current.socket_path = self.default_socket_path
            if not current.socket_token:
                current.socket_token = generate_token()
            data = current.to_json()
            if found is None or data != found[1] or found[2] != statefs.FILE_MODE:
                self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        try:
            text = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:
            # A pattern is matched against the path the OS gives (an allow-always of a path that is not
            # UTF-8): kept exact, as JSON's `\\udcff` escapes (ASCII), which json.loads reads back to it.
            text = (json.dumps(data, indent=2, ensure_ascii=True) + "\n").encode("ascii")
        try:
            statefs.atomic_write(self.path, text)
        except (statefs.StateFileError, OSError) as exc:
            raise ApprovalsFileError(self.path, f"cannot write: {_reason(exc)}") from None

    def ensure(self) -> ApprovalsFile:
        """Create the file if missing and fill in the socket path and token; persists normalisation."""
        with self._edit(persist=True) as current:
            pass
        return current

    def socket_info(self) -> tuple[str, str]:
        """(socket path with ~ expanded, token), creating them on first use."""
        current = self.load()
        if not (current.socket_path and current.socket_token):
            current = self.ensure()
        assert current.socket_path and current.socket_token
        return os.path.expanduser(current.socket_path), current.socket_token

    def socket_token_now(self) -> str:
        """The socket token as the file holds it now, "" when it holds none or cannot be read (a token
        that matches nothing): exec-approvals.sock checks each frame against this, so a rotated token
        takes effect at once. A stat per call while the file is unchanged (snapshot)."""
        try:
            return self.snapshot().socket_token or ""
        except (ApprovalsFileError, OSError):
            return ""

    def agent(self, agent_id: str) -> AgentApprovals:
        return self.load().agent(agent_id)

    def entries(self, agent_id: str) -> list[AllowlistEntry]:
        return self.load().entries(agent_id)

    def add_allowlist(
        self, agent_id: str, pattern: str, arg_pattern: str | None = None, source: str | None = None
    ) -> AllowlistRecord:
        """Add an entry, or return the existing one with the same pattern and argPattern."""
        name = normalize_agent_id(agent_id)
        new = AllowlistRecord(
            id="", pattern=clean_pattern(pattern), arg_pattern=clean_arg_pattern(arg_pattern)
        )
        with self._edit() as current:
            record = _add(current, name, new, source, now_ms=None)
        return record

    def remove_allowlist(self, agent_id: str, pattern: str) -> bool:
        """Remove every entry of this agent whose pattern (case-insensitively) or id equals `pattern`."""
        name = normalize_agent_id(agent_id)
        target = clean_pattern(pattern)
        removed = False
        with self._edit() as current:
            block = current.agents.get(name)
            if block is not None:
                kept = [e for e in block.allowlist if e.pattern.lower() != target.lower() and e.id != target]
                removed = len(kept) != len(block.allowlist)
                block.allowlist = kept
                if block.is_empty():
                    del current.agents[name]
        return removed

    def record_use(self, agent_id: str, entry_id: str, command: str, resolved_path: str | None) -> None:
        """Stamp lastUsedAt (ms), lastUsedCommand and lastResolvedPath on the entry that matched.
        An entry removed meanwhile is simply not recorded."""
        self.record_uses([Use(agent_id, entry_id, command, resolved_path, _now_ms())])

    def record_uses(self, uses: Sequence[Use]) -> None:
        """Several stamps in one locked write (the exec path batches them: engine.tools.uses)."""
        with self._edit() as current:
            for use in uses:
                entry = current.find_entry(use.agent_id, use.entry_id)
                if entry is not None:
                    entry.last_used_at = use.at_ms
                    entry.last_used_command = use.command[:MAX_LAST_USED_COMMAND]
                    entry.last_resolved_path = use.resolved_path or None

    def persist_allow_always(self, agent_id: str, patterns: Sequence[str]) -> list[AllowlistRecord]:
        """Persist an allow-always decision: one `source: "allow-always"` entry per pattern (inner
        executables' paths or `=command:<sha256>`), de-duplicated, all in one locked write."""
        name = normalize_agent_id(agent_id)
        wanted: list[AllowlistRecord] = []
        for pattern in patterns:
            if not pattern.strip():
                continue
            record = AllowlistRecord(id="", pattern=clean_pattern(pattern))
            if record.key not in {w.key for w in wanted}:
                wanted.append(record)
        if not wanted:
            return []
        now = _now_ms()
        with self._edit() as current:
            records = [_add(current, name, record, ALLOW_ALWAYS, now_ms=now) for record in wanted]
        return records

    # -- egress (a sandbox's names; `agents.<id>.egress.allow`, beside OpenClaw's keys, kept by its reader)

    def egress_allow(self, agent_id: str) -> list[str]:
        """The names an allow-always admitted for the agent's sandboxes (its own and `agents.*`)."""
        data = self.snapshot()
        out: list[str] = []
        for name in (WILDCARD_AGENT, normalize_agent_id(agent_id)):
            block = data.agents.get(name)
            raw = block.extra.get("egress") if block is not None else None
            allow = raw.get("allow") if isinstance(raw, dict) else None
            if isinstance(allow, list):
                out += [item for item in allow if isinstance(item, str)]
        return out

    def persist_egress_allow(self, agent_id: str, entry: str) -> None:
        """An allow-always for a name: added to `agents.<id>.egress.allow` once."""
        name = normalize_agent_id(agent_id)
        with self._edit() as current:
            block = current.agents.setdefault(name, PolicyBlock())
            # New objects, never edits in place: the edit compares the file before and after.
            egress = block.extra.get("egress")
            egress = dict(egress) if isinstance(egress, dict) else {}
            allow = egress.get("allow")
            allow = list(allow) if isinstance(allow, list) else []
            if entry not in allow:
                block.extra["egress"] = {**egress, "allow": [*allow, entry]}


def _add(
    current: ApprovalsFile, name: str, new: AllowlistRecord, source: str | None, now_ms: int | None
) -> AllowlistRecord:
    block = current.agents.setdefault(name, PolicyBlock())
    for entry in block.allowlist:
        if entry.key == new.key:
            if source and entry.source != source:
                entry.source = source
                entry.last_used_at = now_ms if now_ms is not None else entry.last_used_at
            return entry
    taken = {e.id for b in current.agents.values() for e in b.allowlist}
    new.id = str(uuid.uuid4())
    while new.id in taken:
        new.id = str(uuid.uuid4())
    new.source = source
    new.last_used_at = now_ms
    block.allowlist.append(new)
    return new


def _now_ms() -> int:
    return int(time.time() * 1000)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
