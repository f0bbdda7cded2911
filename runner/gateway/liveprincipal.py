"""Who a live connection is now: its principal decided again from the current config and credentials, so
a revoke, a rotation, an unmapped account or `anonymous = "none"` reaches connections already open, not
only the next handshake (issue 27 §1: no credential that no longer holds still acts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine import principals
from engine.config.model import Config

if TYPE_CHECKING:
    from runner.gateway.connection import Connection


def principal_now(
    conn: Connection, config: Config, state_dir: Path, *, credentials: bool = True
) -> str | None:
    """The agent `conn` would be if it said hello now with what it proved then; None: nobody. Reads the
    credential files (blocking: call it off the loop) unless `credentials` is False (the config's part
    only, checked on the loop before each request after a config reload). The handshake decides the same
    way (server.py)."""
    if conn.operator:
        return conn.agent  # proved the operator token, which no agent verb changes
    if conn.other_account:
        return config.agent_for_uid(conn.peer_uid)  # its Unix account is its credential
    if conn.presented:
        return principals.lookup(state_dir, conn.presented) if credentials else conn.agent
    if config.gateway.anonymous == "none":
        return None  # the gateway token alone is nobody now
    return principals.MAIN_AGENT


def stale(conns: list[Connection], config: Config, state_dir: Path) -> list[Connection]:
    """The connections that are no longer who they were when they said hello."""
    return [
        conn for conn in conns if not conn.closed and principal_now(conn, config, state_dir) != conn.agent
    ]
