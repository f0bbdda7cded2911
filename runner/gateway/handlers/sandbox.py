"""`sandbox.list|explain|recreate|prune`: the operator's sandbox verbs over the control socket, here or (with
`node`) on a node; the list merges every connected node's sandboxes, each row with its node. An agent's
connection sees and recreates only its own containers; `all`, prune and shared ones are the operator's."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from engine import fairpool
from engine.errors import InvalidInput
from engine.lazymod import lazy
from engine.principals import check_node
from engine.protocol.requests import SandboxEgress, SandboxExplain, SandboxList, SandboxPrune, SandboxRecreate
from engine.results import ToolError
from engine.sandbox import default_manager
from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.egress.proxy import OPERATOR_ONLY
from runner.gateway.handlers.common import agent_id, require_operator, session_key

admin = lazy("engine.sandbox.admin")  # the operator's sandbox verbs: loaded on first use, not at start

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


def _node(given: str | None) -> str | None:
    raw = (given or "").strip()
    return check_node(raw) if raw else None


def _agent(conn: Connection) -> str | None:
    """Whose node choice applies ([[agents.list]] nodes): an agent's own; the operator may use every node."""
    return None if conn.operator else conn.agent


def _owned(conn: Connection, row: dict[str, Any]) -> bool:
    """An agent's own container: made for it, and not the one every agent shares (scope = shared)."""
    return conn.operator or (row.get("agentId") == conn.agent and row.get("sessionKey") != "shared")


async def list_(services: Services, conn: Connection, req: SandboxList) -> dict[str, Any]:
    node = _node(req.node)
    if node is not None:
        name, payload = await services.nodes.sandbox_call(node, "sandbox.list", {}, _agent(conn))
        rows = [{**r, "node": name} for r in payload.get("containers") or [] if _owned(conn, r)]
        return {"containers": rows}
    errors: list[dict[str, Any]] = []
    try:
        rows = await fairpool.offload(
            fairpool.blocking, functools.partial(admin.list_runtimes, services.config(), default_manager())
        )
    except SandboxUnavailable as exc:
        if not services.config().nodes:
            raise ToolError(str(exc)) from None
        rows, errors = [], [{"node": None, "error": str(exc)}]
    rows = [{**r, "node": None} for r in rows]
    node_rows, node_errors = await services.nodes.sandbox_lists()
    out: dict[str, Any] = {"containers": [r for r in rows + node_rows if _owned(conn, r)]}
    if errors or node_errors:
        out["errors"] = errors + node_errors
    return out


async def explain(services: Services, conn: Connection, req: SandboxExplain) -> dict[str, Any]:
    key = session_key(conn, req.session_key) or None
    agent = agent_id(conn, req.agent_id)
    node = _node(req.node)
    if node is not None:
        forwarded = {"agentId": agent, **({"sessionKey": key} if key else {})}
        name, payload = await services.nodes.sandbox_call(node, "sandbox.explain", forwarded, _agent(conn))
        return {**payload, "node": name}
    return await fairpool.offload(
        fairpool.blocking, functools.partial(admin.explain, services.config(), agent, key)
    )


async def recreate(services: Services, conn: Connection, req: SandboxRecreate) -> dict[str, Any]:
    """Remove the selected containers; they are recreated with the current config on next use."""
    everything = req.all_ is True
    key = req.session_key
    agent = req.agent_id
    name = req.container_name
    if sum([everything, key is not None, agent is not None, name is not None]) != 1:
        raise InvalidInput("Please specify exactly one of: all, sessionKey, agentId, containerName")
    if agent is not None:
        agent = agent_id(conn, agent)  # an agent names only itself
    if key is not None:
        key = session_key(conn, key)
    if everything:
        require_operator(conn, "sandbox.recreate all")  # every agent's containers
    node = _node(req.node)
    if node is not None and name is not None:
        require_operator(conn, "sandbox.recreate of a node container by name")
    if node is not None:
        chosen = {"all": everything, "sessionKey": key, "agentId": agent, "containerName": name}
        forwarded = {k: v for k, v in chosen.items() if v not in (None, False)}
        node_name, payload = await services.nodes.sandbox_call(
            node, "sandbox.recreate", forwarded, _agent(conn)
        )
        return {**payload, "node": node_name}
    if not conn.operator:
        return await fairpool.offload(
            fairpool.blocking, functools.partial(_recreate_own, services, conn, key, agent, name)
        )
    try:
        return await asyncio.to_thread(
            lambda: admin.recreate(
                services.config(),
                all=everything,
                session=key,
                agent=agent,
                name=name,
                manager=default_manager(),
            )
        )
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None


def _recreate_own(
    services: Services, conn: Connection, key: str | None, agent: str | None, name: str | None
) -> dict[str, Any]:
    """An agent's recreate: the selector applied to its own containers only; another agent's container
    name reads exactly like a name that does not exist (nothing removed)."""
    try:
        rows = [r for r in admin.list_runtimes(services.config(), default_manager()) if _owned(conn, r)]
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    if name is not None:
        chosen = [r for r in rows if r["containerName"] == name]
    else:
        chosen = admin.select(rows, session=key, agent=agent)
    removed: list[str] = []
    failed: list[dict[str, str]] = []
    for row in chosen:
        if admin.remove(row["containerName"], default_manager()):
            removed.append(row["containerName"])
        else:
            failed.append({"containerName": row["containerName"], "error": "docker rm -f failed"})
    return {"removed": removed, "failed": failed}


async def prune(services: Services, conn: Connection, req: SandboxPrune) -> dict[str, Any]:
    from engine.sandbox.settings import resolve_settings

    # A prune sweeps every agent's idle containers and browsers: the operator's call. An agent removes
    # its own with sandbox.recreate.
    require_operator(conn, "sandbox.prune")
    agent = agent_id(conn, req.agent_id)
    node = _node(req.node)
    if node is not None:
        name, payload = await services.nodes.sandbox_call(node, "sandbox.prune", {"agentId": agent})
        return {**payload, "node": name}
    settings = resolve_settings(services.config(), agent)
    try:
        removed = await default_manager().maybe_prune(settings, force=True)
        removed += await asyncio.to_thread(default_manager().prune_pool, services.config())
        browsers = await services.browsers.manager.prune(settings.idle_hours, settings.max_age_days)
        for name in browsers:
            await services.browsers.stop("main", "", name)  # closes its door and CDP connection too
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    return {"removed": removed + browsers}


async def egress(services: Services, conn: Connection, req: SandboxEgress) -> dict[str, Any]:
    """Recent connections through the egress proxy, newest first; an agent sees only its own."""
    agent = req.agent_id
    if agent is not None or not conn.operator:
        agent = agent_id(conn, agent)
    limit = 50 if req.limit is None else req.limit
    if not 0 < limit <= 1000:
        raise InvalidInput("limit must be an integer from 1 to 1000")
    rows = await services.egress.connections(agent, limit)
    if not conn.operator:  # what its refusals withheld from the sandbox stays withheld here
        rows = [{k: v for k, v in row.items() if k not in OPERATOR_ONLY} for row in rows]
    return {"connections": rows}
