"""Pending asks on disk: an ask waiting for the operator outlives a gateway crash or restart, expiry and all.

`<state>/pending-approvals.json` (0600, atomic rewrite) holds every ask not yet settled: those still waiting,
and those approved whose run has not started yet. Between rewrites each change is one appended, fsynced
line of `pending-approvals.json.journal` (the ask's whole state, or that it settled): an atomic rewrite
(temp file, fsync, rename, directory fsync) after every change cost ~4x the CPU and the wall time of an
append. A load replays the journal over the snapshot; the gateway folds it in at start and whenever it
outgrows the snapshot. Each carries what the next gateway needs to run it as
approved: the call's parameters, the caller's agent and session key, and what the human approved (the
command text that runs, the cwd, and the identity of every file it pins), so a changed file or policy is
refused as `approval-stale` instead of running something nobody saw.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import jsontext
from engine.approvals.grants import GrantLimits
from engine.approvals.request import ApprovalRecord, ApprovalRequest, unsettled
from engine.statefs import (
    FILE_MODE,
    StateFileError,
    atomic_write,
    ensure_private_dir,
    refuse_symlink,
)

log = logging.getLogger("exechost.approvals")

PENDING_NAME = "pending-approvals.json"
JOURNAL_SUFFIX = ".journal"
VERSION = 1
COMPACT_MIN_BYTES = 256 * 1024  # a journal this big (and 4x the snapshot) is folded into the snapshot


def request_to_json(request: ApprovalRequest) -> dict[str, Any]:
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


def request_from_json(data: dict[str, Any]) -> ApprovalRequest:
    """The request as it was registered (tuples restored: identity, and so coalescing, depends on them)."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(ApprovalRequest):
        if f.name not in data:
            continue
        value = data[f.name]
        if isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[f.name] = value
    return ApprovalRequest(**kwargs)


@dataclass
class StoredAsk:
    """One ask as written to disk, and what restoring it needs."""

    id: str
    request: ApprovalRequest
    created_at_ms: int
    expires_at_ms: int
    count: int = 1
    requester_gone: bool = False
    decision: str | None = None
    resolved_by: str | None = None
    resolved_at_ms: int | None = None
    reason: str | None = None
    resume: dict[str, Any] | None = None
    requesters: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # An allow-always with limits must stay limited when its run starts under the next gateway.
    grant: dict[str, Any] | None = None
    grant_id: str | None = None
    run: dict[str, Any] | None = None  # {"status": "starting", "sessionId": …}: it may be running already
    # The requesters coalesced into it after the first, each with its own resume data and run.
    joined: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, record: ApprovalRecord) -> StoredAsk:
        return cls(
            id=record.id,
            request=record.request,
            created_at_ms=record.created_at_ms,
            expires_at_ms=record.expires_at_ms,
            count=record.count,
            requester_gone=record.requester_gone,
            decision=record.decision,
            resolved_by=record.resolved_by,
            resolved_at_ms=record.resolved_at_ms,
            reason=record.reason,
            resume=record.resume,
            requesters=list(record.requesters),
            grant=record.grant.to_json() if record.grant else None,
            grant_id=record.grant_id,
            run=record.run,
            joined=[dict(entry) for entry in record.joined],
        )

    def to_json(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that deep-copies the resume params on every save.
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["request"] = request_to_json(self.request)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredAsk:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields and k != "request"}
        GrantLimits.from_json(kwargs.get("grant"))  # a malformed grant fails the load, not the restore
        return cls(request=request_from_json(dict(data["request"])), **kwargs)


class PendingFile:
    """The snapshot and its journal. Journal lines are `{"ask": StoredAsk}` (the ask's state now) or
    `{"settled": id}`; each line is an ask's whole state, so replaying an old journal over a newer
    snapshot gives that snapshot again (a crash between a rewrite and the journal's truncation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal = path.with_name(path.name + JOURNAL_SUFFIX)
        self.problem: str | None = None
        self.journal_bytes = 0  # appended since the last rewrite
        self.snapshot_bytes = 0
        # An append failed part-way (or, None: not checked since start, a crash may have cut the last line
        # off): the next starts on a line of its own, never glued to the torn one and lost with it.
        self._torn: bool | None = None

    def save(self, records: list[ApprovalRecord]) -> None:
        self.write(self.encode(records))

    @staticmethod
    def encode(records: list[ApprovalRecord]) -> bytes:
        asks = [StoredAsk.of(r).to_json() for r in records if unsettled(r)]
        return _dumps({"version": VERSION, "asks": asks})

    @staticmethod
    def entry(record: ApprovalRecord) -> bytes:
        """The journal line for a record that changed (its whole state, or that it settled)."""
        if unsettled(record):
            return _dumps({"ask": StoredAsk.of(record).to_json()})
        return _dumps({"settled": record.id})

    def write(self, data: bytes, before: list[bytes] | None = None) -> None:
        """Replace the snapshot with `data` and empty the journal. `before`: journal lines that `data`
        already includes, appended first, so a crash before the journal is emptied replays to `data`."""
        try:
            if before:
                self.append(before, report=False)
            atomic_write(self.path, data)
            self.snapshot_bytes = len(data)
            self._truncate_journal()
            self.problem = None
        except (OSError, StateFileError) as exc:
            self.problem = f"pending approvals not saved to {self.path}: {exc}"
            log.error("%s", self.problem)

    def append(self, lines: list[bytes], *, report: bool = True) -> None:
        """Append journal lines with one write and one fsync."""
        try:
            fd, created = self._open_journal()
            try:
                if self._torn is None:
                    self._torn = not created and _ends_torn(fd)
                data = (b"\n" if self._torn else b"") + b"".join(line + b"\n" for line in lines)
                self._torn = True
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                self._torn = False
            finally:
                os.close(fd)
            if created:  # the new file's name is durable too
                _fsync_dir(self.path.parent)
            self.journal_bytes += len(data)
            if report:
                self.problem = None
        except (OSError, StateFileError) as exc:
            if not report:
                raise
            self.problem = f"pending approvals not saved to {self.journal}: {exc}"
            log.error("%s", self.problem)

    def _open_journal(self) -> tuple[int, bool]:
        """(fd, created). The journal as it is, else made anew in a private dir: the few syscalls matter,
        each one a GIL hand-off for the writer thread while the loop is busy. O_NOFOLLOW refuses a
        symlink in the journal's place (ELOOP), as refuse_symlink would."""
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC  # read: its last byte (_ends_torn)
        try:
            return os.open(self.journal, flags), False
        except FileNotFoundError:
            ensure_private_dir(self.path.parent)
        try:
            return os.open(self.journal, flags | os.O_CREAT | os.O_EXCL, FILE_MODE), True
        except FileExistsError:  # made meanwhile (or a dangling symlink: the open below refuses it)
            return os.open(self.journal, flags), False

    def wants_compaction(self) -> bool:
        return self.journal_bytes > max(COMPACT_MIN_BYTES, 4 * self.snapshot_bytes)

    def _truncate_journal(self) -> None:
        refuse_symlink(self.journal)
        try:
            fd = os.open(self.journal, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            self.journal_bytes = 0
            return
        try:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.journal_bytes = 0
        self._torn = False

    def load(self) -> list[StoredAsk]:
        """What the last gateway left (the snapshot, then the journal replayed over it); an unreadable
        snapshot is reported and moved aside, never replaced."""
        asks = {ask.id: ask for ask in self._load_snapshot()}
        for entry in self._load_journal():
            if "settled" in entry:
                asks.pop(str(entry["settled"]), None)
                continue
            try:
                ask = StoredAsk.from_json(dict(entry["ask"]))
            except (ValueError, KeyError, TypeError) as exc:
                self.problem = f"a pending approval in {self.journal} is unreadable ({exc}); skipped"
                log.error("%s", self.problem)
                continue
            asks[ask.id] = ask  # first seen, first restored: arrival order
        return list(asks.values())

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes; None when it is missing or unreadable (then reported in `problem`)."""
        try:
            refuse_symlink(path)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except (OSError, StateFileError) as exc:
            self.problem = f"pending approvals not loaded from {path}: {exc}"
            log.error("%s", self.problem)
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def _load_journal(self) -> list[dict[str, Any]]:
        raw = self._read(self.journal)
        if not raw:
            return []
        self.journal_bytes = len(raw)
        lines = raw.split(b"\n")
        entries = []
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                # One line at a time, so one bad line never costs the others; surrogatepass reads back a
                # line an older gateway wrote of a path that is not UTF-8 (ED B3 BF for U+DCFF).
                entry = jsontext.loads(_text(line))
                if not isinstance(entry, dict) or not ({"ask", "settled"} & entry.keys()):
                    raise ValueError("not a journal entry")
            except ValueError as exc:
                if n == len(lines) - 1:
                    continue  # a torn last line: its write never finished, so nobody was told it was saved
                self.problem = f"a line of {self.journal} is unreadable ({exc}); skipped"
                log.error("%s", self.problem)
                continue
            entries.append(entry)
        return entries

    def _load_snapshot(self) -> list[StoredAsk]:
        raw = self._read(self.path)
        if raw is None:
            return []
        self.snapshot_bytes = len(raw)
        try:
            data = jsontext.loads(_text(raw))
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError("not a pending-approvals file")
            return [StoredAsk.from_json(a) for a in data.get("asks") or []]
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.bad")
            self.path.replace(aside)
            self.problem = f"pending approvals in {self.path} unreadable ({exc}); kept as {aside}"
            log.error("%s", self.problem)
            return []


def _dumps(value: Any) -> bytes:
    """UTF-8 JSON that reads back exactly. The record's own text is valid Unicode (ApprovalRequest owns it),
    but the resume data is machine state the next gateway compares with what it prepares (the cwd, the
    pinned command, each pinned path): a path that is not UTF-8 is kept exact there, as JSON's `\\udcff`
    escapes (ASCII), which `jsontext.loads` reads back to the very str (never shown to anyone)."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True).encode("ascii")


def _text(raw: bytes) -> str:
    """A journal line or snapshot as text; surrogatepass reads what an older gateway wrote of a lone
    surrogate (its three bytes) back to it; anything else not UTF-8 is a ValueError (UnicodeDecodeError)."""
    return raw.decode("utf-8", "surrogatepass")


def _ends_torn(fd: int) -> bool:
    """The journal's last byte is not a newline: a line a crash cut off (load() skips it)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
