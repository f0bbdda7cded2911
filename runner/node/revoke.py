"""`agent.revoke` on a node: a gateway's agent was revoked, so everything it left running here ends (its
sessions, every process of its host runs' pids group) and what its revoked credential sends later is refused.
Keyed by the gateway's namespace (runner.node.gateways): another gateway's agent of the same name is another
principal, untouched."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from engine.approvals.generations import Generations
from engine.nodes.wire import AgentRevoke, WireError
from engine.sandbox import bwraplimits
from engine.sessions import SessionManager
from runner.node import gateways

log = logging.getLogger("exechost.node")

# Revoked credentials remembered (each a stamp); past it the oldest is forgotten. A gateway refuses a
# revoked credential's calls itself: this catches only runs it sent before the revoke that arrive after it.
MAX_REVOKED = 4096


class RevokeError(ValueError):
    """`agent.revoke` params that are not its wire shape."""


class Revoked:
    """The revoked credentials of each gateway's agents, and the kill of what such an agent runs here."""

    def __init__(self, sessions: SessionManager, generations: Generations | None = None) -> None:
        self.sessions = sessions
        # The node's own credential generations (its approval manager's): a bump refuses what the agent's
        # sandboxes here ask of the node's egress proxy, and ends their connections (runner.egress).
        self.generations = generations
        self._stamps: OrderedDict[tuple[str, str], None] = OrderedDict()  # (principal, stamp)

    def refused(self, ns: str, agent: str, stamp: Any) -> bool:
        """Whether a run of `ns`'s agent carrying credential `stamp` was revoked here."""
        return isinstance(stamp, str) and bool(stamp) and (ns + agent, stamp) in self._stamps

    async def revoke(self, params: dict[str, Any]) -> dict[str, Any]:
        """The request's gateway's agent: its credential refused from now on, then its sessions killed and
        its host runs' pids group emptied (a double-forked daemon is still in the group). Answered once the
        kill was asked of each (the gateway then counts the revocation delivered)."""
        try:
            wire = AgentRevoke.from_json(params)
        except WireError as exc:
            raise RevokeError(f"INVALID_REQUEST: {exc}") from None
        principal = gateways.CURRENT_GATEWAY.get() + wire.agent
        if wire.credential:
            self._stamps[(principal, wire.credential)] = None
            self._stamps.move_to_end((principal, wire.credential))
            while len(self._stamps) > MAX_REVOKED:
                self._stamps.popitem(last=False)
        if self.generations is not None:
            # What a revoke or rotation on the gateway ends there, ends here by the same path (a bump, whose
            # listeners cut the egress connections and refuse what the older generation asks): a node files
            # its sandboxes by the agent's plain name, whichever gateway's it is (the egress of that name
            # stops until a run enters the sandbox again), and its host runs' network namespaces and their
            # listeners by the principal (namespace + agent, hostprivate.space of ExecContext.owner): both
            # are bumped, so a host run of the old credential loses its way out here as on the gateway.
            for key in dict.fromkeys((wire.agent, principal)):
                self.generations.bump(key)
        if wire.rotated:
            return {"agent": wire.agent, "killed": 0}  # a new credential: the agent's runs are still its own
        return {"agent": wire.agent, "killed": await self.kill(principal)}

    async def kill(self, principal: str) -> int:
        """Every running session filed under `principal` (its gateway's namespace and agent), and every
        process of that principal's host runs. The number of sessions told to end."""
        killed = 0
        for session in list(self.sessions.registry.ordered()):
            mine = not session.exited and gateways.principal(session.scope_key) == principal
            if mine and self.sessions.request_kill(session):
                killed += 1
        gone = await asyncio.to_thread(bwraplimits.kill_host_group, principal)
        if killed or gone:
            log.warning("revoked %s: %d session(s) ended, %d process(es) killed", principal, killed, gone)
        return killed
