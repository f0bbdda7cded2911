"""The operator's deliberate stop, in the state dir: clients wait for a gateway, never start one behind it.

`exechost gateway stop` writes `<state>/gateway.stopped` (when, and which gateway it stopped) before it
asks the gateway to go; the one place a client starts a gateway (engine.protocol.client) reads it and
refuses with `GatewayStopped`, which callers that wait (an `exec` on an ask, the console, MCP) treat as
"not back yet". A gateway that starts, by `gateway start` or otherwise, removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from engine import statefs
from engine.protocol.frames import GatewayUnavailable

STOPPED_NAME = "gateway.stopped"
STOPPED_TEXT = "the gateway was stopped by the operator"


class GatewayStopped(GatewayUnavailable):
    """No gateway answers because the operator stopped it; none is started until `gateway start`."""


def record_stop(state: Path, pid: int | None) -> None:
    """Write the stop down (atomic, 0600) before the gateway is asked to go."""
    statefs.ensure_private_dir(state)
    record = {"stoppedAtMs": int(time.time() * 1000), "pid": pid, "by": os.getpid()}
    statefs.atomic_write(state / STOPPED_NAME, json.dumps(record) + "\n")


def read_stop(state: Path) -> dict[str, Any] | None:
    """The recorded stop, or None. A file that does not parse still counts: the operator wrote it."""
    try:
        text = statefs.read_text(state / STOPPED_NAME)
    except (OSError, statefs.StateFileError):
        return {}  # unreadable (a symlink planted, say): safer to start nothing
    if text is None:
        return None
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            return data
    return {}


def clear_stop(state: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state / STOPPED_NAME)


def stopped_error(state: Path, record: dict[str, Any]) -> GatewayStopped:
    at = record.get("stoppedAtMs")
    when = ""
    if isinstance(at, int):
        when = time.strftime(" at %H:%M:%S", time.localtime(at / 1000))
    return GatewayStopped(
        f"{STOPPED_TEXT}{when} and no gateway is running for {state}; "
        "`exechost gateway start` starts it again"
    )
