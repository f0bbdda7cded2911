"""Operator verbs over sandboxes (list, explain, recreate, prune, setup) shared by the CLI and the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from engine.sandbox import docker_ops
from engine.sandbox.manager import SandboxManager
from engine.sandbox.settings import (
    config_hash,
    is_sandboxed,
    layout,
    main_session_key,
    resolve_settings,
)
from engine.sandbox.validate import SandboxSecurityError, validate_docker


def _manager(manager: SandboxManager | None) -> SandboxManager:
    if manager is not None:
        return manager
    from engine.sandbox import default_manager

    return default_manager()


def list_runtimes(config: Any, manager: SandboxManager | None = None) -> list[dict[str, Any]]:
    return _manager(manager).list_runtimes(config)


def explain(config: Any, agent_id: str = "main", session_key: str | None = None) -> dict[str, Any]:
    """What `sandbox explain` shows: the effective config for an agent/session, sandboxed or direct."""
    settings = resolve_settings(config, agent_id)
    main_key = main_session_key(agent_id)
    session = session_key or main_key
    lay = layout(settings, agent_id, session)
    sandboxed = is_sandboxed(settings, agent_id, session)
    d = settings.docker
    problems: list[str] = []
    try:
        validate_docker(d, [lay.workspace_dir, lay.agent_workspace])
    except SandboxSecurityError as exc:
        problems.append(str(exc))
    elevated = (
        bool(config.elevated_enabled_for(agent_id)) if hasattr(config, "elevated_enabled_for") else False
    )
    return {
        "agentId": agent_id,
        "sessionKey": session,
        "mainSessionKey": main_key,
        "runtime": "sandboxed" if sandboxed else "direct",
        "mode": settings.mode,
        "scope": settings.scope,
        "scopeKey": lay.scope_key,
        "workspaceAccess": settings.workspace_access,
        "workspaceRoot": settings.workspace_root,
        "workspaceDir": lay.workspace_dir,
        "agentWorkspaceDir": lay.agent_workspace,
        "agentMount": lay.agent_mount,
        "containerName": lay.name,
        "configHash": config_hash(settings, lay),
        "docker": {
            "image": d.image,
            "workdir": d.workdir,
            "readOnlyRoot": d.read_only_root,
            "tmpfs": list(d.tmpfs),
            "network": d.network,
            "user": d.user,
            "capDrop": list(d.cap_drop),
            "pidsLimit": d.pids_limit,
            "memory": d.memory,
            "cpus": d.cpus,
            "ulimits": {k: f"{s}:{h}" for k, (s, h) in d.ulimits.items()},
            "seccompProfile": d.seccomp_profile,
            "apparmorProfile": d.apparmor_profile,
            "binds": list(d.binds),
            "envKeys": sorted(d.env),
            "setupCommand": d.setup_command,
        },
        "prune": {"idleHours": settings.idle_hours, "maxAgeDays": settings.max_age_days},
        "elevated": {"enabled": elevated},
        "problems": problems,
    }


def select(
    rows: list[dict[str, Any]], *, all: bool = False, session: str | None = None, agent: str | None = None
) -> list[dict[str, Any]]:
    """Reference §6.5: --agent matches `agent:<id>` or keys starting `agent:<id>:`."""
    if all:
        return list(rows)
    if session is not None:
        return [r for r in rows if r["sessionKey"] == session]
    if agent is not None:
        key = f"agent:{agent}"
        return [
            r
            for r in rows
            if r["sessionKey"] == key or r["sessionKey"].startswith(key + ":") or r.get("agentId") == agent
        ]
    return []


def remove(name: str, manager: SandboxManager | None = None) -> bool:
    return _manager(manager).remove_runtime(name)


def prune(config: Any, agent_id: str = "main", manager: SandboxManager | None = None) -> list[str]:
    settings = resolve_settings(config, agent_id)
    return asyncio.run(_manager(manager).maybe_prune(settings, force=True))


def setup_image(config: Any, progress: Callable[[str], None]) -> list[str]:
    """Build the default image under the image name the config uses (main agent's effective image)."""
    tags = [resolve_settings(config, "main").docker.image]
    docker_ops.build_image(tags, progress)
    return tags
