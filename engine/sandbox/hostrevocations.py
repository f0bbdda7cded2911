"""The revokes the gateway host still owes: `agents revoke` made while no gateway runs ends the agent's host
runs there and then where it can, and the next gateway ends them again as it starts, before it adopts a held
session or takes a request, so nothing a revoked credential set going on this host runs on under it.

One empty file per agent in `<state>/host-revocations/` (made, listed and removed whole: no lock, no partial
write). Settled only once a gateway ended what it found, so a crash on the way owes it again."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine import statefs
from engine.principals import valid_name

DIR_NAME = "host-revocations"


def owe(state: Path, agent: str) -> None:
    """`agent` was revoked while no gateway ran: the next gateway ends its host runs (durable first)."""
    if not valid_name(agent):
        raise ValueError(f"invalid agent {agent!r}")
    directory = state / DIR_NAME
    statefs.ensure_private_dir(directory)
    fd = os.open(directory / agent, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def owed(state: Path) -> list[str]:
    """The agents whose host runs a gateway must still end (none: the usual start, one listdir)."""
    try:
        names = os.listdir(state / DIR_NAME)
    except OSError:
        return []
    return sorted(name for name in names if valid_name(name))


def end(agent: str) -> int:
    """Every process of `agent`'s gateway-host runs killed (its host group); how many."""
    from engine.sandbox import bwraplimits  # (the CLI's offline revoke only: kept off its import path)

    return bwraplimits.kill_host_group(agent)


def settle(state: Path, agents: list[str]) -> None:
    """What a gateway ended is owed no more."""
    for agent in agents:
        with contextlib.suppress(OSError):
            os.unlink(state / DIR_NAME / agent)
