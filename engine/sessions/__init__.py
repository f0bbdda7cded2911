"""Process sessions: local pipes/PTY exec, output ring + disk log, registry, `process` actions, events."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.sessions.events import SystemEvents
    from engine.sessions.fanout import OutputChunk, OutputSubscription
    from engine.sessions.launcher import Launcher, LocalLauncher, LocalProcess, ProcessHandle, RunSpec
    from engine.sessions.manager import SessionManager
    from engine.sessions.procs import MARKER_ENV, ProcInfo
    from engine.sessions.registry import Session

# Loaded on first use (PEP 562): the CLI's client verbs only need `engine.sessions.procs`, and importing the
# manager and launchers with it cost every `exechost exec` ~20 ms.
_EXPORTS: dict[str, str] = {
    "MARKER_ENV": "procs",
    "Launcher": "launcher",
    "LocalLauncher": "launcher",
    "LocalProcess": "launcher",
    "OutputChunk": "fanout",
    "OutputSubscription": "fanout",
    "ProcInfo": "procs",
    "ProcessHandle": "launcher",
    "RunSpec": "launcher",
    "Session": "registry",
    "SessionManager": "manager",
    "SystemEvents": "events",
}

__all__ = [
    "MARKER_ENV",
    "Launcher",
    "LocalLauncher",
    "LocalProcess",
    "OutputChunk",
    "OutputSubscription",
    "ProcInfo",
    "ProcessHandle",
    "RunSpec",
    "Session",
    "SessionManager",
    "SystemEvents",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine.sessions' has no attribute {name!r}")
    return getattr(importlib.import_module(f"engine.sessions.{module}"), name)
