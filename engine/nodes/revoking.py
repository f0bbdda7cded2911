"""A revoke's durable steps in the one order every revoke takes (the gateway's `agents.revoke` and
`agents.rotate`, the offline CLI): what it owes (the gateway host's kill, each node's revocation) is written
before the credential changes and settled only once done, so a crash between any two steps leaves the rest
owed to the next gateway (it ends owed host runs before it adopts any, and tells each node on its next
link)."""

from __future__ import annotations

import logging
from pathlib import Path

from engine import principals
from engine.nodes.revocations import Revocations
from engine.nodes.wire import credential_stamp
from engine.sandbox import hostrevocations

log = logging.getLogger("exechost.revoke")


def owe(
    state: Path, agent: str, old: str | None, nodes: bool, rotated: bool = False, *, durable: bool = False
) -> None:
    """Durable first: the gateway host owes the kill of the agent's host runs (not for a rotation: its runs
    go on, their egress cut by the new generation), and every configured node (`nodes`) the revocation of
    the credential `old` (or of a rotation). A crash before the credential changes owes a revoke the
    operator asked for and did not see answered: the safe side. What cannot be written is logged, and the
    credential changes anyway (a revoke never waits on what it owes) in a gateway, which goes on telling the
    nodes from its memory. `durable` (the offline CLI, which ends at once): what cannot be written raises
    OSError naming the file, before the credential changes (fresh round 18 c)."""
    if durable:
        if nodes:
            stamp = credential_stamp(principals.credential_id(old) if old else "")
            Revocations(state).add(agent, stamp, rotated, durable=True)
        if not rotated:
            hostrevocations.owe(state, agent)
        return
    # Each step on its own: a host kill the disk refused cannot cost the nodes theirs, which is kept in this
    # process when the disk refuses it too (Revocations.add), so connected nodes hear it (fresh round 17 c).
    if nodes:
        try:
            stamp = credential_stamp(principals.credential_id(old) if old else "")
            Revocations(state).add(agent, stamp, rotated)
        except Exception:
            log.exception("agent %s: what its revoke owes the nodes could not be kept", agent)
    if not rotated:
        try:
            hostrevocations.owe(state, agent)
        except Exception:
            log.exception(
                "agent %s: the host kill its revoke owes could not be kept (a crash would leave it)", agent
            )


def revoke(state: Path, agent: str, nodes: bool, *, durable: bool = False) -> tuple[bool, str | None]:
    """What is owed, then the credential removed (fsynced): (removed, the old token). The caller ends the
    agent's host runs and only then settles them (hostrevocations.settle). `durable`: as owe's."""
    old = principals.read_token(state, agent)
    owe(state, agent, old, nodes, durable=durable)
    return principals.revoke(state, agent), old


def rotate(state: Path, agent: str, nodes: bool) -> tuple[str, str | None]:
    """The nodes' rotated revocation owed (when there was a credential), then the new credential minted:
    (the new token, the old one)."""
    old = principals.read_token(state, agent)
    if old is not None:
        owe(state, agent, old, nodes, rotated=True)
    return principals.mint(state, agent), old
