"""`status`: gateway pid, uptime and counts (the operator's); that it runs and as whom (an agent's)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from engine.protocol.requests import Status

if TYPE_CHECKING:
    from engine.sessions.hosts import SessionHosts
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


# What an agent may know of the gateway: that it runs, and as whom it sees the caller. Counts of every
# agent's sessions and asks, and adopted session ids, are cross-agent views (issue 18): operator only.
AGENT_FIELDS = ("pid", "uptimeSec", "version", "configError")


async def handle(services: Services, conn: Connection, req: Status) -> dict[str, Any]:
    info = gateway_status(services)
    if conn.operator:
        return info
    return {**{k: info[k] for k in AGENT_FIELDS if k in info}, "agent": conn.agent}


def gateway_status(services: Services) -> dict[str, Any]:
    shown, running = services.sessions.registry.counts()  # counters: O(1) however many sessions
    connections = services.connections()
    adoption = services.adoption
    return {
        "pid": os.getpid(),
        "uptimeSec": round(time.time() - services.started_at, 3),
        "stateDir": str(services.state_dir),
        "connections": len(connections),
        "approvers": sum(1 for c in connections if c.approver),
        "pendingApprovals": len(services.approvals.pending()),
        "sessions": shown,
        "runningSessions": running,
        "configError": services.config_problem(),
        "historyError": services.journal.history.problem,
        "holdsSessions": services.holders is not None,
        "sessionHost": _host_status(services.holders),
        "adoptedSessions": len(adoption.sessions) if adoption is not None else 0,
        "adoption": adoption.status() if adoption is not None else None,
        "version": 1,
    }


def _host_status(hosts: SessionHosts | None) -> dict[str, Any] | None:
    """The first session host's pid, or why there is none (its sessions then run as plain children), and
    every host this gateway holds sessions in."""
    if hosts is None:
        return None
    link = hosts.link
    live = link is not None and not link.closed
    pid = link.host_pid if live and link is not None else None
    return {"pid": pid, "problem": hosts.problem, "hosts": hosts.status()}
