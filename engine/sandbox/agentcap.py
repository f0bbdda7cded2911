"""Each agent's live sandboxes, counted against its cap (`tools.exec.maxSandboxesPerAgent`, never more than
its `maxSessionsPerAgent`): a sandbox is one per scope the agent names (scope "session": one per session
key), each a running container with its containerd-shim outside the agent's pids and memory groups, or a
bwrap keeper; without a cap one agent keeps as many as it names keys.

A new sandbox of an agent at its cap first ends that agent's least recently used sandboxes that run no
command (their workspaces stay: the scope's next command starts a fresh one on the same files), never
another agent's; when every one of them is busy the new one is refused with a clear error."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.principals import is_operators, key_owner
from engine.sandbox.backend import backend_named
from engine.sandbox.registry import RegistryEntry
from engine.sandbox.settings import is_shared, split_namespace

DEFAULT_MAX_SANDBOXES_PER_AGENT = 16


def cap_for(config: object, agent_id: str) -> int:
    """The agent's sandbox cap: its maxSandboxesPerAgent, at most its maxSessionsPerAgent (a sandbox is
    where its sessions run; it needs no more of them than sessions it may keep)."""
    exec_for: Callable[[str], object] | None = getattr(config, "exec_for", None)
    if exec_for is None:
        return DEFAULT_MAX_SANDBOXES_PER_AGENT
    cfg = exec_for(agent_id)
    most = int(getattr(cfg, "max_sandboxes_per_agent", DEFAULT_MAX_SANDBOXES_PER_AGENT))
    return max(1, min(most, int(getattr(cfg, "max_sessions_per_agent", most))))


def owner_of(entry: RegistryEntry) -> str | None:
    """Whose a sandbox on record is: its agent, under the gateway's namespace its scope key was filed in
    on a shared node (settings.scope_key), so one gateway's agent never counts or ends another's."""
    namespace, own = split_namespace(entry.sessionKey)
    if is_operators(own):  # the operator's own (its browser naming an agent for policy): no agent's to count
        return None
    agent = entry.agentId or key_owner(own)
    return namespace + agent if agent else None


def owned(entries: list[RegistryEntry], owner: str, besides: str) -> list[RegistryEntry]:
    """The owner's (an agent's, or on a shared node a gateway's agent's) sandboxes on record other than
    `besides` (the one about to start); the shared scope's sandbox is nobody's own."""
    return [
        e
        for e in entries
        if owner_of(e) == owner
        and e.containerName != besides
        # (a gateway's own shared scope on a node, `<ns>shared`, is nobody's either)
        and split_namespace(e.sessionKey)[1] != "shared"
        and not is_shared(e.containerName)
    ]


def live(entries: list[RegistryEntry]) -> list[RegistryEntry]:
    """Those that run (blocking: one inspect each; only asked when the record alone reaches the cap)."""
    return [
        e for e in entries if backend_named(e.backendId, e.containerName).inspect(e.containerName).running
    ]


def to_end(
    running: list[RegistryEntry], cap: int, active: Mapping[str, int]
) -> tuple[list[RegistryEntry], int]:
    """(the idle sandboxes to end so one more fits, least recently used first; how many would still be
    over the cap because the rest run commands: 0 when the new one fits)."""
    excess = len(running) - cap + 1
    if excess <= 0:
        return [], 0
    idle = sorted(
        (e for e in running if active.get(e.containerName, 0) <= 0),
        key=lambda e: (e.lastUsedAtMs or e.createdAtMs, e.containerName),
    )
    chosen = idle[:excess]
    return chosen, excess - len(chosen)
