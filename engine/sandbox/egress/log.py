"""The egress history: one JSON line per connection (allowed, refused or asked), in a log of its own per
principal (`<state>/history/egress/<agent>.jsonl`, and `shared.jsonl` for the shared-scope sandbox), each
written like the decision history (0600, fsync'd) and rotated within its own share: a flood of short
refusals from one agent's sandboxes rotates that agent's lines away, never another's."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.approvals.history import VERSION, DecisionLog, encode_entry
from engine.principals import NAME_RE

LOG_NAME = "egress.jsonl"  # the one shared log of earlier versions: still read, never written
LOG_DIR = "egress"
SUFFIX = ".jsonl"
KIND = "egress"
# One principal's share: the live file and two rotated ones of 1 MiB (~3,000 connections at most each).
ROTATE_BYTES = 1024 * 1024
KEEP_FILES = 3


def encode(connection: dict[str, Any]) -> bytes:
    return encode_entry({"kind": KIND, "v": VERSION, **connection})


def file_name(principal: str) -> str:
    """The principal's log: its own name when it is a principal's name (agent ids are), else a digest."""
    if NAME_RE.fullmatch(principal):
        return principal + SUFFIX
    return "x-" + hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32] + SUFFIX


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

    def _log(self, name: str) -> DecisionLog:
        with self._lock:
            log = self._logs.get(name)
            if log is None:
                log = DecisionLog(self.logs_dir, rotate_bytes=ROTATE_BYTES, keep_files=KEEP_FILES, name=name)
                self._logs[name] = log
            return log

    def write_lines(self, lines: list[bytes]) -> None:
        """Append encoded lines (`encode`), each to its principal's log: one write and one fsync per log."""
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
            for entry in log.lines():
                if entry.get("kind") != KIND:
                    continue
                if agent_id is not None and entry.get("agentId") != agent_id:
                    continue
                order += 1
                # (a line is written as its connection ends: the logs merge by that time)
                started, took = entry.get("startedAtMs"), entry.get("durationMs")
                when = (started if isinstance(started, int) else 0) + (took if isinstance(took, int) else 0)
                rows.append((when, order, {k: v for k, v in entry.items() if k not in ("kind", "v")}))
        rows.sort(key=lambda r: (r[0], r[1]))
        return [row for _, _, row in reversed(rows[-max(1, limit) :])]
