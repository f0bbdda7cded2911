"""The egress history: one JSON line per connection (allowed, refused or asked), in a log of its own per
principal (`<state>/history/egress/<agent>.jsonl`, `@shared.jsonl` for the shared-scope sandbox), each
written like the decision history (0600, fsync'd) and rotated within its own share: a flood of short
refusals from one agent's sandboxes rotates that agent's lines away, never another's."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine import statefs
from engine.approvals.history import VERSION, DecisionLog, encode_entry
from engine.principals import NAME_RE, SHARED_SCOPE

LOG_NAME = "egress.jsonl"  # the one shared log of earlier versions: still read, never written
LOG_DIR = "egress"
SUFFIX = ".jsonl"
KIND = "egress"
SCOPE = "scope:"  # a scope's principal: `scope:<name>` (engine.principals.SHARED_SCOPE)
# Before scopes had a prefix, the shared scope's principal was `shared`, and its log `shared.jsonl`: the
# name an agent called `shared` has. The one-time move (EgressLog._migrate) leaves this marker behind.
LEGACY_SHARED = "shared"
LAYOUT_MARKER = ".layout-2"
_LEGACY_DIGEST = re.compile(r"x-([0-9a-f]{32})(\.jsonl(?:\.[0-9]+)?)")
# One principal's share: the live file and two rotated ones of 1 MiB (~3,000 connections at most each).
ROTATE_BYTES = 1024 * 1024
KEEP_FILES = 3


def encode(connection: dict[str, Any]) -> bytes:
    return encode_entry({"kind": KIND, "v": VERSION, **connection})


def file_name(principal: str) -> str:
    """The principal's log. Its first character tells the kinds apart, so no two principals share one: an
    agent's is its id (a letter or digit first), a scope's `@<scope>`, any other principal's `#<digest>`."""
    if NAME_RE.fullmatch(principal):
        return principal + SUFFIX
    scope = principal[len(SCOPE) :]
    if principal.startswith(SCOPE) and NAME_RE.fullmatch(scope):
        return "@" + scope + SUFFIX
    return "#" + hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32] + SUFFIX


def _principal(line: bytes) -> str:
    """Whose share a line goes to: the connection's principal (its agent for records without one)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(entry, dict):
        return ""
    who = entry.get("principal") or entry.get("agentId")
    return who if isinstance(who, str) else ""


class EgressLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory  # <state>/history
        self.logs_dir = directory / LOG_DIR
        self._logs: dict[str, DecisionLog] = {}
        self._lock = threading.Lock()
        self._migrated = False

    def _migrate(self) -> None:
        """Once per state dir, before any line is written or read here: the shared scope's log of earlier
        versions (`shared.jsonl` and its rotated files) becomes `@shared.jsonl`, and digest-named logs
        (`x-<hex>.jsonl`, also a possible agent's name) become `#<hex>.jsonl`. The marker written last
        makes it once: after it, `shared.jsonl` is the agent `shared`'s."""
        with self._lock:
            if self._migrated:
                return
            marker = self.logs_dir / LAYOUT_MARKER
            if not marker.exists():
                try:
                    names = os.listdir(self.logs_dir)
                except FileNotFoundError:
                    names = []
                for name in names:
                    new = None
                    if name == file_name(LEGACY_SHARED) or name.startswith(file_name(LEGACY_SHARED) + "."):
                        new = file_name(SHARED_SCOPE) + name[len(file_name(LEGACY_SHARED)) :]
                    elif (digest := _LEGACY_DIGEST.fullmatch(name)) is not None:
                        new = "#" + digest[1] + digest[2]
                    if new is not None and not os.path.lexists(self.logs_dir / new):
                        os.rename(self.logs_dir / name, self.logs_dir / new)
                statefs.ensure_private_dir(self.logs_dir)
                statefs.atomic_write(marker, b"egress logs: agents <id>.jsonl, scopes @<scope>.jsonl\n")
            self._migrated = True

    def _log(self, name: str) -> DecisionLog:
        with self._lock:
            log = self._logs.get(name)
            if log is None:
                log = DecisionLog(self.logs_dir, rotate_bytes=ROTATE_BYTES, keep_files=KEEP_FILES, name=name)
                self._logs[name] = log
            return log

    def write_lines(self, lines: list[bytes]) -> None:
        """Append encoded lines (`encode`), each to its principal's log: one write and one fsync per log."""
        if not self._migrated:
            self._migrate()
        by_name: dict[str, list[bytes]] = {}
        for line in lines:
            by_name.setdefault(file_name(_principal(line)), []).append(line)
        failed: Exception | None = None
        for name, group in by_name.items():
            try:
                self._log(name).write_lines(group)
            except Exception as exc:  # the other principals' lines are still written
                failed = exc
        if failed is not None:
            raise failed

    def _sources(self) -> Iterable[DecisionLog]:
        if not self._migrated:
            self._migrate()
        legacy = DecisionLog(self.directory, name=LOG_NAME)
        yield legacy
        try:
            names = sorted(os.listdir(self.logs_dir))
        except FileNotFoundError:
            return
        for name in names:
            if name.endswith(SUFFIX):
                yield self._log(name)

    def recent(self, agent_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `limit` connections (of one agent, or all), newest first, from every log."""
        rows: list[tuple[int, int, dict[str, Any]]] = []
        order = 0
        for log in self._sources():
            scopes = log.name == file_name(SHARED_SCOPE)
            for entry in log.lines():
                if entry.get("kind") != KIND:
                    continue
                if entry.get("principal") == LEGACY_SHARED and (
                    scopes or (log.name == LOG_NAME and entry.get("agentId") != LEGACY_SHARED)
                ):
                    entry["principal"] = SHARED_SCOPE  # written before scopes had a prefix
                if agent_id is not None and entry.get("agentId") != agent_id:
                    continue
                order += 1
                # (a line is written as its connection ends: the logs merge by that time)
                started, took = entry.get("startedAtMs"), entry.get("durationMs")
                when = (started if isinstance(started, int) else 0) + (took if isinstance(took, int) else 0)
                rows.append((when, order, {k: v for k, v in entry.items() if k not in ("kind", "v")}))
        rows.sort(key=lambda r: (r[0], r[1]))
        return [row for _, _, row in reversed(rows[-max(1, limit) :])]
