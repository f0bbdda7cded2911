"""Process sessions: local pipes/PTY exec, output ring + disk log, registry, `process` actions, events."""

from engine.sessions.events import SystemEvents
from engine.sessions.launcher import Launcher, LocalLauncher, LocalProcess, ProcessHandle, RunSpec
from engine.sessions.manager import SessionManager
from engine.sessions.output import OutputChunk, OutputSubscription
from engine.sessions.procs import MARKER_ENV, ProcInfo
from engine.sessions.registry import Session

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
