"""Sandboxes on a node: the config under which a gateway-requested command is sandboxed here, and the
sandbox admin verbs (list/explain/recreate/prune) answered with this node's own Docker and config."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from engine.config.model import Config
from engine.sandbox import admin, default_manager
from engine.sandbox.docker_ops import SandboxUnavailable

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


async def handle(method: str, params: dict[str, Any], config: Config) -> dict[str, Any]:
    """One admin verb on this node's sandboxes (Docker calls in a thread)."""
    config = forced_sandbox_config(config)
    manager = default_manager()
    agent = _opt_str(params, "agentId")
    try:
        if method == "sandbox.list":
            rows = await asyncio.to_thread(admin.list_runtimes, config, manager)
            return {"containers": rows}
        if method == "sandbox.explain":
            key = _opt_str(params, "sessionKey")
            return await asyncio.to_thread(admin.explain, config, agent or "main", key)
        if method == "sandbox.recreate":
            try:
                return await asyncio.to_thread(
                    lambda: admin.recreate(
                        config,
                        all=params.get("all") is True,
                        session=_opt_str(params, "sessionKey"),
                        agent=agent,
                        name=_opt_str(params, "containerName"),
                        manager=manager,
                    )
                )
            except ValueError as exc:
                raise SandboxRequestError("INVALID_REQUEST", str(exc)) from None
        if method == "sandbox.prune":
            from engine.sandbox.settings import resolve_settings

            settings = resolve_settings(config, agent or "main")
            return {"removed": await manager.maybe_prune(settings, force=True)}
    except SandboxUnavailable as exc:
        raise SandboxRequestError("SANDBOX_UNAVAILABLE", str(exc)) from None
    raise SandboxRequestError("UNAVAILABLE", "command not supported")
