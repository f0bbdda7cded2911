"""Docker sandboxes: where host=sandbox commands run. `prepare_exec` is the gateway's entry point."""

from __future__ import annotations

import asyncio
import functools
import os
import posixpath
from dataclasses import dataclass, field, replace
from typing import Any

from engine.policy.decision import Decision
from engine.results import ToolError
from engine.sandbox import agentcap, bwrap, bwrapterm, docker_ops
from engine.sandbox import supervisor as sv
from engine.sandbox.errors import SandboxError
from engine.sandbox.launcher import SandboxLauncher
from engine.sandbox.manager import Ensured, SandboxManager
from engine.sandbox.settings import (
    AGENT_MOUNT,
    Layout,
    SandboxSettings,
    layout,
    main_session_key,
    resolve_settings,
)
from engine.sandbox.validate import docker_writable, validate_docker
from engine.sandbox.workspace import WorkspaceError, has_skills, sync_skills
from engine.sessions.launcher import workdir_warning

__all__ = [
    "SandboxError",
    "SandboxExec",
    "SandboxManager",
    "default_manager",
    "map_workdir",
    "prepare_exec",
    "resolve_settings",
    "set_default_manager",
]


@dataclass
class SandboxExec:
    """Everything the exec pipeline needs to run one command in a sandbox."""

    launcher: SandboxLauncher
    cwd: str  # inside the container
    env: dict[str, str]  # base env for the command (HOME etc.); params.env goes in RunSpec.env on top
    warnings: list[str] = field(default_factory=list)
    container: str = ""
    scope_key: str = ""
    workspace_dir: str = ""  # on the host
    created: bool = False
    stale_config: bool = False


_default: SandboxManager | None = None


def default_manager() -> SandboxManager:
    global _default
    if _default is None:
        _default = SandboxManager()
    return _default


def set_default_manager(manager: SandboxManager | None) -> None:
    global _default
    _default = manager


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def map_workdir(raw: str | None, settings: SandboxSettings, lay: Layout) -> tuple[str, list[str]]:
    """Container cwd for a requested workdir (reference §1.6): container paths under the workdir (or /agent)
    map onto the host dirs; `..`, absolute escapes and symlinks leading out fall back to the workdir root with
    the reference warning instead of failing."""
    root = settings.docker.workdir
    if raw is None or raw == "" or raw == root:
        return root, []
    fallback = [workdir_warning(raw, root)]
    if not isinstance(raw, str) or "\x00" in raw:
        return root, fallback
    mounts = [(root, lay.workspace_dir)]
    if lay.agent_mount is not None:
        mounts.append((AGENT_MOUNT, lay.agent_mount))
    candidate = raw if raw.startswith("/") else posixpath.join(root, raw)
    # A host path inside a mounted dir is accepted too and translated (agents often echo host paths).
    for container_root, host_root in mounts:
        if _inside(host_root, raw):
            candidate = container_root + raw[len(host_root.rstrip("/")) :]
    for container_root, host_root in mounts:
        rel = posixpath.relpath(posixpath.normpath(candidate), container_root)
        if candidate.startswith("/") and not _inside(container_root, posixpath.normpath(candidate)):
            continue
        if rel == ".." or rel.startswith("../") or rel.startswith("/"):
            continue
        host = os.path.join(host_root, rel) if rel != "." else host_root
        real_root = os.path.realpath(host_root)
        real = os.path.realpath(host)
        if not _inside(real_root, real) or not os.path.isdir(real):
            return root, fallback
        return (container_root if rel == "." else posixpath.join(container_root, rel)), []
    return root, fallback


async def prepare_exec(
    config: Any,
    agent_id: str,
    session_key: str,
    workdir: str | None,
    *,
    path_prepend: list[str] | None = None,
    manager: SandboxManager | None = None,
    namespace: str = "",
) -> SandboxExec:
    """Ensure the agent/session's container (create, start or keep) and return how to run in it.

    `workdir` is the raw `workdir` tool parameter (a container path such as /workspace/sub, or None).
    `namespace`: the calling gateway's on a shared node (ExecContext.namespace): the scope is its own.
    Raises engine.results.ToolError with a message for the agent when no sandbox can be provided.
    """
    mgr = manager or default_manager()
    agent = agent_id or "main"
    settings = resolve_settings(config, agent)
    lay = layout(settings, agent, session_key or main_session_key(agent), namespace=namespace)
    mgr.pool.sync(config)  # a reloaded config drops the spares it no longer asks for
    try:
        await mgr.maybe_prune(settings)
        cap = agentcap.cap_for(config, agent_id or "main")
        ensured: Ensured = await mgr.ensure(settings, lay, agent_id or "main", max_sandboxes=cap)
    except (SandboxError, docker_ops.SandboxUnavailable, sv.SupervisorUnavailable) as exc:
        raise ToolError(str(exc)) from None
    synced: list[str] = []
    # Under rw the agent workspace, skills included, is mounted; without a skills dir there is nothing to do.
    if settings.workspace_access != "rw" and has_skills(lay.agent_workspace):
        # What the sandbox left in its own workspace may refuse a copy; it never stops the command.
        try:
            done = await asyncio.to_thread(
                sync_skills, settings.workspace_root, lay.agent_workspace, lay.sandbox_workspace
            )
            synced = done.refused
        except (WorkspaceError, OSError) as exc:
            synced = [f"skills sync into the sandbox workspace failed: {exc}; the command runs without it"]
    cwd, warnings = map_workdir(workdir, settings, lay)
    if path_prepend is None and config is not None and hasattr(config, "exec_for"):
        path_prepend = list(config.exec_for(agent_id).path_prepend or [])
    base_env = {"HOME": settings.docker.workdir}
    known = mgr._known.get(lay.name)
    has_busybox = known.has_busybox if known else (sv.bin_dir() / "busybox").exists()
    terminal = None
    if settings.backend == "bwrap":
        terminal = functools.partial(bwrapterm.terminal, settings, lay, has_busybox, mgr.session_host)
    launcher = SandboxLauncher(
        container=lay.name,
        channel=sv.Channel(lay.name),
        api_factory=lambda: docker_ops.client().api,
        explicit_env=frozenset(settings.docker.env),
        base_env=base_env,
        path_prepend=":".join(path_prepend) if path_prepend else None,
        has_busybox=has_busybox,
        cwd=cwd,
        roots=(settings.docker.workdir,) + ((AGENT_MOUNT,) if lay.agent_mount else ()),
        activity=mgr.activity(lay.name),
        session_host=mgr.session_host,
        use_slots=not ensured.stale,  # a stale container may still run a supervisor older than slots
        terminal=terminal,
    )
    return SandboxExec(
        launcher=launcher,
        cwd=cwd,
        env=base_env,
        warnings=[*ensured.warnings, *synced, *warnings],
        container=lay.name,
        scope_key=lay.scope_key,
        workspace_dir=lay.workspace_dir,
        created=ensured.created,
        stale_config=ensured.stale,
    )


def with_sandbox_refusal(decision: Decision, config: Any, agent_id: str) -> Decision:
    """`policy check` says what `exec` would do: a sandboxed command whose container config would be
    refused at create (network=host, a bind of /etc, …) is denied here with the same text."""
    policy = decision.policy
    if policy is None or not policy.sandboxed or decision.verdict == "deny":
        return decision
    settings = resolve_settings(config, agent_id)
    lay = layout(settings, agent_id, main_session_key(agent_id))
    try:
        validate_docker(
            settings.docker, [lay.workspace_dir, lay.agent_workspace], docker_writable(settings, lay)
        )
        if settings.backend == "bwrap" and settings.docker.network not in ("", "none"):
            raise ValueError(bwrap.network_refusal(lay.name, settings.docker.network))
    except ValueError as exc:
        return replace(decision, verdict="deny", reason=str(exc), requires_approval=False)
    return decision
