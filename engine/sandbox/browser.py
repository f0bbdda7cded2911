"""Browser sandboxes (seed §5): a hardened Chromium container per scope, reachable only through Unix sockets.

OpenClaw publishes CDP and noVNC on random 127.0.0.1 ports, where every local user can drive the browser.
Here the container publishes nothing: `socat` inside it puts CDP and noVNC on Unix sockets in a 0700 host
dir (bind-mounted at /.exechost-browser), so it works with `network=none` and `dockerd --bridge=none`, and
only the gateway's user reaches them; the gateway's token-protected loopback door relays clients in.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import statefs
from engine.principals import is_operators, operator_scope
from engine.sandbox import agentcap, docker_ops, dockercg, sockdirfs, wsbudget, wsfs
from engine.sandbox.errors import SandboxError
from engine.sandbox.ownership import refuse_foreign
from engine.sandbox.registry import Registry, RegistryEntry, RegistryError, now_ms
from engine.sandbox.settings import (
    HOT_WINDOW_MS,
    STATE_LABEL,
    SandboxSettings,
    camel_fields,
    container_name,
    digest,
    layout,
    split_namespace,
    state_id,
    workspace_name,
)
from engine.sandbox.validate import sanitize_container_env, validate_docker
from engine.sandbox.workspace import WorkspaceError, chown_dir, ensure_dir, workspace_user
from engine.unixsock import peer_info

BROWSER_LABEL = "openclaw.sandboxBrowser"
OPERATOR_GROUP = "operator"  # no agent's (dockercg.owner_of: `agent-<slug>` or `shared`)
REGISTRY_FILE = "sandbox-browsers.json"
SOCKET_MOUNT = "/.exechost-browser"
CDP_SOCKET = "cdp.sock"
NOVNC_SOCKET = "novnc.sock"
MAX_SOCKET_PATH = 107  # sun_path
# Bumped when the container's shape changes in a way the settings do not show.
SECURITY_EPOCH = "2026-11-23-unix-sockets"
TOUCH_INTERVAL_MS = 30_000
_REGISTRY_ERRORS = (RegistryError, statefs.StateFileError, OSError)

# PID 1's child (under --init). Chromium binds CDP to the container's loopback only; socat is the one way
# out, onto the private sockets. No window manager: Chromium gets the whole Xvfb screen.
START_SCRIPT = r"""set -u
S=/.exechost-browser
export HOME=/tmp/home XDG_CONFIG_HOME=/tmp/home/.config XDG_CACHE_HOME=/tmp/home/.cache
mkdir -p "$HOME"
rm -f "$S/cdp.sock" "$S/novnc.sock"
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || echo chromium)
set -- --no-sandbox --disable-dev-shm-usage --no-first-run --no-default-browser-check --disable-gpu \
  --user-data-dir=/tmp/chrome --remote-debugging-address=127.0.0.1 --remote-debugging-port="$CDP_PORT" \
  --disable-background-networking --disable-sync --password-store=basic --window-size=1280,800 \
  --window-position=0,0
if [ "$HEADLESS" = 1 ]; then
  set -- "$@" --headless=new
else
  Xvfb :99 -screen 0 1280x800x24 -nolisten tcp >/tmp/xvfb.log 2>&1 &
  export DISPLAY=:99
  i=0; while [ ! -e /tmp/.X11-unix/X99 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
  if [ "$NOVNC" = 1 ]; then
    x11vnc -display :99 -rfbport "$VNC_PORT" -localhost -nopw -forever -shared -quiet >/tmp/x11vnc.log 2>&1 &
    websockify --web /usr/share/novnc 127.0.0.1:"$NOVNC_PORT" 127.0.0.1:"$VNC_PORT" >/tmp/novnc.log 2>&1 &
    socat UNIX-LISTEN:"$S/novnc.sock",fork,mode=600 TCP:127.0.0.1:"$NOVNC_PORT" &
  fi
fi
socat UNIX-LISTEN:"$S/cdp.sock",fork,mode=600 TCP:127.0.0.1:"$CDP_PORT" &
exec "$CHROME" "$@" about:blank
"""
SCRIPT_DIGEST = hashlib.sha256(START_SCRIPT.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BrowserLayout:
    """Where a scope's browser lives: its container, its private socket dir, the workspace it shows."""

    scope_key: str
    name: str
    socket_dir: str
    workspace_dir: str  # mounted read-only at docker.workdir
    workdir: str

    @property
    def cdp_socket(self) -> str:
        return os.path.join(self.socket_dir, CDP_SOCKET)

    @property
    def novnc_socket(self) -> str:
        return os.path.join(self.socket_dir, NOVNC_SOCKET)


def sockets_root() -> Path:
    return statefs.state_dir() / "b"  # short: the socket paths must fit sun_path


def browser_sockets(name: str) -> tuple[str, str]:
    """(cdp, novnc) socket paths of browser container `name`."""
    socket_dir = sockets_root() / hashlib.sha256(name.encode()).hexdigest()[:12]
    return str(socket_dir / CDP_SOCKET), str(socket_dir / NOVNC_SOCKET)


def browser_layout(
    settings: SandboxSettings, agent_id: str, session_key: str, *, operator: bool = False
) -> BrowserLayout:
    """The browser a call uses. `operator`: the operator's own call, which names the agent for policy only
    (its settings): its browser is the operator's (principals.operator_scope of the scope the agent would
    use; its own container, profile, sockets and workspace), never the agent's, so neither leaves state
    the other reads (docs/SECURITY.md, Principals)."""
    lay = layout(settings, agent_id, session_key)
    key, workspace = lay.scope_key, lay.workspace_dir
    if operator:
        # Its own empty workspace too: the agent's files (a page it planted) are not the operator's view.
        key = operator_scope(key)
        workspace = str(Path(settings.workspace_root) / workspace_name(key))
    named = replace(
        settings, docker=replace(settings.docker, container_prefix=settings.browser.container_prefix)
    )
    name = container_name(named, key)
    socket_dir = os.path.dirname(browser_sockets(name)[0])
    return BrowserLayout(key, name, socket_dir, workspace, settings.docker.workdir)


def effective_docker(settings: SandboxSettings) -> Any:
    """The docker table as the browser container uses it: its own image, network and binds."""
    b = settings.browser
    binds = b.binds if b.binds is not None else settings.docker.binds
    return replace(settings.docker, image=b.image, network=b.network, binds=tuple(binds))


def browser_hash(settings: SandboxSettings, blay: BrowserLayout) -> str:
    docker = camel_fields(effective_docker(settings))
    docker.pop("pool")  # the exec pool's size changes no browser
    return digest(
        {
            "docker": docker,
            "browser": camel_fields(settings.browser),
            "workspaceDir": blay.workspace_dir,
            "socketDir": blay.socket_dir,
            "script": SCRIPT_DIGEST,
            "epoch": SECURITY_EPOCH,
        }
    )


def create_kwargs(
    settings: SandboxSettings,
    blay: BrowserLayout,
    *,
    config_hash: str,
    created_at_ms: int,
    env: dict[str, str],
    user: str | None,
    agent_id: str,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    d = effective_docker(settings)
    b = settings.browser
    labels = {
        BROWSER_LABEL: "1",
        "openclaw.sessionKey": blay.scope_key,
        "openclaw.createdAtMs": str(created_at_ms),
        "openclaw.configHash": config_hash,
        "exechost.agentId": agent_id,
        STATE_LABEL: state_id(),
        **(extra_labels or {}),
    }
    volumes = [f"{blay.workspace_dir}:{blay.workdir}:ro", f"{blay.socket_dir}:{SOCKET_MOUNT}:rw"]
    volumes.extend(x.strip() for x in d.binds if x.strip())
    browser_env = {
        "CDP_PORT": str(b.cdp_port),
        "VNC_PORT": str(b.vnc_port),
        "NOVNC_PORT": str(b.no_vnc_port),
        "HEADLESS": "1" if b.headless else "0",
        "NOVNC": "1" if b.enable_no_vnc and not b.headless else "0",
    }
    kwargs: dict[str, Any] = {
        "image": d.image,
        "command": ["/bin/sh", "-c", START_SCRIPT],
        "name": blay.name,
        "labels": labels,
        "environment": {**env, **browser_env},
        "working_dir": blay.workdir,
        "volumes": volumes,
        "network_mode": d.network or "none",
        **docker_ops.hardening_kwargs(d, user),
    }
    # in its owner's groups with the owner's sandboxes: a browser per scope was outside every cap (round 10 b)
    # (the operator's own browser: a group of its own, no agent's budget; an agent's load never starves it)
    owner = OPERATOR_GROUP if is_operators(blay.scope_key) else dockercg.owner_of(settings.scope, agent_id)
    parent = dockercg.parent_for(owner)
    if parent is not None:
        kwargs["cgroup_parent"] = parent
    return kwargs


def list_browsers(label: str | None = None, *, every_install: bool = False) -> list[dict[str, Any]]:
    labels = [f"{BROWSER_LABEL}=1"] + ([label] if label else [])
    if not every_install:
        labels.append(f"{STATE_LABEL}={state_id()}")
    return list(docker_ops.client().api.containers(all=True, filters={"label": labels}))


class NotTheBrowser(PermissionError):
    """The socket's peer is not a process of the browser's container (a swapped socket or a link)."""


def in_container(sock: Any, container_id: str) -> bool:
    """Whether the peer of a connected Unix socket lives in `container_id`: its cgroup names the container.

    The socket dir is the container's to write, so cdp.sock may have been replaced by a link to any socket
    on the host (the gateway's, Docker's); only a peer inside the container is the browser."""
    peer = peer_info(sock)
    if peer is None or peer.pid <= 0 or len(container_id) < 32:
        return False
    try:
        with open(f"/proc/{peer.pid}/cgroup", encoding="ascii", errors="replace") as fh:
            return container_id in fh.read(65536)
    except OSError:
        return False


async def open_browser_socket(
    socket_path: str, container_id: str, limit: int = 64 * 1024
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a browser's socket and prove the peer is that browser's container."""
    reader, writer = await asyncio.open_unix_connection(socket_path, limit=limit)
    if not in_container(writer.get_extra_info("socket"), container_id):
        writer.close()
        raise NotTheBrowser(f"{socket_path}: the peer is not the browser container's")
    return reader, writer


async def http_get(socket_path: str, path: str, container_id: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """One GET over a browser's Unix socket (CDP's /json endpoints); (status, body)."""
    async with asyncio.timeout(timeout):
        reader, writer = await open_browser_socket(socket_path, container_id)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = await reader.readexactly(min(length, 4 * 1024 * 1024))
            return status, body
        finally:
            writer.close()


@dataclass
class BrowserInfo:
    """What `browser.status` says of one browser sandbox."""

    name: str
    scope_key: str
    agent_id: str
    running: bool
    image: str
    cdp: bool = False  # CDP answered just now
    url: str = ""
    title: str = ""
    no_vnc: bool = False
    created_at_ms: int | None = None
    last_used_at_ms: int | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "containerName": self.name,
            "sessionKey": self.scope_key,
            "agentId": self.agent_id,
            "running": self.running,
            "image": self.image,
            "cdp": self.cdp,
            "url": self.url,
            "title": self.title,
            "noVnc": self.no_vnc,
            "createdAtMs": self.created_at_ms,
            "lastUsedAtMs": self.last_used_at_ms,
        }


class BrowserManager:
    """Browser containers of this install: ensure (create, start, wait for CDP), stop, list, prune."""

    def __init__(
        self, *, extra_labels: dict[str, str] | None = None, registry: Registry | None = None
    ) -> None:
        self.extra_labels = dict(extra_labels or {})
        self._registry = registry
        self._locks: dict[str, asyncio.Lock] = {}
        self._touched: dict[str, int] = {}
        self.ids: dict[str, str] = {}  # browser name → its container's id (whose processes may answer)

    @property
    def registry(self) -> Registry:
        return self._registry or Registry(statefs.state_dir() / REGISTRY_FILE)

    async def ensure(self, settings: SandboxSettings, blay: BrowserLayout, agent_id: str) -> list[str]:
        """The scope's browser running with CDP answering; warnings (a kept hot container) to show."""
        async with self._locks.setdefault(blay.name, asyncio.Lock()):
            warnings = await self._ensure(settings, blay, agent_id)
        await self.touch(blay.name)
        return warnings

    async def over_cap(self, blay: BrowserLayout, agent_id: str, cap: int) -> list[str]:
        """The agent's other browsers to end, least recently used first, so that `blay`'s fits under its
        cap (`tools.exec.maxSandboxesPerAgent`, counted apart from its exec sandboxes): never another
        agent's; a browser has no command to wait for, so none is too busy to end."""
        entries = await asyncio.to_thread(self.registry.read)
        mine = agentcap.owned(entries, split_namespace(blay.scope_key)[0] + agent_id, blay.name)
        if len(mine) < cap:
            return []
        running = await asyncio.to_thread(agentcap.live, mine)
        return [entry.containerName for entry in agentcap.to_end(running, cap, {})[0]]

    async def _ensure(self, settings: SandboxSettings, blay: BrowserLayout, agent_id: str) -> list[str]:
        expected = browser_hash(settings, blay)
        state = await asyncio.to_thread(docker_ops.inspect, blay.name)
        if state.exists and (state.labels or {}).get(STATE_LABEL) != state_id():
            raise SandboxError(
                f"Container {blay.name} exists but was not created by this exechost install; refusing to "
                "use it. Remove it or use another browser.containerPrefix."
            )
        refuse_foreign(state, blay.name, blay.scope_key)
        warnings: list[str] = []
        if state.exists and state.config_hash != expected:
            entry = await asyncio.to_thread(self.registry.get, blay.name)
            last_used = entry.lastUsedAtMs if entry else None
            if state.running and (not last_used or now_ms() - last_used < HOT_WINDOW_MS):
                warnings.append(
                    f"Browser sandbox config changed for {blay.name} (recently used). Recreate to apply: "
                    "exechost sandbox browser stop, then start"
                )
            else:
                await asyncio.to_thread(docker_ops.remove, blay.name)
                state = docker_ops.ContainerState(blay.name, False)
        if not state.exists:
            await self._create(settings, blay, agent_id, expected)
        elif not state.running:
            await asyncio.to_thread(self._check_dirs, settings, blay, None, agent_id)
            await asyncio.to_thread(docker_ops.start, blay.name)
        await self._wait_cdp(blay, settings.browser.auto_start_timeout_ms / 1000)
        return warnings

    def _check_dirs(
        self, settings: SandboxSettings, blay: BrowserLayout, user: str | None, agent_id: str
    ) -> None:
        if len(blay.cdp_socket.encode()) > MAX_SOCKET_PATH:
            raise SandboxError(
                f"The browser socket path {blay.cdp_socket} is longer than {MAX_SOCKET_PATH} bytes; use a "
                "shorter OPENCLAW_STATE_DIR."
            )
        try:
            if os.path.dirname(blay.workspace_dir) == settings.workspace_root:  # the scope's own workspace
                # (capped: engine.sandbox.wsfs; a new one within its agent's budget: engine.sandbox.wsbudget)
                budget = wsbudget.for_scope(settings, blay.scope_key, agent_id)
                wsfs.ensure(settings.workspace_root, blay.workspace_dir, budget)
            else:
                ensure_dir(settings.workspace_root, blay.workspace_dir)
            ensure_dir(str(statefs.state_dir()), blay.socket_dir)
            sockdirfs.ensure(blay.socket_dir)  # (capped: the container writes there)
        except WorkspaceError as exc:
            raise SandboxError(str(exc)) from None
        uid, _, gid = (user or "").partition(":")
        if uid.isdigit() and uid != "0":
            # The container's user creates the sockets; nobody else may enter the dir (0700).
            with contextlib.suppress(OSError):
                chown_dir(blay.socket_dir, int(uid), int(gid) if gid.isdigit() else -1)

    async def _create(
        self, settings: SandboxSettings, blay: BrowserLayout, agent_id: str, expected: str
    ) -> None:
        docker = effective_docker(settings)
        try:
            validate_docker(docker, [blay.workspace_dir], writable=[blay.workspace_dir])
        except ValueError as exc:
            raise SandboxError(str(exc)) from None
        try:
            await asyncio.to_thread(docker_ops.ensure_image, docker.image)
        except docker_ops.SandboxUnavailable as exc:
            raise SandboxError(f"{exc} For the browser image: `exechost sandbox setup --browser`.") from None
        user = docker.user or workspace_user(blay.workspace_dir)
        await asyncio.to_thread(self._check_dirs, settings, blay, user, agent_id)
        env = sanitize_container_env(docker.env, explicit=docker.env.keys()).env
        created = now_ms()
        kwargs = await asyncio.to_thread(
            create_kwargs,
            settings,
            blay,
            config_hash=expected,
            created_at_ms=created,
            env=env,
            user=user,
            agent_id=agent_id,
            extra_labels=self.extra_labels,
        )
        try:
            await asyncio.to_thread(docker_ops.create_and_start, kwargs)
        except Exception as exc:
            raise SandboxError(f"Failed to create browser sandbox {blay.name}: {exc}") from None
        entry = RegistryEntry(
            containerName=blay.name,
            sessionKey=blay.scope_key,
            createdAtMs=created,
            lastUsedAtMs=created,
            image=docker.image,
            configHash=expected,
            agentId=agent_id,
        )
        with contextlib.suppress(*_REGISTRY_ERRORS):
            await asyncio.to_thread(self.registry.replace, entry)

    async def _wait_cdp(self, blay: BrowserLayout, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        state = await asyncio.to_thread(docker_ops.inspect, blay.name)
        self.ids[blay.name] = state.id
        while True:
            with contextlib.suppress(OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
                status, _ = await http_get(blay.cdp_socket, "/json/version", state.id, timeout=2.0)
                if status == 200:
                    return
            state = await asyncio.to_thread(docker_ops.inspect, blay.name)
            if not state.running or loop.time() > deadline:
                tail = await asyncio.to_thread(_logs, blay.name)
                why = "exited" if not state.running else f"did not answer within {timeout:g} s"
                raise SandboxError(
                    f"Browser sandbox {blay.name}: CDP {why}" + (f". Container log:\n{tail}" if tail else ".")
                )
            await asyncio.sleep(0.05)

    async def container_id(self, name: str) -> str:
        state = await asyncio.to_thread(docker_ops.inspect, name)
        self.ids[name] = state.id
        return state.id

    async def touch(self, name: str) -> None:
        stamp = now_ms()
        if stamp - self._touched.get(name, 0) < TOUCH_INTERVAL_MS:
            return
        self._touched[name] = stamp
        with contextlib.suppress(*_REGISTRY_ERRORS):
            await asyncio.to_thread(self.registry.touch, name, stamp)

    async def stop(self, name: str) -> bool:
        """docker rm -f (the next start recreates it, like `sandbox recreate`); the registry row goes."""
        removed = await asyncio.to_thread(docker_ops.remove, name)
        with contextlib.suppress(*_REGISTRY_ERRORS):
            await asyncio.to_thread(self.registry.remove, name)
        self._touched.pop(name, None)
        return removed

    async def info(self, name: str) -> BrowserInfo | None:
        return next(iter(await self.runtimes(name)), None)

    async def runtimes(self, only: str | None = None) -> list[BrowserInfo]:
        """Registry rows joined with live Docker state (`only`: that browser, no other is asked); a
        running one is asked for its page (URL, title)."""
        entries = {e.containerName: e for e in await asyncio.to_thread(self.registry.read)}
        live = {str(c["Names"][0]).lstrip("/"): c for c in await asyncio.to_thread(list_browsers)}
        if only is not None:
            entries = {k: v for k, v in entries.items() if k == only}
            live = {k: v for k, v in live.items() if k == only}
        out: list[BrowserInfo] = []
        for name in sorted(set(entries) | set(live)):
            entry, c = entries.get(name), live.get(name)
            labels = dict((c or {}).get("Labels") or {})
            info = BrowserInfo(
                name=name,
                scope_key=entry.sessionKey if entry else labels.get("openclaw.sessionKey", ""),
                agent_id=(entry.agentId if entry else None) or labels.get("exechost.agentId") or "main",
                running=bool(c and c.get("State") == "running"),
                image=str((c or {}).get("Image") or (entry.image if entry else "")),
                created_at_ms=entry.createdAtMs if entry else None,
                last_used_at_ms=entry.lastUsedAtMs if entry else None,
            )
            if info.running:
                cdp, novnc = browser_sockets(name)
                self.ids[name] = str((c or {}).get("Id") or "")
                info.url, info.title, info.cdp = await page_of(cdp, self.ids[name])
                info.no_vnc = os.path.exists(novnc)
            out.append(info)
        return out

    async def prune(self, idle_hours: float, max_age_days: float) -> list[str]:
        if idle_hours <= 0 and max_age_days <= 0:
            return []
        stamp = now_ms()
        removed = []
        for entry in await asyncio.to_thread(self.registry.read):
            idle = stamp - (entry.lastUsedAtMs or entry.createdAtMs)
            age = stamp - entry.createdAtMs
            if (idle_hours > 0 and idle > idle_hours * 3_600_000) or (
                max_age_days > 0 and age > max_age_days * 86_400_000
            ):
                await self.stop(entry.containerName)
                removed.append(entry.containerName)
        return removed


async def page_of(cdp_socket: str, container_id: str) -> tuple[str, str, bool]:
    """(url, title, answered) of the browser's first page target."""
    try:
        status, body = await http_get(cdp_socket, "/json/list", container_id, timeout=2.0)
        targets = json.loads(body) if status == 200 else []
    except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
        return "", "", False
    pages = [t for t in targets if isinstance(t, dict) and t.get("type") == "page"]
    if not pages:
        return "", "", True
    return str(pages[0].get("url", "")), str(pages[0].get("title", "")), True


def _logs(name: str) -> str:
    with contextlib.suppress(Exception):
        raw = docker_ops.client().api.logs(name, tail=15)
        return bytes(raw).decode("utf-8", "replace").strip()[-2000:]
    return ""
