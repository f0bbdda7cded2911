"""Session overrides (`/exec`, `/elevated`) on disk: an operator's lock-down outlives a crash or restart.

`<state>/session-overrides.json` (0600, atomic rewrite), `{version, overrides: {sessionKey: {field: value}}}`.
The gateway answers a `policy.override` only once the table is written, so what the operator was told is
set is what the next gateway starts with. A file that does not parse is reported and kept aside, never
silently replaced; an entry with an unknown field or value is dropped as it is read (the stricter default,
the configured policy, applies).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from engine.policy import overridestable
from engine.policy.precedence import SessionOverrides
from engine.statefs import StateFileError, atomic_write, read_text

log = logging.getLogger("exechost.gateway")

OVERRIDES_NAME = overridestable.OVERRIDES_NAME
VERSION = overridestable.VERSION
_FIELDS = overridestable.FIELDS


def load(path: Path) -> dict[str, SessionOverrides]:
    """The table the last gateway left (empty when none)."""
    try:
        raw = read_text(path)
    except (OSError, StateFileError, UnicodeDecodeError) as exc:
        log.error("session overrides not loaded from %s: %s", path, exc)
        return {}
    if raw is None:
        return {}
    try:
        return overridestable.parse(raw)
    except ValueError as exc:
        aside = path.with_name(f"{path.name}.bad")
        path.replace(aside)
        log.error("session overrides in %s unreadable (%s); kept as %s", path, exc, aside)
        return {}


def save(path: Path, table: dict[str, SessionOverrides]) -> None:
    """Rewrite the whole table (raises OSError/StateFileError: the caller says the override is not kept)."""
    rows = {key: {name: getattr(ov, name) for name in _FIELDS} for key, ov in table.items()}
    atomic_write(path, json.dumps({"version": VERSION, "overrides": rows}, ensure_ascii=False) + "\n")
