"""Sandbox lifecycle: ensure a container per scope (hash, hot window, recreate), prune, list, recreate."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine import fairpool, statefs
from engine.sandbox import (
    agentcap,
    bwrap,
    docker_ops,
    dockercg,
    sandboxuid,
    setupcmd,
    wsbudget,
    wsfs,
)
from engine.sandbox import supervisor as sv
from engine.sandbox.backend import BWRAP
from engine.sandbox.egress import forwarder
from engine.sandbox.errors import SandboxError
from engine.sandbox.ownership import check_workspaces, own_workspace, refuse_foreign
from engine.sandbox.pool import ClaimMissed, Pool, PoolEntry
from engine.sandbox.registry import Registry, RegistryEntry, now_ms
from engine.sandbox.removal import REGISTRY_ERRORS, SandboxRemoval
from engine.sandbox.settings import (
    HOT_WINDOW_MS,
    STATE_LABEL,
    Layout,
    SandboxSettings,
    config_hash,
    recreate_hint,
    split_namespace,
    state_id,
)
from engine.sandbox.validate import docker_writable, sanitize_container_env, validate_docker
from engine.sandbox.workspace import give_dirs, workspace_user

log = logging.getLogger(__name__)

TOUCH_INTERVAL_MS = 30_000


@dataclass
class Ensured:
    name: str
    created: bool = False
    warnings: list[str] = field(default_factory=list)
    config_hash: str = ""
    stale: bool = False  # kept a hot container whose config no longer matches


@dataclass
class _Known:
    config_hash: str
    has_busybox: bool
    last_touch_ms: int = 0
    scope_key: str = ""  # whose sandbox this is: the name alone is never taken as proof


class SandboxManager(SandboxRemoval):
    """One per process. Keeps what warm execs need (container known good, supervisor alive) in memory."""

    def __init__(
        self, *, extra_labels: dict[str, str] | None = None, registry: Registry | None = None
    ) -> None:
        self.extra_labels = dict(extra_labels or {})
        self._registry = registry
        self._known: dict[str, _Known] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._agent_locks: dict[str, asyncio.Lock] = {}
        self._last_prune: float | None = None  # None = never pruned (monotonic() may be < 5 min after boot)
        self.active: dict[str, int] = {}  # running commands per container (this process)
        self.progress: Callable[[str, str], None] | None = None  # (container, message) while creating
        # The gateway's session host (engine.sessions.host) when it keeps sessions: pipe commands are
        # handed to it once started, so they outlive the gateway (engine.sandbox.held).
        self.session_host: Any = None
        # Ready containers per config (engine.sandbox.pool); off until start_pool (the gateway's).
        self.pool = Pool(self.extra_labels, setupcmd.run_setup)
        # The gateway's egress proxy: (sandbox, agent, uid that may use the socket) → listening. Without
        # it (the engine alone) an egress sandbox has its forwarder but nothing answers: 502 inside.
        self.egress: Callable[[str, str, int | None], Awaitable[bool]] | None = None
        self.egress_gone: Callable[[str], None] | None = None  # its listener stops with the sandbox
        self._egress_dirs: set[str] = set()
        self._writes: set[asyncio.Future[None]] = set()  # registry writes off the request path

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _agent_lock(self, agent_id: str) -> asyncio.Lock:
        return self._agent_locks.setdefault(agent_id, asyncio.Lock())

    async def _make_room(self, lay: Layout, agent_id: str, cap: int) -> None:
        """Before `lay`'s sandbox starts: the agent's other live sandboxes below `cap`, its least recently
        used idle ones ended if need be (never another agent's, nor on a shared node another gateway's
        agent's of the same name); SandboxError when all of them are busy."""
        await self.settle()  # bwrap's registry rows written off the request path, first
        entries = await fairpool.to_thread(self.registry.read)
        mine = agentcap.owned(entries, split_namespace(lay.scope_key)[0] + agent_id, lay.name)
        if len(mine) < cap:
            return
        running = await fairpool.to_thread(agentcap.live, mine)
        chosen, short = agentcap.to_end(running, cap, self.active)
        if short:
            raise SandboxError(
                f"agent {agent_id} has {len(running)} sandboxes running commands, the most one agent may "
                f"keep (tools.exec.maxSandboxesPerAgent = {cap}, at most its maxSessionsPerAgent); wait for "
                "or kill a running command, or use a session key one of them serves, before starting another."
            )
        for entry in chosen:
            self._progress(lay.name, f"ending idle sandbox {entry.containerName} (the agent's sandbox cap)")
            await fairpool.to_thread(self.remove_runtime, entry.containerName)

    def _progress(self, name: str, message: str) -> None:
        if self.progress is not None:
            try:
                self.progress(name, message)
            except Exception:  # progress is cosmetic: a failing reporter must not fail the sandbox
                log.exception("sandbox progress callback failed")

    # -- pool -------------------------------------------------------------------------------------
    async def start_pool(self, config: Any) -> None:
        """Keep ready containers for the config's sandboxed agents: adopt the last process's, fill the rest
        in the background. Never fails the caller: without Docker the pool simply stays empty."""
        try:
            await self.pool.start(config)
        except Exception as exc:  # SandboxUnavailable, an engine error: the pool is an optimisation
            log.warning("sandbox pool not started: %s", exc)

    async def stop_pool(self) -> None:
        await self.pool.stop()

    async def _claim(self, settings: SandboxSettings, lay: Layout, agent_id: str, expected: str) -> bool:
        """A ready pool container becomes this scope's; False: none fits, create one as usual."""
        key = self.pool.key(settings, agent_id)
        budget = wsbudget.for_scope(settings, lay.scope_key, agent_id)
        # A spare's image (its cap) becomes the agent's: none when its budget has no room for it (the
        # create path makes one within what is left, or says why not).
        if (
            key is not None
            and budget is not None
            and not await fairpool.to_thread(wsfs.fits, settings.workspace_root, budget)
        ):
            return False
        entry = self.pool.take(key) if key is not None else None
        if entry is None:
            return False
        try:
            validate_docker(
                settings.docker, [lay.workspace_dir, lay.agent_workspace], docker_writable(settings, lay)
            )
        except ValueError:
            self.pool.put_back(entry)  # _create says why, to the agent
            return False
        try:
            await fairpool.to_thread(own_workspace, settings, lay)
        except SandboxError:
            self.pool.put_back(entry)
            raise
        self._progress(lay.name, "claiming a ready container from the pool")
        claim = asyncio.ensure_future(fairpool.to_thread(self.pool.claim, entry, settings, lay, budget))
        try:
            await asyncio.shield(claim)
        except asyncio.CancelledError:
            # The request went away; the claim runs on. One it left untouched goes back to the pool (one
            # that went through lacks its registry record: the scope's next ensure replaces it).
            claim.add_done_callback(lambda done: self._claim_abandoned(entry, done))
            raise
        except ClaimMissed as exc:
            log.info("sandbox pool: %s not claimed for %s: %s", entry.name, lay.name, exc)
            if exc.untouched:
                self.pool.put_back(entry)
            return False
        await fairpool.to_thread(
            self.registry.replace,
            RegistryEntry(
                containerName=lay.name,
                sessionKey=lay.scope_key,
                createdAtMs=entry.created_at_ms,
                lastUsedAtMs=now_ms(),
                image=entry.image,
                configHash=expected,
                agentId=agent_id,
            ),
        )
        return True

    def _claim_abandoned(self, entry: PoolEntry, done: asyncio.Future[None]) -> None:
        exc = None if done.cancelled() else done.exception()
        if isinstance(exc, ClaimMissed) and exc.untouched:
            self.pool.put_back(entry)

    # -- ensure -----------------------------------------------------------------------------------
    async def ensure(
        self, settings: SandboxSettings, lay: Layout, agent_id: str, *, max_sandboxes: int | None = None
    ) -> Ensured:
        """The scope's sandbox, kept or started. `max_sandboxes`: the agent's cap on live sandboxes
        (engine.sandbox.agentcap); a new one past it ends the agent's idle ones first, or is refused."""
        if settings.egress.mode != "none":
            await self._egress_ready(settings, lay, agent_id)
        expected = config_hash(settings, lay)
        known = self._known.get(lay.name)
        channel = sv.Channel(lay.name)
        if (
            known is not None
            and known.config_hash == expected
            and known.scope_key == lay.scope_key
            and channel.alive()
        ):
            await self._touch(lay.name, known)
            return Ensured(lay.name, config_hash=expected)
        cap = max_sandboxes if settings.scope != "shared" else None  # (the shared one is nobody's own)
        room = None if cap is None else (lambda: self._make_room(lay, agent_id, cap))
        # One agent's new sandboxes one at a time: two of its scopes never both see room for one.
        owner = split_namespace(lay.scope_key)[0] + agent_id  # (a gateway's agent on a shared node)
        agent_lock = self._agent_lock(owner) if room else contextlib.nullcontext()
        async with agent_lock, self._lock(lay.name):
            if settings.backend == BWRAP:
                return await self._ensure_bwrap(settings, lay, agent_id, expected, channel, room)
            result = await self._ensure_slow(settings, lay, agent_id, expected, channel, room)
        self.pool.want(settings, agent_id)  # refilled off the request path
        return result

    async def _egress_ready(self, settings: SandboxSettings, lay: Layout, agent_id: str) -> None:
        """The sandbox's proxy socket dir and the forwarder binary exist, and the proxy listens there.
        Under the sandbox's lock: a run entering meanwhile never serves it while an ended one is ending."""
        async with self._lock(lay.name):
            if await self._egress_serve(settings, lay, agent_id):
                # Served under a credential generation (or proof) a revoke, rotation or cut ended since:
                # whatever runs in it was started under that authority, so it ends with the sandbox before
                # this run (of the new one) enters and serves it anew; a fresh sandbox, the same workspace.
                log.warning("sandbox %s: its processes' authority ended: the sandbox ends first", lay.name)
                if not await fairpool.to_thread(self.remove_runtime, lay.name):
                    raise SandboxError(f"Sandbox {lay.name}: a process of an ended credential runs on")
                if await self._egress_serve(settings, lay, agent_id):  # (its listener was stopped)
                    raise SandboxError(f"Sandbox {lay.name}: its egress could not be served anew")

    async def _egress_serve(self, settings: SandboxSettings, lay: Layout, agent_id: str) -> bool:
        """True when the sandbox must end first (EgressHub.listen)."""
        # (a stat: another process — `sandbox recreate` from the CLI — may have removed the dir)
        if lay.name not in self._egress_dirs or not forwarder.socket_dir(lay.name).is_dir():
            try:
                await fairpool.to_thread(forwarder.prepare_dir, lay.name)
                await fairpool.to_thread(forwarder.ensure_binary)
            except forwarder.ForwarderUnavailable as exc:
                raise SandboxError(str(exc)) from None
            self._egress_dirs.add(lay.name)
        if self.egress is None:
            return False
        user = settings.docker.user or workspace_user(lay.workspace_dir)
        uid = os.geteuid() if settings.backend == BWRAP or user is None else _numeric_uid(user)
        if settings.backend == BWRAP:  # a root gateway's bwrap sandbox is a uid of its own (sandboxuid)
            owner = dockercg.owner_of(settings.scope, split_namespace(lay.scope_key)[0] + agent_id)
            uid = sandboxuid.for_owner(owner) or uid
        # Its connections' principal is the scope's owner: on a shared node the gateway's namespace
        # and agent (their allow-always names, grants, asks and history are that gateway's agent's).
        return await self.egress(lay.name, split_namespace(lay.scope_key)[0] + agent_id, uid)

    async def _ensure_bwrap(
        self,
        settings: SandboxSettings,
        lay: Layout,
        agent_id: str,
        expected: str,
        channel: sv.Channel,
        room: Callable[[], Awaitable[None]] | None = None,
    ) -> Ensured:
        """The scope's bubblewrap sandbox: kept while it runs with this config (or is hot), else started.
        A sandbox that stopped is gone (a namespace cannot be restarted): a new one gets the workspace."""
        state = await fairpool.to_thread(bwrap.inspect, lay.name)
        refuse_foreign(state, lay.name, lay.scope_key)
        warnings: list[str] = []
        if state.exists and state.running and state.config_hash != expected:
            entry = await fairpool.to_thread(self.registry.get, lay.name)
            last_used = entry.lastUsedAtMs if entry else None
            busy = self.active.get(lay.name, 0) > 0
            if busy or not last_used or now_ms() - last_used < HOT_WINDOW_MS:
                hint = recreate_hint(settings, lay, agent_id)
                warnings.append(
                    f"Sandbox config changed for {lay.name} (recently used). Recreate to apply: {hint}"
                )
                if not channel.alive():
                    await channel.wait_ready()
                await self._touch(lay.name, None)
                return Ensured(lay.name, warnings=warnings, config_hash=state.config_hash or "", stale=True)
        if state.exists and state.running and channel.alive() and state.config_hash == expected:
            await fairpool.to_thread(channel.prepare)  # (an exited gateway's exec dirs go: sv.furnish)
            self._known[lay.name] = _Known(
                expected, (sv.bin_dir() / "busybox").exists(), scope_key=lay.scope_key
            )
            await self._touch(lay.name, self._known[lay.name], force=True)
            return Ensured(lay.name, config_hash=expected)
        if state.exists:
            self._progress(lay.name, "removing sandbox with outdated config or no supervisor")
            await fairpool.to_thread(bwrap.remove, lay.name)
        if room is not None:
            await room()
        try:
            validate_docker(settings.docker, [lay.workspace_dir, lay.agent_workspace])
        except ValueError as exc:
            raise SandboxError(str(exc)) from None
        if settings.docker.network not in ("", "none"):
            raise SandboxError(bwrap.network_refusal(lay.name, settings.docker.network))
        await fairpool.to_thread(check_workspaces, settings, lay, agent_id)
        channel.prepare()
        _, has_bb = await fairpool.to_thread(sv.ensure_bin_dir)
        env, env_warnings = self.container_env(settings)
        warnings.extend(env_warnings)
        created_at = now_ms()
        self._progress(lay.name, "starting bwrap sandbox")
        try:
            await fairpool.to_thread(
                bwrap.start,
                settings,
                lay,
                env=env,
                config_hash=expected,
                created_at_ms=created_at,
                has_busybox=has_bb,
                agent_id=agent_id,
            )
        except (docker_ops.SandboxUnavailable, ValueError) as exc:  # ValueError: a bind refused (bindfds)
            raise SandboxError(str(exc)) from None
        except OSError as exc:
            raise SandboxError(f"Failed to start bwrap sandbox {lay.name}: {exc}") from None
        entry = RegistryEntry(
            containerName=lay.name,
            sessionKey=lay.scope_key,
            createdAtMs=created_at,
            lastUsedAtMs=created_at,
            image=settings.bwrap_rootfs or "host",
            configHash=expected,
            backendId=BWRAP,
            agentId=agent_id,
        )
        # The registry write (a lock and an fsync: tens of ms on a busy disk) is off the first command's
        # path: until it lands, the sandbox is found by its runtime record (list, prune, recreate).
        self._record_later(entry)
        try:
            await channel.wait_ready(timeout=10.0, step=0.001, running=lambda: bwrap.running(lay.name))
        except sv.SupervisorUnavailable:
            said = await fairpool.to_thread(bwrap.failure, lay.name)
            await self.settle()  # its registry row first, so the removal takes it too
            await fairpool.to_thread(self.remove_runtime, lay.name)
            raise SandboxError(
                f"bwrap sandbox {lay.name} did not start" + (f": {said}" if said else ".")
            ) from None
        if settings.docker.setup_command:
            await self._setup(settings, lay)
        self._known[lay.name] = _Known(expected, has_bb, created_at, lay.scope_key)
        return Ensured(lay.name, created=True, warnings=warnings, config_hash=expected)

    async def _ensure_slow(
        self,
        settings: SandboxSettings,
        lay: Layout,
        agent_id: str,
        expected: str,
        channel: sv.Channel,
        room: Callable[[], Awaitable[None]] | None = None,
    ) -> Ensured:
        state = await fairpool.to_thread(docker_ops.inspect, lay.name)
        if state.exists and (state.labels or {}).get(STATE_LABEL) != state_id():
            raise SandboxError(
                f"Container {lay.name} exists but was not created by this exechost install (state dir "
                f"{statefs.state_dir()}); refusing to use it. Remove it or use another containerPrefix."
            )
        refuse_foreign(state, lay.name, lay.scope_key)
        warnings: list[str] = []
        current = state.config_hash
        if state.exists and state.pool_key is not None:
            # Born in the pool: the registry says which scope claimed it and with what config. Never
            # restarted (Docker would mount its pool paths again), never taken without that record.
            entry = await fairpool.to_thread(self.registry.get, lay.name)
            if entry is None or entry.sessionKey != lay.scope_key or not state.running or not channel.alive():
                self._progress(lay.name, "removing a claimed pool container that cannot be restarted")
                await fairpool.to_thread(docker_ops.remove, lay.name)
                state = docker_ops.ContainerState(lay.name, False)
            current = entry.configHash if entry is not None else None
        if state.exists and current != expected:
            entry = await fairpool.to_thread(self.registry.get, lay.name)
            last_used = entry.lastUsedAtMs if entry else None
            busy = self.active.get(lay.name, 0) > 0
            hot = state.running and (busy or not last_used or now_ms() - last_used < HOT_WINDOW_MS)
            if hot:
                hint = recreate_hint(settings, lay, agent_id)
                warnings.append(
                    f"Sandbox config changed for {lay.name} (recently used). Recreate to apply: {hint}"
                )
                if not channel.alive():
                    await channel.wait_ready()
                await self._touch(lay.name, None)
                return Ensured(lay.name, warnings=warnings, config_hash=current or "", stale=True)
            self._progress(lay.name, "removing container with outdated config")
            await fairpool.to_thread(docker_ops.remove, lay.name)
            state = docker_ops.ContainerState(lay.name, False)
        created = claimed = False
        if room is not None and not state.running:  # one more of the agent's sandboxes is about to run
            await room()
        if not state.exists:
            claimed = await self._claim(settings, lay, agent_id, expected)
            if not claimed:
                await self._create(settings, lay, agent_id, expected, warnings)
            created = True
        elif not state.running:
            self._progress(lay.name, "starting stopped container")
            self._check_binds(settings, lay)  # Docker mounts them again, by path, at this start
            await fairpool.to_thread(check_workspaces, settings, lay, agent_id)  # binds are mounted at start
            channel.prepare()
            await fairpool.to_thread(sv.ensure_bin_dir)
            await fairpool.to_thread(docker_ops.start, lay.name)
        channel.prepare()
        try:
            try:
                await channel.wait_ready(timeout=3.0 if state.exists else 10.0)
            except sv.SupervisorUnavailable:
                if not state.exists or state.pool_key is not None:  # a claimed one is never restarted
                    raise
                # Its control dir was replaced under it, or the supervisor died: a restart re-binds both.
                self._progress(lay.name, "restarting container: exec supervisor not answering")
                self._check_binds(settings, lay)
                await fairpool.to_thread(check_workspaces, settings, lay, agent_id)
                await fairpool.to_thread(sv.ensure_bin_dir)
                await fairpool.to_thread(docker_ops.restart, lay.name)
                await channel.wait_ready()
        except sv.SupervisorUnavailable as exc:
            raise SandboxError(
                f"Sandbox {lay.name} is running but its exec supervisor does not answer ({exc}). "
                f"Recreate it: {recreate_hint(settings, lay, agent_id)}"
            ) from None
        if created and not claimed and settings.docker.setup_command:  # a pool container ran it already
            await self._setup(settings, lay)
        has_bb = (sv.bin_dir() / "busybox").exists()
        # A container just created or claimed got its lastUsedAtMs with its registry record: no second write.
        self._known[lay.name] = _Known(expected, has_bb, now_ms() if created else 0, lay.scope_key)
        await self._touch(lay.name, self._known[lay.name], force=not created)
        return Ensured(lay.name, created=created, warnings=warnings, config_hash=expected)

    @staticmethod
    def _check_binds(settings: SandboxSettings, lay: Layout) -> None:
        """What a create checks, again before a start: a container made under an older exechost (or
        config) may hold a bind source a sandbox writes; it is refused, never mounted again."""
        try:
            validate_docker(
                settings.docker, [lay.workspace_dir, lay.agent_workspace], docker_writable(settings, lay)
            )
        except ValueError as exc:
            raise SandboxError(str(exc)) from None

    def container_env(self, settings: SandboxSettings) -> tuple[dict[str, str], list[str]]:
        explicit = settings.docker.env.keys()
        cleaned = sanitize_container_env(settings.docker.env, explicit=explicit)
        return cleaned.env, cleaned.warnings

    async def _create(
        self, settings: SandboxSettings, lay: Layout, agent_id: str, expected: str, warnings: list[str]
    ) -> None:
        try:
            validate_docker(
                settings.docker, [lay.workspace_dir, lay.agent_workspace], docker_writable(settings, lay)
            )
        except ValueError as exc:
            raise SandboxError(str(exc)) from None
        self._progress(lay.name, f"checking image {settings.docker.image}")
        try:
            await fairpool.to_thread(docker_ops.ensure_image, settings.docker.image)
        except docker_ops.SandboxUnavailable as exc:
            raise SandboxError(str(exc)) from None
        await fairpool.to_thread(check_workspaces, settings, lay, agent_id)
        channel = sv.Channel(lay.name)
        channel.prepare()
        _, has_bb = await fairpool.to_thread(sv.ensure_bin_dir)
        env, env_warnings = self.container_env(settings)
        warnings.extend(env_warnings)
        user = settings.docker.user or workspace_user(lay.workspace_dir)
        # A non-root container user must be able to use its control dir and our private sandbox workspace
        # (never the agent's own workspace under rw); nothing else can reach them.
        own = [str(channel.path)]
        if settings.workspace_access != "rw":
            own.append(lay.sandbox_workspace)
        give_dirs(user, own)
        channel.prepare()  # (its FIFO and exec dirs' dir, the container user's as the dir is)
        created_at = now_ms()
        kwargs = await fairpool.to_thread(  # reads a seccomp profile file when one is configured
            docker_ops.create_kwargs,
            settings,
            lay,
            config_hash=expected,
            created_at_ms=created_at,
            env=env,
            user=user,
            has_busybox=has_bb,
            agent_id=agent_id,
            extra_labels=self.extra_labels,
        )
        self._progress(lay.name, "creating container")
        try:
            await fairpool.to_thread(docker_ops.create_and_start, kwargs)
        except Exception as exc:
            if "Conflict" in exc.__class__.__name__ or "409" in str(exc):
                # Another process created it meanwhile: use theirs.
                state = await fairpool.to_thread(docker_ops.inspect, lay.name)
                refuse_foreign(state, lay.name, lay.scope_key)
                if state.exists:
                    if not state.running:
                        await fairpool.to_thread(docker_ops.start, lay.name)
                    return
            raise SandboxError(f"Failed to create sandbox container {lay.name}: {exc}") from None
        await fairpool.to_thread(
            self.registry.replace,
            RegistryEntry(
                containerName=lay.name,
                sessionKey=lay.scope_key,
                createdAtMs=created_at,
                lastUsedAtMs=created_at,
                image=settings.docker.image,
                configHash=expected,
                agentId=agent_id,
            ),
        )
        self._progress(lay.name, "container started")

    def _record_later(self, entry: RegistryEntry) -> None:
        task = asyncio.ensure_future(fairpool.to_thread(self.registry.replace, entry))
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Future[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("sandbox registry not updated: %s", task.exception())

    async def settle(self) -> None:
        """Registry writes still on their way (tests, shutdown). Only this loop's: a write left by a loop
        that is gone (one manager serves every test of a process) can be neither awaited nor finished
        here, and its thread has ended with its own loop's executor."""
        loop = asyncio.get_running_loop()
        self._writes = {task for task in self._writes if task.get_loop() is loop}
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
            self._writes = {task for task in self._writes if task.get_loop() is loop and not task.done()}

    async def _setup(self, settings: SandboxSettings, lay: Layout) -> None:
        """setupCommand once after the first start; on failure the container goes, so the next use retries."""
        self._progress(lay.name, "running setupCommand")
        failure = await setupcmd.run_setup(lay.name, settings)
        if failure is not None:
            await self.settle()
            await fairpool.to_thread(self.remove_runtime, lay.name)
            raise SandboxError(f"Sandbox setupCommand failed in {lay.name} {failure}")

    async def _touch(self, name: str, known: _Known | None, *, force: bool = False) -> None:
        """lastUsedAtMs, written at most every 30 s: the hot window and prune work in minutes and hours."""
        stamp = now_ms()
        if known is not None and not force and stamp - known.last_touch_ms < TOUCH_INTERVAL_MS:
            return
        if known is not None:
            known.last_touch_ms = stamp
        with contextlib.suppress(*REGISTRY_ERRORS):  # a stale lastUsedAtMs only delays prune
            await fairpool.to_thread(self.registry.touch, name, stamp)

    def activity(self, name: str) -> Callable[[int], None]:
        def count(delta: int) -> None:
            self.active[name] = max(0, self.active.get(name, 0) + delta)

        return count


def _numeric_uid(user: str) -> int | None:
    """The uid of a container user spec ("uid[:gid]"); None for a named user (root then owns the socket)."""
    uid = user.partition(":")[0]
    return int(uid) if uid.isdigit() else None
