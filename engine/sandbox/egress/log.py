"""The egress history: one JSON line per connection (allowed, refused or asked) in `<state>/history/
egress.jsonl`, written like the decision history (0600, fsync'd, rotated at 1 MiB, five files)."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from engine.approvals.history import VERSION, DecisionLog, encode_entry

LOG_NAME = "egress.jsonl"
KIND = "egress"


def encode(connection: dict[str, Any]) -> bytes:
    return encode_entry({"kind": KIND, "v": VERSION, **connection})


class EgressLog:
    def __init__(self, directory: Path) -> None:
        self.log = DecisionLog(directory, name=LOG_NAME)

    def write_lines(self, lines: list[bytes]) -> None:
        self.log.write_lines(lines)

    def recent(self, agent_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `limit` connections (of one agent, or all), newest first."""
        rows: deque[dict[str, Any]] = deque(maxlen=max(1, limit))
        for entry in self.log.lines():
            if entry.get("kind") != KIND:
                continue
            if agent_id is not None and entry.get("agentId") != agent_id:
                continue
            rows.append({k: v for k, v in entry.items() if k not in ("kind", "v")})
        return list(reversed(rows))
