"""Sandboxes on a node: the config under which a gateway-requested command is sandboxed here, and the
sandbox admin verbs (list/explain/recreate/prune) answered with this node's own Docker and config."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from engine.config.model import Config
from engine.sandbox import admin, default_manager
from engine.sandbox.docker_ops import SandboxUnavailable
from runner.node import gateways

METHODS = ("sandbox.list", "sandbox.explain", "sandbox.recreate", "sandbox.prune")


class SandboxRequestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def forced_sandbox_config(config: Config) -> Config:
    """The node's config as a gateway-requested sandbox sees it. Whether a command is sandboxed is the
    gateway's decision (a sandbox only tightens), so the node's own sandbox `mode` and exec `host` are not
    consulted; what the container looks like (image, docker hardening, scope, workspace, prune) is the node
    operator's, from this node's `agents.defaults.sandbox` and per-agent tables."""
    agents = {
        agent_id: replace(
            agent,
            exec={k: v for k, v in agent.exec.items() if k != "host"},
            sandbox={k: v for k, v in agent.sandbox.items() if k not in ("mode", "node")},
        )
        for agent_id, agent in config.agents.items()
    }
    return replace(
        config,
        exec=replace(config.exec, host="sandbox"),
        sandbox=replace(config.sandbox, mode="all", node=None),
        agents=agents,
    )


def _opt_str(params: dict[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 512 or "\x00" in value:
        raise SandboxRequestError("INVALID_REQUEST", f"INVALID_REQUEST: {key} must be a non-empty string")
    return value


def own_rows(rows: list[dict[str, Any]], ns: str) -> list[dict[str, Any]]:
    """The sandboxes of the gateway of namespace `ns` (their scope keys filed under it: settings.scope_key),
    each in that gateway's own terms; another gateway's read as absent."""
    out = []
    for row in rows:
        key = row.get("sessionKey")
        if isinstance(key, str) and gateways.owns(ns, key):
            out.append({**row, "sessionKey": gateways.split(key)[1]})
    return out


def _recreate(
    config: Config, ns: str, params: dict[str, Any], agent: str | None, manager: Any
) -> dict[str, Any]:
    """`sandbox.recreate` over the asking gateway's own sandboxes only (blocking)."""
    everything = params.get("all") is True
    session, name = _opt_str(params, "sessionKey"), _opt_str(params, "containerName")
    if sum([everything, session is not None, agent is not None, name is not None]) != 1:
        raise ValueError("Please specify exactly one of: all, sessionKey, agentId, containerName")
    rows = own_rows(admin.list_runtimes(config, manager), ns)
    if name is not None:
        chosen = [r for r in rows if r["containerName"] == name]
    else:
        chosen = admin.select(rows, all=everything, session=session, agent=agent)
    removed: list[str] = []
    failed: list[dict[str, str]] = []
    for row in chosen:
        if admin.remove(row["containerName"], manager):
            removed.append(row["containerName"])
        else:
            failed.append({"containerName": row["containerName"], "error": "docker rm -f failed"})
    if everything:  # spares are nobody's: an image rebuilt under the same tag reaches them only this way
        manager.prune_pool(config, everything=True)
    return {"removed": removed, "failed": failed}


async def handle(method: str, params: dict[str, Any], config: Config, ns: str = "") -> dict[str, Any]:
    """One admin verb on this node's sandboxes (Docker calls in a thread), for the gateway of namespace
    `ns` (runner.node.gateways): it lists, explains and recreates only its own, in its own terms."""
    config = forced_sandbox_config(config)
    manager = default_manager()
    agent = _opt_str(params, "agentId")
    try:
        if method == "sandbox.list":
            rows = await asyncio.to_thread(admin.list_runtimes, config, manager)
            return {"containers": own_rows(rows, ns)}
        if method == "sandbox.explain":
            key = _opt_str(params, "sessionKey")
            try:
                key = gateways.scoped(key, ns) if key else None
            except gateways.ForeignScope as exc:
                raise SandboxRequestError("INVALID_REQUEST", str(exc)) from None
            got = await asyncio.to_thread(admin.explain, config, agent or "main", key, ns)
            for field in ("sessionKey", "scopeKey"):
                if isinstance(got.get(field), str):
                    got[field] = gateways.split(got[field])[1]
            return got
        if method == "sandbox.recreate":
            try:
                return await asyncio.to_thread(_recreate, config, ns, params, agent, manager)
            except ValueError as exc:
                raise SandboxRequestError("INVALID_REQUEST", str(exc)) from None
        if method == "sandbox.prune":
            from engine.sandbox.settings import resolve_settings

            settings = resolve_settings(config, agent or "main")
            return {"removed": await manager.maybe_prune(settings, force=True)}
    except SandboxUnavailable as exc:
        raise SandboxRequestError("SANDBOX_UNAVAILABLE", str(exc)) from None
    raise SandboxRequestError("UNAVAILABLE", "command not supported")
