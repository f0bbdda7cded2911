"""`sandbox.list|explain|recreate|prune`: the operator's sandbox verbs over the control socket, here or (with
`node`) on a node; the list merges every connected node's sandboxes, each row with its node."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidInput
from engine.results import ToolError
from engine.sandbox import admin, default_manager
from engine.sandbox.docker_ops import SandboxUnavailable
from runner.gateway.handlers.common import agent_id, opt_str, session_key

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


def _node(params: dict[str, Any]) -> str | None:
    return (opt_str(params, "node") or "").strip() or None


async def list_(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    node = _node(params)
    if node is not None:
        name, payload = await services.nodes.sandbox_call(node, "sandbox.list", {})
        return {"containers": [{**r, "node": name} for r in payload.get("containers") or []]}
    errors: list[dict[str, Any]] = []
    try:
        rows = await asyncio.to_thread(admin.list_runtimes, services.config(), default_manager())
    except SandboxUnavailable as exc:
        if not services.config().nodes:
            raise ToolError(str(exc)) from None
        rows, errors = [], [{"node": None, "error": str(exc)}]
    rows = [{**r, "node": None} for r in rows]
    node_rows, node_errors = await services.nodes.sandbox_lists()
    out: dict[str, Any] = {"containers": rows + node_rows}
    if errors or node_errors:
        out["errors"] = errors + node_errors
    return out


async def explain(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    key = session_key(params) or None
    node = _node(params)
    if node is not None:
        forwarded = {"agentId": agent_id(params), **({"sessionKey": key} if key else {})}
        name, payload = await services.nodes.sandbox_call(node, "sandbox.explain", forwarded)
        return {**payload, "node": name}
    return await asyncio.to_thread(admin.explain, services.config(), agent_id(params), key)


async def recreate(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Remove the selected containers; they are recreated with the current config on next use."""
    everything = params.get("all") is True
    key = opt_str(params, "sessionKey")
    agent = opt_str(params, "agentId")
    name = opt_str(params, "containerName")
    if sum([everything, key is not None, agent is not None, name is not None]) != 1:
        raise InvalidInput("Please specify exactly one of: all, sessionKey, agentId, containerName")
    node = _node(params)
    if node is not None:
        chosen = {"all": everything, "sessionKey": key, "agentId": agent, "containerName": name}
        forwarded = {k: v for k, v in chosen.items() if v not in (None, False)}
        node_name, payload = await services.nodes.sandbox_call(node, "sandbox.recreate", forwarded)
        return {**payload, "node": node_name}
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


async def prune(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    from engine.sandbox.settings import resolve_settings

    node = _node(params)
    if node is not None:
        name, payload = await services.nodes.sandbox_call(
            node, "sandbox.prune", {"agentId": agent_id(params)}
        )
        return {**payload, "node": name}
    settings = resolve_settings(services.config(), agent_id(params))
    try:
        removed = await default_manager().maybe_prune(settings, force=True)
        browsers = await services.browsers.manager.prune(settings.idle_hours, settings.max_age_days)
        for name in browsers:
            await services.browsers.stop("main", "", name)  # closes its door and CDP connection too
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    return {"removed": removed + browsers}
