"""`sandbox.list|explain|recreate|prune`: the operator's sandbox verbs over the control socket."""

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


async def list_(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    try:
        rows = await asyncio.to_thread(admin.list_runtimes, services.config(), default_manager())
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    return {"containers": rows}


async def explain(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    key = session_key(params) or None
    return await asyncio.to_thread(admin.explain, services.config(), agent_id(params), key)


async def recreate(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """Remove the selected containers; they are recreated with the current config on next use."""
    everything = params.get("all") is True
    key = opt_str(params, "sessionKey")
    agent = opt_str(params, "agentId")
    name = opt_str(params, "containerName")
    if sum([everything, key is not None, agent is not None, name is not None]) != 1:
        raise InvalidInput("Please specify exactly one of: all, sessionKey, agentId, containerName")
    try:
        rows = await asyncio.to_thread(admin.list_runtimes, services.config(), default_manager())
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    if name is not None:
        chosen = [r for r in rows if r["containerName"] == name]
    else:
        chosen = admin.select(rows, all=everything, session=key, agent=agent)
    removed: list[str] = []
    failed: list[dict[str, str]] = []
    for row in chosen:
        ok = await asyncio.to_thread(admin.remove, row["containerName"], default_manager())
        if ok:
            removed.append(row["containerName"])
        else:
            failed.append({"containerName": row["containerName"], "error": "docker rm -f failed"})
    return {"removed": removed, "failed": failed}


async def prune(services: Services, conn: Connection, params: dict[str, Any]) -> dict[str, Any]:
    from engine.sandbox.settings import resolve_settings

    settings = resolve_settings(services.config(), agent_id(params))
    try:
        removed = await default_manager().maybe_prune(settings, force=True)
        browsers = await services.browsers.manager.prune(settings.idle_hours, settings.max_age_days)
        for name in browsers:
            await services.browsers.stop("main", "", name)  # closes its door and CDP connection too
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    return {"removed": removed + browsers}
