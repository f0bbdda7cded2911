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
from runner.egress import EgressHub


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
        """No console attaches to a node: its connections are in its own history (`history/egress.jsonl`)."""


def node_egress(
    approvals: ApprovalManager,
    store: ApprovalsStore,
    grants: GrantStore,
    state_dir: Path,
    config: Callable[[], Config],
) -> EgressHub:
    return EgressHub(NodeEgressServices(approvals, store, grants, state_dir, config))
