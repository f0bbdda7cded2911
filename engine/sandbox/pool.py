"""Ready sandbox containers per config, so a new scope's first command skips Docker's create + start.

A pool container is created exactly as a scope's container would be (docker_ops.create_kwargs, the same
settings) except for what names a scope: its workspace is a fresh dir `<workspaceRoot>/pool.<id>`, its
control dir `<state>/sandbox-ctl/<prefix><install>-pool.<id>`, and its labels carry a pool key instead of a
scope and an agent. A claim renames all three to the scope's names; bind mounts follow the inode, so the
running container then has exactly the mounts a fresh create for that scope would have had.

Only `workspaceAccess = "none"` is pooled: under ro and rw the agent's own workspace (a different path per
agent) is mounted, which a container made in advance cannot have. The key covers everything else the
container is made from (docker settings, workspace root, install, mount format, supervisor, labels).

Why a pool container is safe to hand out: before its claim it runs only the supervisor (and setupCommand,
as a fresh container would); `take` removes it from the in-memory list before anything awaits, and the
claim renames the container *by its pool name* (Docker refuses a second rename from that name) before its
workspace dir (a second rename finds nothing; RENAME_NOREPLACE never replaces a scope's existing dir), so one
container serves one scope. A claimed container is
never restarted: Docker would resolve the pool paths it was created with again; the manager removes and
replaces it instead. Pool names end in `pool.<12 hex>`, which no scope slug (`…-<32 hex>`) or "shared" can.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.sandbox import docker_ops, dockercg, wsfs
from engine.sandbox import supervisor as sv
from engine.sandbox.registry import now_ms
from engine.sandbox.settings import (
    MOUNT_FORMAT_VERSION,
    SUPERVISOR_DIGEST,
    Layout,
    SandboxSettings,
    camel_fields,
    digest,
    resolve_settings,
    state_id,
)
from engine.sandbox.validate import sanitize_container_env, validate_docker
from engine.sandbox.workspace import give_dirs, workspace_user

log = logging.getLogger(__name__)

_POOL_SUFFIX = re.compile(r"-pool\.[0-9a-f]{12}$")
_POOL_DIR = re.compile(r"^pool\.[0-9a-f]{12}$")
Spec = tuple[SandboxSettings, str]  # a pool key's settings, and an agent its spares are made for
# setupCommand in a pool container: (name, settings) -> None, or the failure text.
SetupFn = Callable[[str, SandboxSettings], Awaitable[str | None]]


class ClaimMissed(Exception):
    """This pool container cannot serve this scope. `untouched`: nothing was changed, it may serve another."""

    def __init__(self, why: str, *, untouched: bool = False) -> None:
        super().__init__(why)
        self.untouched = untouched


@dataclass
class PoolEntry:
    name: str
    key: str
    workspace: str
    created_at_ms: int
    image: str
    user: str | None
    ident: str  # dev:inode of the workspace dir it was created with (the one it mounts)


def pool_key(
    settings: SandboxSettings, extra_labels: Mapping[str, str], agent_id: str = "main"
) -> str | None:
    """What a pool container is interchangeable by; None when this config is not pooled. The owner group
    (dockercg.owner_of) is part of it: a spare is made in the pids and memory groups of the agent that will
    claim it (a claim cannot move a container's cgroup), so one agent's spares never serve another."""
    if settings.backend != "docker" or settings.workspace_access != "none" or settings.docker.pool <= 0:
        return None  # (a bubblewrap sandbox starts in milliseconds: nothing to keep ready)
    if settings.egress.mode != "none":
        return None  # its proxy socket is bound to its name, which a claim would change
    docker = camel_fields(settings.docker)
    docker.pop("pool")
    payload = {
        "pool": 1,
        "docker": docker,
        "workspaceRoot": settings.workspace_root,
        "mountFormatVersion": MOUNT_FORMAT_VERSION,
        "supervisor": SUPERVISOR_DIGEST,
        "stateId": state_id(),
        "labels": dict(extra_labels),
        "owner": dockercg.owner_of(settings.scope, agent_id),
    }
    return digest(payload)


def is_pool_name(name: str) -> bool:
    """An unclaimed pool container's name (a claim renames it to the scope's)."""
    return bool(_POOL_SUFFIX.search(name))


def wanted(config: Any, extra_labels: Mapping[str, str]) -> tuple[dict[str, Spec], dict[str, str]]:
    """Pool keys the config asks for ({key: (settings, an agent of its owner)}) and each sandboxed agent's
    key ({agent: key})."""
    specs: dict[str, Spec] = {}
    agents: dict[str, str] = {}
    ids = ["main", *(getattr(config, "agents", None) or {})] if config is not None else ["main"]
    for agent_id in dict.fromkeys(ids):
        settings = resolve_settings(config, agent_id)
        key = pool_key(settings, extra_labels, agent_id) if settings.mode != "off" else None
        if key is not None:
            specs.setdefault(key, (settings, agent_id))
            agents[agent_id] = key
    return specs, agents


def _remove(name: str, workspace: str | None) -> None:
    """A pool container and its dirs, gone (blocking). The workspace only while it is still a pool dir."""
    docker_ops.remove(name)
    with contextlib.suppress(OSError):
        shutil.rmtree(sv.ctl_dir(name))  # fd-based: links inside are removed, never followed
    if workspace:
        _remove_workspace(workspace)


def _remove_workspace(workspace: str) -> None:
    """A spare's workspace gone, its filesystem too (engine.sandbox.wsfs); only while it is a pool dir."""
    if not _POOL_DIR.match(os.path.basename(workspace)):
        return
    with contextlib.suppress(OSError):
        st = os.lstat(workspace)
        if stat.S_ISDIR(st.st_mode):  # (rmtree never follows a link inside)
            wsfs.remove(os.path.dirname(workspace), workspace)
            shutil.rmtree(workspace)


def _label_workspace(value: str) -> tuple[str, str]:
    """(dev:inode, path) from the pool workspace label."""
    dev, _, rest = value.partition(":")
    ino, _, path = rest.partition(":")
    return f"{dev}:{ino}", path


def _identity(path: str) -> str:
    st = os.lstat(path)
    return f"{st.st_dev}:{st.st_ino}"


class Pool:
    """One manager's ready containers: filled in the background, taken once, adopted after a restart."""

    def __init__(self, extra_labels: Mapping[str, str], setup: SetupFn) -> None:
        self.extra_labels = dict(extra_labels)
        self.enabled = False  # the gateway turns it on: a short-lived CLI never leaves spares behind
        self._setup = setup
        self._ready: dict[str, list[PoolEntry]] = {}
        self._specs: dict[str, Spec] = {}
        self._agents: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._config: Any = None  # the config last synced (identity: a reload is a new object)
        self._serial = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refused: set[str] = set()  # keys whose config a spare cannot have (validate_docker)

    def key(self, settings: SandboxSettings, agent_id: str) -> str | None:
        return pool_key(settings, self.extra_labels, agent_id) if self.enabled else None

    def ready(self, key: str | None = None) -> list[PoolEntry]:
        if key is not None:
            return list(self._ready.get(key, []))
        return [e for entries in self._ready.values() for e in entries]

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self, config: Any) -> None:
        """Turn on: adopt the previous process's valid spares (removing the rest), then fill."""
        if self.enabled:
            self.sync(config)
            return
        self.enabled = True
        self._loop = asyncio.get_running_loop()
        self._config = config
        specs, agents = wanted(config, self.extra_labels)
        self._specs.update(specs)
        self._agents.update(agents)
        if not specs:
            return  # no agent is sandboxed: never touch Docker
        adopted = await asyncio.to_thread(self._adopt)
        for entry in adopted:
            self._ready.setdefault(entry.key, []).append(entry)
        for key in specs:
            self._refill(key)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop filling; ready containers stay for the next process to adopt. A create under way is let
        finish (cancelling its thread would leave a container nobody waits for), within `grace`."""
        self.enabled = False
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._ready.clear()

    async def settle(self) -> None:
        """Wait until no fill is running (benchmarks and tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    def sync(self, config: Any) -> None:
        """A (re)loaded config: keys it no longer asks for are dropped, with their spares; its keys filled."""
        if not self.enabled or config is self._config:
            return
        self._config = config
        specs, agents = wanted(config, self.extra_labels)
        for key in [k for k in self._specs if k not in specs]:
            self._drop(key)
        self._specs.update(specs)
        self._agents = dict(agents)
        for key in specs:
            self._refill(key)

    def want(self, settings: SandboxSettings, agent_id: str) -> None:
        """An agent used these settings: keep its key filled; a key no agent maps to any more is dropped."""
        if not self.enabled:
            return
        key = pool_key(settings, self.extra_labels, agent_id) if settings.mode != "off" else None
        old = self._agents.get(agent_id)
        if key is None:
            self._agents.pop(agent_id, None)
        else:
            self._agents[agent_id] = key
            self._specs[key] = (settings, agent_id)
        if old is not None and old != key and old not in self._agents.values():
            self._drop(old)
        if key is not None:
            self._refill(key)

    def expire(self, max_age_ms: int) -> None:
        """Spares older than `max_age_ms` (the prune's maxAgeDays) are replaced by fresh ones."""
        stamp = now_ms()
        for key, entries in self._ready.items():
            old = [e for e in entries if stamp - e.created_at_ms > max_age_ms]
            if old:
                self._ready[key] = [e for e in entries if e not in old]
                self._spawn(f"expire:{key}", self._discard(old))
                self._refill(key)

    def _drop(self, key: str) -> None:
        self._specs.pop(key, None)
        stale = self._ready.pop(key, [])
        if stale:
            self._spawn(f"drop:{key}", self._discard(stale))

    async def _discard(self, entries: list[PoolEntry]) -> None:
        for entry in entries:
            await asyncio.to_thread(_remove, entry.name, entry.workspace)

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        """A background job, tracked for settle/stop; fills are named per key (one at a time), the rest
        get a unique name."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is not None and running is not self._loop and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._spawn, name, coro)  # its jobs run on its own loop
            return
        if not name.startswith("fill:"):
            self._serial += 1
            name = f"{name}#{self._serial}"

        async def run() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except docker_ops.SandboxUnavailable as exc:  # no image yet, Docker down: said in one line
                log.warning("sandbox pool: %s: %s", name.split(":", 1)[0], exc)
            except Exception:  # a spare that could not be made only costs the next scope a cold start
                log.warning("sandbox pool: %s failed", name, exc_info=True)
            finally:
                if self._tasks.get(name) is task:
                    del self._tasks[name]

        task = asyncio.get_running_loop().create_task(run())
        self._tasks[name] = task

    def _refill(self, key: str) -> None:
        if self.enabled and key not in self._refused and f"fill:{key}" not in self._tasks:
            self._spawn(f"fill:{key}", self._fill(key))

    async def _fill(self, key: str) -> None:
        while self.enabled and key in self._specs:
            settings, agent_id = self._specs[key]
            if len(self._ready.get(key, [])) >= settings.docker.pool:
                return
            try:
                ws = self._workspace(settings, "0" * 12)
                validate_docker(settings.docker, [ws], writable=[ws])
            except ValueError as exc:
                # Refused for a spare's workspace (a bind that only a scope's own roots allow, …): never
                # pooled; each scope is created and validated as usual.
                self._refused.add(key)
                log.info("sandbox pool: config not pooled: %s", exc)
                return
            entry = await self._create(settings, key, agent_id)
            if key in self._specs:  # (after a stop too: the next process adopts it)
                self._ready.setdefault(key, []).append(entry)
            else:
                await asyncio.to_thread(_remove, entry.name, entry.workspace)

    @staticmethod
    def _workspace(settings: SandboxSettings, token: str) -> str:
        return os.path.join(settings.workspace_root, f"pool.{token}")

    async def _create(self, settings: SandboxSettings, key: str, agent_id: str) -> PoolEntry:
        token = secrets.token_hex(6)
        name = f"{settings.docker.container_prefix}{state_id()}-pool.{token}"
        workspace = self._workspace(settings, token)
        validate_docker(settings.docker, [workspace], writable=[workspace])
        await asyncio.to_thread(docker_ops.ensure_image, settings.docker.image)

        def prepare() -> tuple[str, bool, str | None]:
            wsfs.ensure(settings.workspace_root, workspace)  # capped, as a scope's own (mounted before binds)
            sv.Channel(name).prepare()
            _, has_bb = sv.ensure_bin_dir()
            user = settings.docker.user or workspace_user(workspace)
            give_dirs(user, [str(sv.ctl_dir(name)), workspace])
            sv.Channel(name).prepare()  # (its FIFO and exec dirs' dir, the container user's as the dir is)
            return _identity(workspace), has_bb, user

        try:
            ident, has_bb, user = await asyncio.to_thread(prepare)
            env = sanitize_container_env(settings.docker.env, explicit=settings.docker.env.keys()).env
            created_at = now_ms()
            lay = Layout("", name, workspace, workspace, workspace, None)
            kwargs = await asyncio.to_thread(
                docker_ops.create_kwargs,
                settings,
                lay,
                config_hash=key,
                created_at_ms=created_at,
                env=env,
                user=user,
                has_busybox=has_bb,
                agent_id=agent_id,  # (its owner group only: a pool container has no agent label)
                extra_labels=self.extra_labels,
                pool_workspace=f"{ident}:{workspace}",
            )
            await asyncio.to_thread(docker_ops.create_and_start, kwargs)
            await sv.Channel(name).wait_ready()
            if settings.docker.setup_command:
                failure = await self._setup(name, settings)
                if failure is not None:
                    raise RuntimeError(failure)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(_remove, name, workspace))
            raise
        return PoolEntry(name, key, workspace, created_at, settings.docker.image, user, ident)

    # -- claim -------------------------------------------------------------------------------------
    def put_back(self, entry: PoolEntry) -> None:
        """An entry a claim left untouched, ready again (first in line)."""
        if self.enabled and entry.key in self._specs:
            self._ready.setdefault(entry.key, []).insert(0, entry)
        else:
            self._spawn(f"discard:{entry.name}", self._discard([entry]))

    def take(self, key: str) -> PoolEntry | None:
        """The oldest ready container of `key` whose supervisor answers, out of the pool for good."""
        entries = self._ready.get(key, [])
        while entries:
            entry = entries.pop(0)
            if sv.Channel(entry.name).alive():
                return entry
            self._spawn(f"discard:{entry.name}", self._discard([entry]))
        return None

    def claim(
        self, entry: PoolEntry, settings: SandboxSettings, lay: Layout, budget: wsfs.Budget | None = None
    ) -> None:
        """Make `entry` the container of `lay` (blocking). ClaimMissed: the caller creates one as usual.
        `budget`: whose the workspace becomes (engine.sandbox.wsbudget: the spare's image must fit it)."""
        target = lay.sandbox_workspace
        if lay.workspace_dir != target or os.path.dirname(target) != settings.workspace_root:
            raise ClaimMissed("not a pooled layout", untouched=True)
        # A scope whose workspace exists keeps it, even empty: it may be mounted already (the scope's
        # browser sandbox mounts the same dir), and replacing it would split the two.
        if os.path.lexists(target):
            raise ClaimMissed("the scope's workspace exists", untouched=True)
        try:
            docker_ops.rename(entry.name, lay.name)
        except docker_ops.api_errors() as exc:
            _remove(entry.name, entry.workspace)
            raise ClaimMissed(f"rename failed: {exc}") from None
        # From here the container bears the scope's name: any failure removes it, never returns it.
        try:
            if os.path.ismount(entry.workspace):  # its own filesystem (wsfs): a mountpoint never renames
                os.mkdir(target, 0o700)  # (something made it meanwhile: refused)
                wsfs.move(settings.workspace_root, entry.workspace, target, budget)
            else:
                _rename_noreplace(entry.workspace, target)  # (something made it meanwhile: refused)
            if not _same_dir(target, entry.ident):  # the very dir the container mounts
                raise ClaimMissed("the spare's workspace was replaced")
            ctl = sv.ctl_dir(lay.name)
            if os.path.lexists(ctl):  # left by a removed container of this scope; nothing reads it now
                aside = ctl.with_name(f".{lay.name}.{secrets.token_hex(4)}.old")
                os.rename(ctl, aside)
                shutil.rmtree(aside, ignore_errors=True)
            os.rename(sv.ctl_dir(entry.name), ctl)
        except Exception as exc:
            docker_ops.remove(lay.name)
            _remove_workspace(entry.workspace)  # (still the spare's when it did not move)
            raise ClaimMissed(f"claim failed: {exc}") from None

    # -- restart and prune -------------------------------------------------------------------------
    def _adopt(self) -> list[PoolEntry]:
        """Unclaimed pool containers of this manager's labels: valid ones kept (up to each key's size),
        the rest removed (blocking)."""
        adopted: list[PoolEntry] = []
        for c in self._pool_containers():
            name = str(c["Names"][0]).lstrip("/")
            labels = dict(c.get("Labels") or {})
            key = labels.get(docker_ops.POOL_LABEL, "")
            ident, workspace = _label_workspace(labels.get(docker_ops.POOL_WS_LABEL, ""))
            settings = self._specs[key][0] if key in self._specs else None
            ok = (
                settings is not None
                and c.get("State") == "running"
                and len([e for e in adopted if e.key == key]) < settings.docker.pool
                and sv.Channel(name).alive()
                and os.path.dirname(workspace) == settings.workspace_root
                and _same_dir(workspace, ident)
            )
            if ok and settings is not None:
                created = str(labels.get("openclaw.createdAtMs", "0"))
                image = str(c.get("Image", ""))
                entry = PoolEntry(name, key, workspace, int(created or 0), image, _user_of(name), ident)
                adopted.append(entry)
            else:
                _remove(name, workspace)
        return adopted

    def _pool_containers(self) -> list[dict[str, Any]]:
        """This install's unclaimed pool containers that carry this manager's labels."""
        out = []
        for c in docker_ops.list_sandboxes(docker_ops.POOL_LABEL):
            labels = dict(c.get("Labels") or {})
            if not is_pool_name(str(c["Names"][0]).lstrip("/")):
                continue  # claimed: a scope's container now
            if all(labels.get(k) == v for k, v in self.extra_labels.items()):
                out.append(c)
        return out

    def prune(self, config: Any, *, everything: bool = False, max_age_ms: int = 0) -> list[str]:
        """Remove unclaimed pool containers the config no longer asks for (all with `everything`, and
        those older than `max_age_ms` when set); blocking. Returns their names."""
        specs, _ = wanted(config, self.extra_labels)
        keys = set(specs)  # and the keys of agents not listed, filled since they ran, this config still gives
        for key, (_, agent_id) in list(self._specs.items()):
            settings = resolve_settings(config, agent_id)
            if settings.mode != "off" and pool_key(settings, self.extra_labels, agent_id) == key:
                keys.add(key)
        stamp = now_ms()
        removed = []
        for c in self._pool_containers():
            name = str(c["Names"][0]).lstrip("/")
            labels = dict(c.get("Labels") or {})
            created = int(str(labels.get("openclaw.createdAtMs", "0")) or 0)
            old = max_age_ms > 0 and stamp - created > max_age_ms
            if everything or old or labels.get(docker_ops.POOL_LABEL) not in keys:
                _remove(name, _label_workspace(labels.get(docker_ops.POOL_WS_LABEL, ""))[1])
                removed.append(name)
        self._on_loop(self._forget, set(removed))
        return removed

    def _forget(self, names: set[str]) -> None:
        for key, entries in self._ready.items():
            self._ready[key] = [e for e in entries if e.name not in names]

    def _on_loop(self, fn: Callable[[set[str]], None], arg: set[str]) -> None:
        """Pool state belongs to its event loop: a caller in a worker thread hands the change over."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            fn(arg)
        else:
            loop.call_soon_threadsafe(fn, arg)


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _rename_noreplace(src: str, dst: str) -> None:
    """rename(2) that never replaces `dst` (renameat2 RENAME_NOREPLACE; without it, a checked rename)."""
    fn = getattr(_libc, "renameat2", None)
    if fn is None:
        if os.path.lexists(dst):
            raise FileExistsError(dst)
        os.rename(src, dst)
        return
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)


def _same_dir(path: str, ident: str) -> bool:
    """`path` is still the very dir the pool container was created with (never swapped or claimed). Its
    owner may be the container user (handed over at create); the inode is what the container mounts."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and f"{st.st_dev}:{st.st_ino}" == ident


def _user_of(name: str) -> str | None:
    try:
        info = docker_ops.client().api.inspect_container(name)
    except docker_ops.api_errors():
        return None
    return str((info.get("Config") or {}).get("User") or "") or None
