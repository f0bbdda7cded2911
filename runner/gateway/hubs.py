"""What the gateway's hubs (nodes, node output, browsers) need of the services: an interface of its own, so
the services build the hubs and the hubs never import the services."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from engine.approvals.pending import ApprovalManager
    from engine.config.model import Config
    from engine.sessions import SystemEvents
    from engine.sessions.manager import SessionManager
    from runner.gateway.connection import Connection
    from runner.gateway.output import OutputFanout


class HubServices(Protocol):
    """The part of `runner.gateway.services.Services` a hub uses."""

    approvals: ApprovalManager
    events: SystemEvents
    output: OutputFanout
    sessions: SessionManager  # an agent's node sessions count against the same cap (node_sessions.py)
    state_dir: Path  # the nodes' record of the session keys each node was given (node_keys.py)

    def config(self) -> Config: ...

    def connections(self) -> list[Connection]: ...

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None: ...

    def has_approver(self) -> bool: ...
