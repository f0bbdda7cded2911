"""Node selection (reference §5.7): exact id, remote IP, normalised display name, id prefix ≥ 6."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import ExecHostError


class NodeSelectError(ExecHostError):
    code = "tool_error"


@dataclass(frozen=True)
class Candidate:
    """What selection knows of one configured node (ids only once it has said hello)."""

    name: str  # the [nodes.<name>] key
    host: str
    node_id: str | None = None
    display_name: str | None = None  # the operator's (`[nodes.<name>] displayName`)
    connected: bool = False
    reported_name: str | None = None  # what the node's hello calls itself: a node may say anything

    @property
    def label(self) -> str:
        return self.display_name or self.reported_name or self.name

    @property
    def remote_ip(self) -> str | None:
        try:
            return str(ipaddress.ip_address(self.host))
        except ValueError:
            return None


def normalize_node_key(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


def _score(c: Candidate, query: str) -> int:
    """What the operator configured outranks what a node says of itself: a compromised node whose hello
    calls itself by another node's name must never be picked for a query naming that node."""
    q = query.strip()
    key = normalize_node_key(q)
    if q == c.name:
        return 5000
    if c.node_id and c.node_id == q:
        return 4000  # pinned to this configured node at its first hello (node-keys.json)
    if c.remote_ip and c.remote_ip == q:
        return 3000
    if key and key in {normalize_node_key(c.name), normalize_node_key(c.display_name or "")}:
        return 2000
    if key and c.reported_name and key == normalize_node_key(c.reported_name):
        return 1500
    if c.node_id and len(q) >= 6 and c.node_id.startswith(q):
        return 1000
    return 0


def select_node(candidates: Sequence[Candidate], query: str | None, bound: str | None = None) -> Candidate:
    """The one node `query` (or the bound `tools.exec.node`) names, or the reference's error text."""
    if bound and query and query.strip() != bound.strip():
        raise NodeSelectError(f"exec node not allowed (bound to {bound})")
    q = (query or bound or "").strip()
    if not candidates and q:
        raise NodeSelectError(
            f"unknown node: {q} (no nodes are configured; add one with: exechost nodes add NAME --host HOST)"
        )
    if not candidates:
        raise NodeSelectError(
            "exec host=node requires a paired node (none available). "
            "This requires a companion app or node host."
        )
    if not q:
        if len(candidates) == 1:
            return candidates[0]
        raise NodeSelectError(
            "exec host=node requires a node id when multiple nodes are available "
            "(set tools.exec.node or exec.node)."
        )
    scored = [(_score(c, q), c) for c in candidates]
    best = max(s for s, _ in scored)
    if best == 0:
        # The configured names: what `--node` and `nodes ping` take (a self-reported label may be neither).
        known = ", ".join(c.name for c in candidates)
        raise NodeSelectError(f"unknown node: {q} (known: {known})")
    top = [c for s, c in scored if s == best]
    if len(top) > 1:
        connected = [c for c in top if c.connected]
        if len(connected) == 1:
            return connected[0]
        matches = ", ".join(f"{c.label} [node={c.node_id or '?'}, client=exechost]" for c in top)
        raise NodeSelectError(f"ambiguous node: {q} (matches: {matches})")
    return top[0]
