"""What a dead gateway left of its pending asks, as one snapshot file a test can read and edit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.approvals.durable import PENDING_NAME, VERSION, PendingFile


def fold_pending(state: Path) -> Path:
    """Fold the journal into `pending-approvals.json` (what the next gateway does at start); its path.
    Only while no gateway runs."""
    pending = PendingFile(state / PENDING_NAME)
    asks = [ask.to_json() for ask in pending.load()]
    pending.write(json.dumps({"version": VERSION, "asks": asks}).encode())
    return pending.path


def stored_asks(state: Path) -> list[dict[str, Any]]:
    """What the next gateway would restore (snapshot and journal), as stored."""
    return [ask.to_json() for ask in PendingFile(state / PENDING_NAME).load()]
