"""Decision history on disk: every decided approval as a JSON line; `approvals history` outlives the gateway.

An append-only log in `<state>/history/` (dir 0700, files 0600), fsync'd per line, rotated at a size with a
bounded number of files. Three kinds of line, merged by id at read time:

- `decision`: who decided what, when, for which command and agent (written when the ask is resolved);
- `run`: what the approval led to (the session id, its status then) — written by whoever ran it;
- `session`: how a linked session ended (status, exit code, time), so a later read never shows `running`
  for a session long gone.

A torn last line (a crash mid-write, a full disk) is skipped on read and closed by the next append.

Each agent's lines go to a log of its own (`decisions.a.<agent>.jsonl`, or `decisions.h.<digest>.jsonl` for
an id that is no plain name), rotated within its own budget; the operator's and ownerless ones stay in
`decisions.jsonl`. One agent's asks (each line may keep a 64 KiB command) then never rotate another's
decisions off the disk (fresh round 10 b). A run or session line goes where its approval's decision is.
Reads merge every file of every log.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import ostext
from engine.approvals.request import SHOWN_REQUESTERS
from engine.errors import ExecHostError
from engine.statefs import FILE_MODE, StateFileError, ensure_private_dir

log = logging.getLogger("exechost.history")

HISTORY_DIR = "history"
LOG_NAME = "decisions.jsonl"
ROTATE_BYTES = 1024 * 1024  # one file's size before it is rotated
KEEP_FILES = 5  # the live file plus four rotated ones: at most ~5 MiB on disk per log (each agent's own)
MAX_OWNERS = 50_000  # decisions whose agent is remembered, for where their run lines go
_PLAIN_AGENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_LINE_BYTES = 200 * 1024  # commands are capped at 64 KiB by the exec tool; a line holds one once
MAX_ENTRIES = 5000  # newest decisions returned by a read (the rest stay on disk until rotated out)
VERSION = 1


class HistoryError(ExecHostError):
    """The history log could not be written (full disk, a planted symlink): the decision itself stands."""

    code = "history_unavailable"


@dataclass
class HistoryEntry:
    """One decided approval, merged from its lines; `view()` is the ApprovalView-like row clients show."""

    data: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.data.get("id") or "")

    @property
    def agent_id(self) -> str:
        return str(self.data.get("agentId") or "")

    @property
    def run(self) -> dict[str, Any] | None:
        run = self.data.get("run")
        return run if isinstance(run, dict) else None

    def view(self) -> dict[str, Any]:
        out = {k: v for k, v in self.data.items() if k not in ("kind", "v")}
        out.setdefault("slug", self.id[:8])
        return out


def decision_line(view: dict[str, Any]) -> dict[str, Any]:
    """What a `decision` line keeps of an ApprovalView: enough to say who, when, what, for whom."""
    keep = (
        "id", "slug", "status", "createdAtMs", "expiresAtMs", "resolvedBy", "resolvedAtMs", "reason",
        "count", "command", "cwd", "host", "agentId", "sessionKey", "security", "ask", "askFallback",
        "allowedDecisions", "resolvedPath", "nodeId", "nodeName", "envKeys", "agentReason", "requesterGone",
        "run", "requesterCount", "contentDigests", "operator",
    )  # fmt: skip
    line = {"kind": "decision", "v": VERSION, **{k: view.get(k) for k in keep if k in view}}
    # Who asked: a count and the first few, never the whole list (an agent decides how many join).
    line["requesters"] = list(view.get("requesters") or [])[:SHOWN_REQUESTERS]
    return line


# What a decision line keeps when even a cut command leaves it too long: it is never dropped, so the
# history always has the decision (a line the reader would skip would erase it).
_ESSENTIAL = (
    "kind", "v", "id", "slug", "status", "createdAtMs", "expiresAtMs", "resolvedBy", "resolvedAtMs", "count",
    "requesterCount", "host", "agentId", "sessionKey", "nodeId", "run",
)  # fmt: skip


def encode_entry(entry: dict[str, Any]) -> bytes:
    """One line of the log, always shorter than MAX_LINE_BYTES (so always read back): a command too long
    is cut and marked, then anything but the essentials goes; never dropped."""
    line = _encode(entry)
    if len(line) >= MAX_LINE_BYTES:
        entry = {**entry, "command": str(entry.get("command", ""))[:2000] + "… (truncated)"}
        line = _encode(entry)
    if len(line) >= MAX_LINE_BYTES:
        kept = {k: entry[k] for k in _ESSENTIAL if k in entry}
        kept["command"], kept["truncated"] = entry.get("command"), True
        line = _encode(kept)
    if len(line) >= MAX_LINE_BYTES:  # the essentials themselves too long (a huge session key)
        line = _encode({k: kept[k] for k in ("kind", "v", "id", "slug", "status", "truncated") if k in kept})
    return line


def run_line(approval_id: str, run: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "run", "v": VERSION, "id": approval_id, "run": run}


class _Files:
    """One log's files: the live one and its rotated ones, written with O_APPEND and fsync."""

    def __init__(self, directory: Path, name: str, rotate_bytes: int, keep_files: int) -> None:
        self.directory = directory
        self.name = name
        self.path = directory / name
        self.rotate_bytes = rotate_bytes
        self.keep_files = keep_files
        # A failed or torn write leaves a partial line: the next append starts on a fresh line.
        self.needs_newline: bool | None = None  # None: not checked since start

    def write(self, line: bytes) -> bool:
        """Append `line` (one or more lines, no final newline); True when a file was rotated first."""
        # Few syscalls: each is a GIL hand-off for the writer thread while the loop is busy (issue 19).
        rotated = False
        fd = self._open()
        try:
            st = os.fstat(fd)
            if st.st_size and st.st_size + len(line) + 1 > self.rotate_bytes:
                os.close(fd)
                fd = -1
                self._rotate()
                rotated = True
                fd = self._open()
                st = os.fstat(fd)
            if stat.S_IMODE(st.st_mode) != FILE_MODE:
                os.fchmod(fd, FILE_MODE)  # a file restored with looser bits is tightened
            if self.needs_newline is None:
                self.needs_newline = _ends_torn(self.path, st.st_size)
            data = (b"\n" if self.needs_newline else b"") + line + b"\n"
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
            self.needs_newline = False
        except BaseException:
            self.needs_newline = True
            raise
        finally:
            if fd >= 0:
                os.close(fd)
        return rotated

    def _open(self) -> int:
        """The live log for appending, made (in a private dir) when missing; a symlink in its place is
        refused (O_NOFOLLOW), never written through."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:
                return os.open(self.path, flags)
            except FileNotFoundError:
                ensure_private_dir(self.directory)
            return os.open(self.path, flags | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateFileError(f"refusing to use symlinked path: {self.path}") from None
            raise

    def _rotate(self) -> None:
        """decisions.jsonl → .1 → .2 …; the oldest beyond `keep_files` is dropped."""
        if self.keep_files == 1:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.rotated(self.keep_files - 1))
        for n in range(self.keep_files - 2, 0, -1):
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.rotated(n), self.rotated(n + 1))
        os.replace(self.path, self.rotated(1))
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.needs_newline = False

    def rotated(self, n: int) -> Path:
        return self.directory / f"{self.name}.{n}"

    def files(self) -> list[Path]:
        """Oldest first."""
        rotated = [self.rotated(n) for n in range(self.keep_files - 1, 0, -1)]
        return [p for p in [*rotated, self.path] if p.is_file() and not p.is_symlink()]


class DecisionLog:
    """The on-disk decision history of one state dir: the operator's log and each agent's own. Writes are
    serialised by a lock (the gateway writes from its loop and from worker threads); reads merge every file
    of every log, each log's oldest first."""

    def __init__(
        self,
        directory: Path,
        *,
        rotate_bytes: int = ROTATE_BYTES,
        keep_files: int = KEEP_FILES,
        name: str = LOG_NAME,
    ) -> None:
        self.directory = directory
        self.name = name  # another log of the same kind beside it (the egress connections' one)
        self.path = directory / name
        self.rotate_bytes = max(4096, rotate_bytes)
        self.keep_files = max(1, keep_files)
        self._lock = threading.Lock()
        self._main = _Files(directory, name, self.rotate_bytes, self.keep_files)
        self._stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
        self._shard_name = re.compile(rf"{re.escape(self._stem)}\.(?:a|h)\.[A-Za-z0-9_-]{{1,64}}\.jsonl")
        self._shards: dict[str, _Files] = {}  # file name -> that agent's files
        # The agent of each decision on record (id -> agent, "" for the operator's): where its run and
        # session lines go. Filled by each append and by `index`.
        self._owners: dict[str, str] = {}
        self.problem: str | None = None  # why the last write failed (cleared by the next success)
        # The ids of the decisions the files hold, sorted (lowercase): `find` of an id nobody decided (an
        # agent's flood of bogus ids) answers from here instead of reading every file. Kept up to date by
        # each append, rebuilt from the files when first needed and after a rotation drops a file.
        self._ids: list[str] | None = None
        self._ids_lock = threading.Lock()

    # -- writing

    def record_decision(self, view: dict[str, Any]) -> None:
        self._append(decision_line(view))

    def record_run(self, approval_id: str, run: dict[str, Any]) -> None:
        self._append(run_line(approval_id, run))

    def record_session_end(self, session: dict[str, Any], approval_id: str | None = None) -> None:
        """A session ended: its final status, code and time (only sessions an approval led to matter), under
        the approval that led to it: a session id names no owner and is reused once dropped, so an end
        filed by id alone rewrote another agent's approved run (fresh round 10 b)."""
        self._append(
            {
                "kind": "session",
                "v": VERSION,
                "approvalId": approval_id,
                "sessionId": session.get("sessionId"),
                "status": session.get("status"),
                "exitCode": session.get("exitCode"),
                "exitSignal": session.get("exitSignal"),
                "endedAt": session.get("endedAt"),
            }
        )

    def _append(self, entry: dict[str, Any]) -> None:
        self.write_lines([encode_entry(entry)])

    def write_lines(self, lines: list[bytes]) -> None:
        """Append encoded lines (`encode_entry`) with one write and one fsync per log: a batch from the
        gateway's group writer, or one line."""
        with self._lock:
            groups: dict[str, list[bytes]] = {}
            for line in lines:
                groups.setdefault(self._route(line), []).append(line)
            failed: list[str] = []
            for name, group in groups.items():
                files = self._files_named(name)
                try:
                    rotated = files.write(b"\n".join(group))
                except (OSError, StateFileError) as exc:
                    failed.append(_describe(exc, files.path))
                    continue
                if rotated:
                    with self._ids_lock:
                        self._ids = None  # the oldest file's decisions are gone: rebuilt when next needed
                self._indexed(group)
            if failed:
                self.problem = failed[0]
                raise HistoryError(self.problem) from None
            self.problem = None

    def _route(self, line: bytes) -> str:
        """The file name a line goes to: its agent's log (a decision's `agentId`; a run's or session's
        approval's agent), else the operator's."""
        if not line.startswith((b'{"kind":"decision"', b'{"kind":"run"', b'{"kind":"session"')):
            return self.name  # (another kind of log beside it: the egress connections' one)
        try:
            entry = json.loads(line)
        except ValueError:
            return self.name
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == "decision":
            agent = entry.get("agentId")
            # The operator's own ask names an agent for policy only: its decision is the operator's, kept
            # in the operator's file (an agent's flood rotates only its own log).
            agent = agent if isinstance(agent, str) and entry.get("operator") is not True else ""
            if isinstance(entry.get("id"), str):
                if len(self._owners) >= MAX_OWNERS:  # the oldest half: their runs were written long ago
                    for key in list(self._owners)[: MAX_OWNERS // 2]:
                        del self._owners[key]
                self._owners[entry["id"]] = agent
        elif kind in ("run", "session"):
            agent = self._owners.get(str(entry.get("id") if kind == "run" else entry.get("approvalId")), "")
        else:
            return self.name
        return self.shard_of(agent) or self.name

    def shard_of(self, agent: str) -> str | None:
        """The file name of `agent`'s own log (None: the operator's, in the main file)."""
        if not agent:
            return None
        if _PLAIN_AGENT.fullmatch(agent):
            return f"{self._stem}.a.{agent}.jsonl"
        digest = hashlib.sha256(agent.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{self._stem}.h.{digest}.jsonl"

    def path_of(self, agent: str) -> Path:
        """The live file `agent`'s lines are appended to ("": the operator's)."""
        return self.directory / (self.shard_of(agent) or self.name)

    def _files_named(self, name: str) -> _Files:
        if name == self.name:
            return self._main
        files = self._shards.get(name)
        if files is None:
            files = self._shards[name] = _Files(self.directory, name, self.rotate_bytes, self.keep_files)
        return files

    def _indexed(self, lines: list[bytes]) -> None:
        """Add the ids of the decision lines just written to the index (when it is built)."""
        with self._ids_lock:
            if self._ids is None:
                return
            for line in lines:
                if b'"kind":"decision"' not in line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if (
                    isinstance(entry, dict)
                    and entry.get("kind") == "decision"
                    and isinstance(entry.get("id"), str)
                ):
                    key = entry["id"].lower()
                    at = bisect.bisect_left(self._ids, key)
                    if at == len(self._ids) or self._ids[at] != key:
                        self._ids.insert(at, key)

    def index(self) -> None:
        """Build the id index from the files (blocking: at start, or in a worker thread). Under the write
        lock, so no line is appended between the read and the index taking over."""
        with self._lock:
            found: set[str] = set()
            self._owners = {}
            for e in self.lines():
                if e.get("kind") == "decision" and isinstance(e.get("id"), str):
                    found.add(e["id"])
                    agent = e.get("agentId")
                    self._owners[e["id"]] = agent if isinstance(agent, str) else ""
            with self._ids_lock:
                self._ids = sorted({i.lower() for i in found})

    def _any_starts(self, key: str) -> bool:
        """Whether any decided id starts with `key` (the index's answer, with no read)."""
        with self._ids_lock:
            ids = self._ids
            if ids is not None:
                at = bisect.bisect_left(ids, key)
                return at < len(ids) and ids[at].startswith(key)
        self.index()
        return self._any_starts(key)

    def might_hold(self, id_or_prefix: str) -> bool:
        """Whether `find` can find something: a decision with this id, or the only one with this prefix.
        False is the index's answer, with no read (an id nobody decided, an ambiguous prefix)."""
        key = (id_or_prefix or "").strip().lower()
        if not key:
            return False
        with self._ids_lock:
            ids = self._ids
            if ids is not None:
                at = bisect.bisect_left(ids, key)
                if at == len(ids) or not ids[at].startswith(key):
                    return False
                return ids[at] == key or at + 1 == len(ids) or not ids[at + 1].startswith(key)
        self.index()
        return self.might_hold(key)

    # -- reading

    def files(self) -> list[Path]:
        """Every log's files: the operator's, then each agent's (on disk now), each oldest first."""
        names: list[str] = []
        with contextlib.suppress(OSError):
            names = sorted(n for n in os.listdir(self.directory) if self._shard_name.fullmatch(n))
        return [p for name in [self.name, *names] for p in self._files_named(name).files()]

    def lines(self) -> Iterable[dict[str, Any]]:
        for path in self.files():
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                for raw in fh:
                    if len(raw) > MAX_LINE_BYTES or not raw.endswith(b"\n"):
                        continue  # a torn line (crash mid-write) or one nobody wrote
                    try:
                        entry = json.loads(raw)  # (bytes: read surrogatepass, as older gateways wrote them)
                    except ValueError:
                        continue
                    if isinstance(entry, dict) and entry.get("v") == VERSION:
                        # A line an older gateway wrote of a path that is not UTF-8 holds a lone surrogate
                        # (ED B3 BF, or a `\udcff` escape): shown in the record's form, as a line written now.
                        # Two substring checks (~0.6 us a line, a regex cost as much as the json.loads):
                        # a surrogate's bytes begin ED, its escape is `\u`; a false hit costs one repr.
                        yield ostext.shown_json(entry) if b"\xed" in raw or b"\\u" in raw else entry

    def entries(self, agent_id: str | None = None) -> list[HistoryEntry]:
        """Decided approvals, newest first, each with the last run and session state written for it."""
        decisions: dict[str, dict[str, Any]] = {}
        runs: dict[str, dict[str, Any]] = {}
        ends: dict[str, dict[str, Any]] = {}
        for entry in self.lines():
            kind = entry.get("kind")
            if kind == "decision" and isinstance(entry.get("id"), str):
                decisions[entry["id"]] = entry
            elif kind == "run" and isinstance(entry.get("run"), dict):
                runs[str(entry.get("id"))] = entry["run"]
            elif kind == "session" and entry.get("sessionId"):
                # (its approval, its id): an older line without the approval is matched by id alone
                ends[f"{entry.get('approvalId') or ''}\0{entry['sessionId']}"] = entry
        rows = []
        for approval_id, data in decisions.items():
            if agent_id is not None and data.get("agentId") != agent_id:
                continue
            merged = dict(data)
            run = dict(runs.get(approval_id) or merged.get("run") or {})
            sid = str(run.get("sessionId") or "")
            end = ends.get(f"{approval_id}\0{sid}")
            if end is None and not run.get("instance"):  # an old run and an old end: matched by id alone
                end = ends.get(f"\0{sid}")
            if end is not None:
                run.update(status=end.get("status"), exitCode=end.get("exitCode"), endedAt=end.get("endedAt"))
            merged["run"] = run or None
            rows.append(HistoryEntry(merged))
        rows.sort(key=lambda e: (e.data.get("resolvedAtMs") or 0, e.id), reverse=True)
        return rows[:MAX_ENTRIES]

    def find(self, id_or_prefix: str, agent_id: str | None = None) -> HistoryEntry | None:
        """A decided approval by id or unique prefix; `agent_id`: unique among that agent's entries (a
        prefix another agent's id shares is no answer about that agent's decisions)."""
        key = (id_or_prefix or "").strip().lower()
        if not key or (agent_id is None and not self.might_hold(key)) or not self._any_starts(key):
            return None
        hits = [
            e
            for e in self.entries()
            if e.id.lower().startswith(key)
            # an agent's: its own entries, never the operator's own asks that named it for policy
            and (agent_id is None or (e.agent_id == agent_id and e.data.get("operator") is not True))
        ]
        exact = [e for e in hits if e.id.lower() == key]
        if exact:
            return exact[0]
        return hits[0] if len(hits) == 1 else None

    def decisions_of(self, ids: set[str]) -> dict[str, str]:
        """The decided status ("deny", "allow-once", "expired", …) of each of `ids` the log holds."""
        found: dict[str, str] = {}
        if not ids:
            return found
        for entry in self.lines():
            approval_id = entry.get("id")
            if entry.get("kind") == "decision" and approval_id in ids:
                found[str(approval_id)] = str(entry.get("status"))
        return found

    def linked_sessions(self) -> dict[str, tuple[str, str | None]]:
        """Session id -> (the approval that led to it, the run's instance), for sessions whose end is not
        written yet (so their ends are worth writing down, under that approval); an ended one's id is free
        for another run, and a session under the id that is not that instance is not that run."""
        out: dict[str, tuple[str, str | None]] = {}
        ended: set[tuple[str, str]] = set()  # (approval, session): its end may be written before its start
        for entry in self.lines():
            if entry.get("kind") == "run" and isinstance(entry.get("run"), dict):
                sid = entry["run"].get("sessionId")
                if sid and entry["run"].get("status") == "starting":  # a final line may follow the end
                    instance = entry["run"].get("instance")
                    out[str(sid)] = (str(entry.get("id")), instance if isinstance(instance, str) else None)
            elif entry.get("kind") == "session" and entry.get("sessionId"):
                sid = str(entry["sessionId"])
                linked = out.get(sid)
                approval = str(entry.get("approvalId") or (linked[0] if linked else ""))
                ended.add((approval, sid))
                if linked is not None and linked[0] == approval:  # another approval's end is not this one's
                    del out[sid]
        return {sid: link for sid, link in out.items() if (link[0], sid) not in ended}


def _encode(entry: dict[str, Any]) -> bytes:
    """One log line, valid UTF-8: a record's text already is (ApprovalRequest owns it); anything else that
    holds a lone surrogate (a run's text) is written in its one exact, showable form (engine.ostext)."""
    try:
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(ostext.shown_json(entry), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _ends_torn(path: Path, size: int) -> bool:
    """True when the file's last byte is not a newline (a line cut off by a crash)."""
    if size <= 0:
        return False
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) != b"\n"


def _describe(exc: OSError | StateFileError, path: Path) -> str:
    if not isinstance(exc, OSError):
        return f"decision history not written: {exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = "the disk is full" if exc.errno != errno.EFBIG else "the file size limit was reached"
        return f"decision history not written: {why} ({path.parent}): {exc.strerror}"
    return f"decision history not written ({path}): {exc.strerror or exc}"
