"""Operator verbs over sandboxes (list, explain, recreate, prune, setup) shared by the CLI and the gateway."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from engine.config.schema import BUSYBOX_SANDBOX_IMAGE
from engine.sandbox import (
    bindfds,
    bwraplimits,
    bwrapview,
    docker_ops,
    dockercg,
    landlock,
    rambudget,
    sandboxuid,
    seccomp,
    wsprune,
)
from engine.sandbox.browser import BrowserManager, browser_layout, effective_docker
from engine.sandbox.egress import forwarder
from engine.sandbox.images import (
    BROWSER_FLAVOUR,
    BROWSER_PACKAGES,
    DEBIAN_FLAVOUR,
    build_debian_image,
    build_from_registry,
)
from engine.sandbox.manager import SandboxManager
from engine.sandbox.settings import (
    Layout,
    SandboxSettings,
    config_hash,
    is_sandboxed,
    layout,
    main_session_key,
    resolve_settings,
)
from engine.sandbox.supervisor import bin_dir, supervisor_command
from engine.sandbox.toolpolicy import tool_refusal
from engine.sandbox.validate import (
    SandboxSecurityError,
    docker_writable,
    sanitize_container_env,
    validate_docker,
)

T = TypeVar("T")


def _manager(manager: SandboxManager | None) -> SandboxManager:
    if manager is not None:
        return manager
    from engine.sandbox import default_manager

    return default_manager()


def list_runtimes(config: Any, manager: SandboxManager | None = None) -> list[dict[str, Any]]:
    return _manager(manager).list_runtimes(config)


def list_spares() -> list[str]:
    """This install's ready pool containers (engine.sandbox.pool): claimed by no scope yet."""
    from engine.sandbox.pool import is_pool_name

    names = [str(c["Names"][0]).lstrip("/") for c in docker_ops.list_sandboxes(docker_ops.POOL_LABEL)]
    return sorted(n for n in names if is_pool_name(n))


def list_browsers() -> list[dict[str, Any]]:
    """This install's browser sandboxes (`sandbox list --browser`), each asked for its page."""
    return [info.to_dict() for info in _run(BrowserManager().runtimes())]


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """These verbs are the sync CLI's; a caller already inside an event loop gets a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _egress_explained(settings: SandboxSettings, lay: Layout) -> dict[str, Any]:
    """The sandbox's way out: its egress rules, and where its proxy socket is (engine.sandbox.egress)."""
    e = settings.egress
    on = e.mode != "none"
    return {
        "mode": e.mode,
        "allow": [p.text for p in e.allow],
        "deny": [p.text for p in e.deny],
        "ask": e.ask,
        "resolve": dict(e.resolve),
        "maxConnections": e.max_connections,
        "socket": str(forwarder.socket_dir(lay.name) / forwarder.SOCKET_NAME) if on else None,
        "proxy": forwarder.PROXY_URL if on else None,
    }


def explain(
    config: Any, agent_id: str = "main", session_key: str | None = None, namespace: str = ""
) -> dict[str, Any]:
    """What `sandbox explain` shows: the effective config for an agent/session, sandboxed or direct.
    `namespace`: the asking gateway's on a shared node (its scopes are its own: settings.scope_key)."""
    settings = resolve_settings(config, agent_id)
    main_key = main_session_key(agent_id)
    session = session_key or main_key
    lay = layout(settings, agent_id, session, namespace=namespace)
    sandboxed = is_sandboxed(settings.mode, agent_id, session)
    d = settings.docker
    problems: list[str] = []
    try:
        validate_docker(d, [lay.workspace_dir, lay.agent_workspace], writable=docker_writable(settings, lay))
    except SandboxSecurityError as exc:
        problems.append(str(exc))
    b = settings.browser
    blay = browser_layout(settings, agent_id, session)
    try:
        validate_docker(effective_docker(settings), [blay.workspace_dir], writable=[blay.workspace_dir])
    except SandboxSecurityError as exc:
        if b.enabled:
            problems.append(f"browser: {exc}")
    bw = (
        _bwrap_explained(settings, lay, problems, namespace + agent_id)
        if settings.backend == "bwrap"
        else None
    )
    allow, deny = config.sandbox_tools_for(agent_id) if config is not None else ([], [])
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
        # all of the agent's workspaces together (engine.sandbox.wsbudget); None: a quarter of their disk
        "maxWorkspaceBytesPerAgent": settings.max_workspace_bytes,
        "workspaceDir": lay.workspace_dir,
        "agentWorkspaceDir": lay.agent_workspace,
        "agentMount": lay.agent_mount,
        "containerName": lay.name,
        "backend": settings.backend,
        "configHash": config_hash(settings, lay),
        "toolPolicy": {"allow": allow, "deny": deny},
        "egress": _egress_explained(settings, lay),
        "docker": {
            "image": d.image,
            "containerPrefix": d.container_prefix,
            "workdir": d.workdir,
            "readOnlyRoot": d.read_only_root,
            "tmpfs": list(d.tmpfs),
            "network": d.network,
            "user": d.user,
            "capDrop": list(d.cap_drop),
            "pidsLimit": d.pids_limit,
            "memory": d.memory,
            "memorySwap": d.memory_swap,
            "cpus": d.cpus,
            "ulimits": {k: f"{s}:{h}" for k, (s, h) in d.ulimits.items()},
            "seccompProfile": d.seccomp_profile,
            # What a container gets where a key is unset: the RAM budget's sizes and our profile.
            "applied": {
                "memory": rambudget.container_memory(d.memory),
                "tmpfs": rambudget.docker_tmpfs(d.tmpfs),
                "shmSize": rambudget.SHM_BYTES,
                "seccomp": d.seccomp_profile or "exechost (engine/sandbox/dockerseccomp.py)",
            },
            "apparmorProfile": d.apparmor_profile,
            "dns": list(d.dns),
            "extraHosts": list(d.extra_hosts),
            "binds": list(d.binds),
            "envKeys": sorted(d.env),
            "setupCommand": d.setup_command,
            "pool": d.pool,
            "dangerouslyAllowReservedContainerTargets": d.dangerously_allow_reserved_container_targets,
            "dangerouslyAllowExternalBindSources": d.dangerously_allow_external_bind_sources,
            "dangerouslyAllowContainerNamespaceJoin": d.dangerously_allow_container_namespace_join,
        },
        "browser": {
            "enabled": b.enabled,
            "containerName": blay.name,
            "image": b.image,
            "containerPrefix": b.container_prefix,
            "network": b.network,
            "cdpPort": b.cdp_port,
            "vncPort": b.vnc_port,
            "noVncPort": b.no_vnc_port,
            "headless": b.headless,
            "enableNoVnc": b.enable_no_vnc,
            "autoStart": b.auto_start,
            "autoStartTimeoutMs": b.auto_start_timeout_ms,
            "binds": list(effective_docker(settings).binds),
            "toolAllowed": tool_refusal("browser", allow, deny) is None,
            "access": "CDP and noVNC on Unix sockets in a 0700 dir; the gateway's token door relays them",
        },
        "bwrap": bw,
        "prune": {"idleHours": settings.idle_hours, "maxAgeDays": settings.max_age_days},
        "elevated": {"enabled": elevated},
        "hostView": _host_view_explained(config, agent_id, problems),
        "problems": problems,
    }


def _host_view_explained(config: Any, agent_id: str, problems: list[str]) -> dict[str, Any]:
    """What a gateway-host command of this agent sees (engine.commands.hostview)."""
    from engine.commands import hostkeeper, hostview

    mode = config.exec_for(agent_id).host_view if hasattr(config, "exec_for") else "bwrap"
    found = hostview.bwrap_path()
    if mode == "none":
        sees = "the whole host: the state dir (tokens, approvals file) and writable trusted configs"
    else:
        sees = (
            "the host with the state dir an empty tmpfs and git/npm/cargo/shell configs read-only, "
            "and only their own processes"
        )
        if found is None:
            problems.append(f"hostView: {hostview.INSTALL_HINT}")
    # kept: entered per run (engine.commands.hostkeeper); without the helper, a bwrap per run
    helper = hostkeeper.helper_path()
    return {
        "mode": mode,
        "bwrap": found,
        "kept": helper,
        "gatewayHostCommandsSee": sees,
        "pidsCap": bwraplimits.host_pids_cap(helper),  # with or without the view (engine.tools.exec_host)
        "memoryCap": bwraplimits.host_memory_cap(helper),
    }


SECCOMP_SHOWN = "<fd: libseccomp filter>"


def _bwrap_explained(
    settings: SandboxSettings, lay: Layout, problems: list[str], agent: str
) -> dict[str, Any]:
    """The bwrap argv the scope's sandbox starts with (env values redacted), and what bounds it; its host
    uid under a root gateway (engine.sandbox.sandboxuid; None: the gateway's own)."""
    try:
        exe = bwrapview.find_bwrap()
    except docker_ops.SandboxUnavailable as exc:
        problems.append(str(exc))
        exe = "bwrap"
    d = settings.docker
    env = sanitize_container_env(d.env, explicit=d.env.keys()).env
    has_bb = (bin_dir() / "busybox").exists()
    layer = landlock.status(settings.bwrap_landlock, build=False)
    shown_layer: dict[str, Any] = layer.to_dict()
    try:
        command = supervisor_command(has_bb)
        how = bwrapview.plan(
            settings,
            lay,
            bwrap=exe,
            env=env,
            seccomp=-1,
            command=command,
            layer=layer,
            binds=bindfds.shown(d),
        )
        argv = [SECCOMP_SHOWN if a == "-1" else a for a in how.argv]
        shown_env = bwrapview.redacted_env(how.env)
        limits = {bwrapview.PRLIMIT_NAMES[k]: f"{s}:{h}" for k, (s, h) in how.rlimits.items()}
        if how.ruleset is not None:
            shown_layer.update(how.ruleset.explained())
    except docker_ops.SandboxUnavailable as exc:
        problems.append(str(exc))
        argv, limits, shown_env = [], {}, {}
    if d.network not in ("", "none"):
        problems.append(f'bwrap: docker.network = "{d.network}" is not available here (no network)')
    try:
        host_uid = sandboxuid.for_owner(dockercg.owner_of(settings.scope, agent))
    except docker_ops.SandboxUnavailable as exc:
        problems.append(str(exc))
        host_uid = None
    return {
        "rootfs": settings.bwrap_rootfs,
        "hostUid": host_uid,
        "argv": argv,
        "env": shown_env,
        "rlimits": limits,
        "pidsCap": bwraplimits.pids_cap(),
        "landlock": shown_layer,
        "refusedSyscalls": list(seccomp.REFUSED_SYSCALLS),
        "ignoredDockerKeys": [
            "image",
            "user",
            "cpus",
            "seccompProfile",
            "apparmorProfile",
            "dns",
            "extraHosts",
            "pool",
            "memorySwap",
        ],
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


def recreate(
    config: Any,
    *,
    all: bool = False,
    session: str | None = None,
    agent: str | None = None,
    name: str | None = None,
    manager: SandboxManager | None = None,
) -> dict[str, Any]:
    """Remove the chosen containers (exactly one selector); they are recreated with the current config on
    next use. Blocking (Docker calls): run it in a thread. ValueError when the selectors are wrong."""
    if sum([all, session is not None, agent is not None, name is not None]) != 1:
        raise ValueError("Please specify exactly one of: all, sessionKey, agentId, containerName")
    rows = list_runtimes(config, manager)
    if name is not None:
        chosen = [r for r in rows if r["containerName"] == name]
    else:
        chosen = select(rows, all=all, session=session, agent=agent)
    removed: list[str] = []
    failed: list[dict[str, str]] = []
    for row in chosen:
        if remove(row["containerName"], manager):
            removed.append(row["containerName"])
        else:
            failed.append({"containerName": row["containerName"], "error": "docker rm -f failed"})
    if all:  # spares too: an image rebuilt under the same tag reaches them only this way
        _manager(manager).prune_pool(config, everything=True)
    return {"removed": removed, "failed": failed}


def prune(config: Any, agent_id: str = "main", manager: SandboxManager | None = None) -> list[str]:
    """Sandboxes and browser sandboxes idle past idleHours or older than maxAgeDays, removed now."""
    settings = resolve_settings(config, agent_id)

    async def both() -> list[str]:
        mgr = _manager(manager)
        removed = await mgr.maybe_prune(settings, force=True)
        removed += await asyncio.to_thread(mgr.prune_pool, config)  # spares of configs no longer asked for
        return removed + await BrowserManager().prune(settings.idle_hours, settings.max_age_days)

    return _run(both())


def prune_workspaces(config: Any, manager: SandboxManager | None = None) -> list[wsprune.Pruned]:
    """The workspaces of sandboxes that no longer exist, removed (engine.sandbox.wsprune); blocking."""
    return wsprune.prune(config, _manager(manager))


# Set by the images `sandbox setup` builds (the busybox Dockerfile, the Debian and browser imports): marks
# an image setup may rebuild; it never overwrites anyone else's.
SETUP_LABEL = ("exechost.image", "busybox")
SETUP_FLAVOURS = ("busybox", DEBIAN_FLAVOUR, BROWSER_FLAVOUR)
BUSYBOX = "busybox"


def setup_target(config: Any, flavour: str | None = None) -> str:
    """The name `sandbox setup` builds under: the main agent's effective image (the browser image for the
    browser); `--busybox` with a Debian-named image builds the busybox one under its own name."""
    settings = resolve_settings(config, "main")
    if flavour == BROWSER_FLAVOUR:
        return settings.browser.image
    tag = settings.docker.image
    if flavour == BUSYBOX and setup_flavour(tag) == DEBIAN_FLAVOUR:
        return BUSYBOX_SANDBOX_IMAGE
    return tag


def setup_flavour(tag: str) -> str:
    """What `sandbox setup` builds for `tag` unless told: Debian for a Debian-named tag (the default
    `openclaw-sandbox:bookworm-slim`), else the minimal busybox image."""
    return DEBIAN_FLAVOUR if any(word in tag for word in ("bookworm", "debian")) else BUSYBOX


def setup_image(
    config: Any,
    progress: Callable[[str], None],
    flavour: str | None = None,
    *,
    from_registry: bool = False,
    rebuild: bool = False,
) -> list[str]:
    """Build the busybox, Debian or browser image under setup_target(config); never overwrite an image it
    did not build (its `exechost.image` label says which ones it did)."""
    tag = setup_target(config, flavour)
    flavour = flavour or setup_flavour(tag)
    try:
        existing = docker_ops.client().images.get(tag)
    except docker_ops.not_found_type():
        existing = None
    if existing is not None:
        labels = (existing.attrs.get("Config") or {}).get("Labels") or {}
        if labels.get(SETUP_LABEL[0]) not in SETUP_FLAVOURS:
            raise docker_ops.SandboxUnavailable(
                f"Image {tag} exists and was not built by `exechost sandbox setup`; not overwriting it with "
                f"the {flavour} image. Use it as it is, or name another image in the config."
            )
        if labels.get(SETUP_LABEL[0]) == flavour and not rebuild:
            progress(f"{tag} is already built by setup ({flavour}); reusing it (--rebuild builds it again)")
            return [tag]
    if from_registry and flavour != BUSYBOX:
        build_from_registry(tag, flavour, progress)
    elif flavour == DEBIAN_FLAVOUR:
        build_debian_image(tag, progress)
    elif flavour == BROWSER_FLAVOUR:
        build_debian_image(tag, progress, packages=BROWSER_PACKAGES, flavour=BROWSER_FLAVOUR)
    else:
        docker_ops.build_image([tag], progress)
    return [tag]
