"""`<state>/session-overrides.json` read as one table: the gateway's overrides, and every other decider's."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from engine import jsontext
from engine.policy.precedence import SessionOverrides
from engine.statefs import read_text

OVERRIDES_NAME = "session-overrides.json"
VERSION = 1
FIELDS = tuple(f.name for f in fields(SessionOverrides))


def parse(raw: str) -> dict[str, SessionOverrides]:
    """The table in `raw` (ValueError when it is no session-overrides file). An entry with an unknown
    field or value is dropped (the stricter default, the configured policy, applies)."""
    data = jsontext.loads(raw)
    table = data.get("overrides") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(table, dict):
        raise ValueError("not a session-overrides file")
    out: dict[str, SessionOverrides] = {}
    for key, row in table.items():
        if not isinstance(key, str) or not isinstance(row, dict) or set(row) - set(FIELDS):
            continue
        if not all(v is None or isinstance(v, str) for v in row.values()):
            continue
        out[key] = SessionOverrides(**row)
    return out


def read(path: Path) -> dict[str, SessionOverrides]:
    """The table as the gateway last wrote it (empty when there is none). Raises OSError, StateFileError
    or ValueError when it cannot be read: a decider that is not the gateway fails closed then (it may not
    set the file aside, as the gateway does at its start)."""
    raw = read_text(path)
    return {} if raw is None else parse(raw)
