"""A node's egress: its sandboxes' proxy runs here, on the node, with the node's own `[sandbox.egress]` and
approvals file (the gateway's policy never widens a node's). An unknown name asks through the node's
approval manager, which relays the ask to the gateway's inbox like a command ask (runner.node.approvals);
the node keeps its allow-always names and grants, and its own connection history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.approvals.grants import GrantStore
from engine.approvals.pending import ApprovalManager
from engine.approvals.store import ApprovalsStore
from engine.config.model import Config
from engine.sandbox.egress.proxy import Request
from runner.egress import EgressHub
from runner.node import gateways
from runner.node.approvals import CURRENT_RUN


class NodeEgressServices:
    """runner.egress.EgressServices from a node server's parts (`config`: its sandboxes' config)."""

    def __init__(
        self,
        approvals: ApprovalManager,
        store: ApprovalsStore,
        grants: GrantStore,
        state_dir: Path,
        config: Callable[[], Config],
    ) -> None:
        self.approvals = approvals
        self.store = store
        self.grants = grants
        self.state_dir = state_dir
        self._config = config

    def config(self) -> Config:
        return self._config()

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None:
        """No console attaches to a node: its connections are in its own history (`history/egress/`)."""


def node_egress(
    approvals: ApprovalManager,
    store: ApprovalsStore,
    grants: GrantStore,
    state_dir: Path,
    config: Callable[[], Config],
    runs: dict[str, list[tuple[str, str]]],
) -> EgressHub:
    """`runs`: (gateway namespace, run id) of the gateways' runs in flight here, per owner (namespace and
    agent, ExecContext.owner). A gateway takes a node's ask only for a run of its own in flight on that link
    (it names the agent and session, never the node): an egress ask goes as part of its sandbox's owner's
    latest call in flight (the principal of a sandbox's connections is its owner: SandboxManager), to the
    link of that call's gateway, never another gateway's call of the same agent name; with none (a
    background job after its call returned), the ask finds no run there and the connection is refused."""

    def bind(req: Request) -> Callable[[], None]:
        namespace, run_id = (runs.get(req.agent_id) or [("", "")])[-1]
        run_token = CURRENT_RUN.set(run_id)
        gateway_token = gateways.CURRENT_GATEWAY.set(namespace)

        def unbind() -> None:
            gateways.CURRENT_GATEWAY.reset(gateway_token)
            CURRENT_RUN.reset(run_token)

        return unbind

    return EgressHub(NodeEgressServices(approvals, store, grants, state_dir, config), bind_ask=bind)
