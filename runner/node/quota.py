"""Each principal's caps on a node's sessions and the output they keep on its disk: the gateway counts its
agents' node sessions but holds none of their output, so the node, whose disk it is, budgets it, per
principal as it files sessions (gateway key + agent, runner.node.gateways.principal) and by its own config
(`maxSessionsPerAgent`, `maxOutputBytesPerAgent`, per agent as the gateway names it)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.config.model import Config
from engine.principals import valid_name
from engine.sessions.quota import Quota
from runner.node import gateways

# The output budget the gateway gives the agent of the run being started (its own maxOutputBytesPerAgent),
# set by runner.node.sysrun for that run's task: it can only lower the node's own (the gateway's policy only
# tightens here). None: the gateway said none (an older one, or the operator's run).
GATEWAY_BUDGET: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "exechost_node_budget", default=None
)


@dataclass
class NodeQuota(Quota):
    # The node's config as it is now: an edit applies to the next start.
    config: Callable[[], Config] | None = field(default=None, repr=False)
    # A gateway admits up to its maxSessionsPerAgent of an agent's sessions here: every one of ours starts.
    keep_room_for_each: bool = True

    def owner(self, scope_key: str) -> str | None:
        """Every session here is some principal's: the node cannot tell a gateway's operator from its agents
        (nor believe a gateway that says), so an ownerless key is that gateway's own, with a budget too."""
        return gateways.principal(scope_key)

    def who(self, owner: str) -> str:
        ns, agent = gateways.split(owner)
        whose = f" of gateway {ns.rstrip(gateways.SEP)[:12]}" if ns else ""
        if agent:
            return f"agent {agent}{whose}"
        return f"gateway {ns.rstrip(gateways.SEP)[:12]}" if ns else "the gateway"  # its own, ownerless

    def caps(self, owner: str) -> tuple[int, int]:
        if self.config is None:
            most, budget = super().caps(owner)
        else:
            config = self.config()
            agent = gateways.split(owner)[1]
            cfg = config.exec_for(agent) if valid_name(agent) else config.exec
            most, budget = cfg.max_sessions_per_agent, cfg.max_output_bytes_per_agent
        given = GATEWAY_BUDGET.get()
        return most, budget if given is None else min(budget, given)
