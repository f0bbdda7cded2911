"""Effective sandbox settings (defaults → agents.defaults.sandbox → per-agent), scope keys, names, hash."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine import statefs
from engine.config.egress import EgressPolicy
from engine.config.model import BrowserConfig
from engine.config.schema import (
    DEFAULT_CONTAINER_PREFIX,
    DEFAULT_PIDS_LIMIT,
    DEFAULT_SANDBOX_IMAGE,
    DEFAULT_SANDBOX_POOL,
    DEFAULT_ULIMITS,
    DEFAULT_WORKDIR,
)
from engine.principals import main_session
from engine.sandbox.supervisor import SCRIPTS

# The scripts baked into a running container: a change means a cold container gets recreated.
SUPERVISOR_DIGEST = hashlib.sha256("".join(SCRIPTS.values()).encode()).hexdigest()[:16]

# The defaults are the config schema's, so a key the config does not carry resolves to its documented default.
DEFAULT_IMAGE = DEFAULT_SANDBOX_IMAGE  # what `exechost sandbox setup` builds
DEFAULT_PREFIX = DEFAULT_CONTAINER_PREFIX
AGENT_MOUNT = "/agent"
DEFAULT_TMPFS = ("/tmp", "/var/tmp", "/run")
# Bumped whenever the mounts change shape: forces a recreate of cold containers.
# 5: sized tmpfs, a memory limit and our seccomp profile (hardening_kwargs); 6: a read-only control dir and
# a capped engine log
MOUNT_FORMAT_VERSION = 6
HOT_WINDOW_MS = 5 * 60 * 1000
MODES = ("off", "non-main", "all")
SCOPES = ("session", "agent", "shared")
ACCESS = ("none", "ro", "rw")


@dataclass(frozen=True)
class DockerSettings:
    image: str = DEFAULT_IMAGE
    container_prefix: str = DEFAULT_PREFIX
    workdir: str = DEFAULT_WORKDIR
    read_only_root: bool = True
    tmpfs: tuple[str, ...] = DEFAULT_TMPFS
    network: str = "none"
    user: str | None = None
    cap_drop: tuple[str, ...] = ("ALL",)
    env: dict[str, str] = field(default_factory=lambda: {"LANG": "C.UTF-8"})
    setup_command: str | None = None
    pool: int = DEFAULT_SANDBOX_POOL  # how many ready containers to keep; never part of the config hash
    pids_limit: int | None = DEFAULT_PIDS_LIMIT
    memory: str | None = None
    memory_swap: str | None = None
    cpus: float | None = None
    ulimits: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_ULIMITS))
    file_table_share: int = 16  # 1/N of fs.file-max one sandbox may hold (engine.sandbox.filetable)
    seccomp_profile: str | None = None
    apparmor_profile: str | None = None
    dns: tuple[str, ...] = ()
    extra_hosts: tuple[str, ...] = ()
    binds: tuple[str, ...] = ()
    dangerously_allow_reserved_container_targets: bool = False
    dangerously_allow_external_bind_sources: bool = False
    dangerously_allow_container_namespace_join: bool = False


@dataclass(frozen=True)
class SandboxSettings:
    """One agent's effective sandbox config, every key resolved."""

    mode: str = "off"
    scope: str = "agent"
    workspace_access: str = "none"
    workspace_root: str = ""
    docker: DockerSettings = field(default_factory=DockerSettings)
    backend: str = "docker"  # docker | bwrap: what confines the scope (engine.sandbox.backend)
    bwrap_rootfs: str | None = None  # bwrap: the system view's tree (None: the host's, engine.sandbox.bwrap)
    bwrap_landlock: bool = True  # bwrap: the landlock layer where the kernel has it (engine.sandbox.landlock)
    bwrap_tcp_ports: tuple[int, ...] = ()  # bwrap under landlock: loopback ports it may bind and connect to
    browser: BrowserConfig = field(default_factory=BrowserConfig)  # its keys as config.toml sets them
    egress: EgressPolicy = field(default_factory=EgressPolicy)  # the only route out (engine.sandbox.egress)
    idle_hours: float = 24
    max_age_days: float = 7
    # All of the agent's workspace images together (engine.sandbox.wsbudget); None: a share of their disk
    max_workspace_bytes: int | None = None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _layer(obj: Any) -> dict[str, Any]:
    """A config layer as {snake_key: value} with unset (None) keys dropped; accepts dataclasses or dicts."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        raw = dict(obj)
    elif hasattr(obj, "__dataclass_fields__"):
        raw = {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    else:
        raw = dict(vars(obj))
    return {_snake(key): value for key, value in raw.items() if value is not None}


@functools.lru_cache(maxsize=512)
def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _ulimit(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        soft_v: Any = value.get("soft", value.get("hard", 0))
        hard_v: Any = value.get("hard", value.get("soft", 0))
        return int(soft_v), int(hard_v)
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[1])
    if isinstance(value, str) and ":" in value:
        soft, hard = value.split(":", 1)
        return int(soft), int(hard)
    return int(value), int(value)


def merge_docker(global_layer: Any, agent_layer: Any) -> DockerSettings:
    """Agent keys override global; env and ulimits merge; binds concatenate (reference §6.1)."""
    base = DockerSettings()
    g, a = _layer(global_layer), _layer(agent_layer)
    merged: dict[str, Any] = {}
    for name in base.__dataclass_fields__:
        merged[name] = a.get(name, g.get(name, getattr(base, name)))
    merged["env"] = {**base.env, **dict(g.get("env") or {}), **dict(a.get("env") or {})}
    ul = {**base.ulimits}
    for layer in (g, a):
        for k, v in dict(layer.get("ulimits") or {}).items():
            ul[str(k)] = _ulimit(v)
    merged["ulimits"] = ul
    merged["binds"] = tuple(g.get("binds") or ()) + tuple(a.get("binds") or ())
    for name in ("tmpfs", "cap_drop", "dns", "extra_hosts"):
        merged[name] = tuple(merged[name] or ())
    setup = merged.get("setup_command")
    if isinstance(setup, (list, tuple)):
        merged["setup_command"] = " && ".join(str(s) for s in setup) or None
    if merged.get("pids_limit") is not None and int(merged["pids_limit"]) <= 0:
        merged["pids_limit"] = None
    return DockerSettings(**{k: v for k, v in merged.items() if k in base.__dataclass_fields__})


def default_workspace_root() -> str:
    return str(statefs.state_dir() / "sandboxes")


def resolve_settings(config: Any, agent_id: str) -> SandboxSettings:
    """Effective settings for `agent_id` from an engine.config.model.Config (None = built-in defaults).

    The layering itself (agent over agents.defaults.sandbox; `scope=shared` ignores the agent's docker and
    prune overrides, since one container cannot honour two configs) is Config.sandbox_for's; here every key
    the config does not carry gets its hardened default.
    """
    merged = config.sandbox_for(agent_id) if config is not None else None
    # Every sandboxed exec asks: memoised by what it is made of — the merged table's repr (every key and
    # value), and the state dir, HOME and cwd that make its paths absolute. Equal inputs, the same (frozen)
    # object, so layout() below can key on it too.
    key = (repr(merged), str(statefs.state_dir()), os.environ.get("HOME", ""), os.getcwd())
    known = _settings.get(key)
    if known is None:
        if len(_settings) >= 64:
            _settings.clear()
        known = _settings[key] = _resolve(merged)
    return known


_settings: dict[tuple[str, str, str, str], SandboxSettings] = {}


def _resolve(merged: Any) -> SandboxSettings:
    top = _layer(merged)
    prune = _layer(top.get("prune"))
    root = top.get("workspace_root") or default_workspace_root()
    bw = _layer(top.get("bwrap"))
    return SandboxSettings(
        mode=str(top.get("mode", "off")),
        scope=str(top.get("scope", "agent")),
        workspace_access=str(top.get("workspace_access", "none")),
        workspace_root=os.path.abspath(os.path.expanduser(str(root))),
        docker=merge_docker(top.get("docker"), None),
        backend=str(top.get("backend", "docker")),
        bwrap_rootfs=_rootfs(bw.get("rootfs")),
        bwrap_landlock=bool(bw.get("landlock", True)),
        bwrap_tcp_ports=tuple(sorted({int(p) for p in bw.get("tcp_ports", ())})),
        browser=_browser(_layer(top.get("browser"))),
        egress=EgressPolicy.from_config(getattr(merged, "egress", None)),
        idle_hours=float(prune.get("idle_hours", 24)),
        max_age_days=float(prune.get("max_age_days", 7)),
        max_workspace_bytes=_bytes(top.get("max_workspace_bytes_per_agent")),
    )


def _bytes(value: Any) -> int | None:
    return None if value is None else int(value)


def _rootfs(value: Any) -> str | None:
    return os.path.abspath(os.path.expanduser(str(value))) if value else None


def _browser(layer: dict[str, Any]) -> BrowserConfig:
    """The browser keys with their defaults (declared once, on the config model)."""
    fields = BrowserConfig.__dataclass_fields__
    values = {k: v for k, v in layer.items() if k in fields}
    if values.get("binds") is not None:
        values["binds"] = list(values["binds"])
    return BrowserConfig(**values)


# --- session keys, scope keys, names ---------------------------------------------------------------


def main_session_keys(agent_id: str) -> tuple[str, ...]:
    """Keys that count as the agent's main session (plain "main", or OpenClaw's canonical agent form)."""
    keys = (f"agent:{agent_id}:main",)
    return ("", "main", *keys)


def main_session_key(agent_id: str) -> str:
    return f"agent:{agent_id}:main"


def is_sandboxed(mode: str, agent_id: str, session_key: str) -> bool:
    """The one rule for "does this call run in a sandbox": mode all, or non-main outside the main session."""
    if mode == "all":
        return True
    if mode == "non-main":
        return not main_session(agent_id, session_key)
    return False


# A node's gateway namespace: the fingerprint of the gateway's key (engine.nodes.gateway_key) and the `/`
# the node ends it with (runner.node.gateways.SEP), which no key a gateway names may hold there.
_NAMESPACE = re.compile(r"[0-9a-f]{32}/")


def split_namespace(key: str) -> tuple[str, str]:
    """(namespace, the gateway's own key) of a scope key a node filed; ("", key) for any other (a
    gateway's own session key may hold a `/`, but never a node's namespace ahead of it)."""
    found = _NAMESPACE.match(key)
    return (found.group(0), key[found.end() :]) if found else ("", key)


def scope_key(scope: str, agent_id: str, session_key: str, namespace: str = "") -> str:
    """Whose sandbox a call uses. `namespace`: the calling gateway's on a node shared by several
    (runner.node.gateways, `<fingerprint>/`, "" on a gateway and for an anonymous link): every scope, the
    agent's and the shared one included, is then that gateway's, so two gateways' agents of one name never
    share a sandbox (docs/SECURITY.md §2). A session key a node filed names its namespace itself."""
    namespace = namespace or split_namespace(session_key)[0]
    if scope == "shared":
        return namespace + "shared"
    if scope == "agent":
        return f"{namespace}agent:{agent_id}"
    # A node files a session key under its gateway already; one that does not carry it gets it.
    return session_key if session_key.startswith(namespace) else namespace + session_key


SLUG_HASH_HEX = 32  # 128 bits: no key can be searched for that maps onto another's sandbox name
LEGACY_HASH_HEX = 8  # names before 128-bit hashes: the same name cut (engine.sandbox.manager migrates)


def slugify(value: str) -> str:
    """A readable part + a hash of the exact, unnormalised key: the hash alone tells keys apart (the readable
    part is lowercased and cut, so it never may), and at 128 bits no colliding key can be searched for."""
    text = re.sub(r"[^a-z0-9._-]+", "-", value.strip().lower()).strip("-")[:32] or "session"
    return f"{text}-{hashlib.sha256(value.encode()).hexdigest()[:SLUG_HASH_HEX]}"


def workspace_name(scope_key: str) -> str:
    """The name of a scope's workspace dir under its root (engine.sandbox.wsprune reads it back)."""
    return "shared" if scope_key == "shared" else slugify(scope_key)


def state_id() -> str:
    """This install's id: a hash of its resolved state dir. Container names and the `exechost.stateId`
    label carry it, so two installs on one Docker engine never see or touch each other's sandboxes."""
    return _state_id(str(statefs.state_dir()))


@functools.lru_cache(maxsize=16)
def _state_id(raw: str) -> str:
    # Resolved once per state dir path (realpath costs a stat per component, on every warm exec).
    return hashlib.sha256(os.path.realpath(raw).encode()).hexdigest()[:8]


STATE_LABEL = "exechost.stateId"


def container_name(settings: SandboxSettings, scope_key_value: str) -> str:
    """prefix + install id + scope slug, at most 63 chars; the slug's readable part is what gets cut,
    never its hash suffix, so distinct scopes never share a name."""
    # A bubblewrap sandbox has a name of its own: switching an agent's backend never finds the other
    # backend's sandbox (and its control dir) under the same name.
    kind = "bw-" if settings.backend == "bwrap" else ""
    head = f"{settings.docker.container_prefix}{kind}{state_id()}-"
    suffix = _suffix(settings.scope, scope_key_value)
    room = 63 - len(head)
    if len(suffix) > room:
        keep = SLUG_HASH_HEX + 1  # "-<hash>": the readable part goes first, then nothing of the hash
        suffix = (suffix[: max(room - keep, 0)].rstrip("-") + suffix[-keep:])[-room:]
    return head + suffix


def _suffix(scope: str, key: str) -> str:
    """A scope's name part: its slug; the shared scope's is `shared`, and a gateway's own shared scope on a
    node (`<ns>shared`) `<hash of the key>-shared`: still a shared scope's name, never a slug's."""
    if scope != "shared":
        return slugify(key)
    return "shared" if key == "shared" else f"{_sha(key)[:SLUG_HASH_HEX]}-shared"


def is_shared(name: str) -> bool:
    """Whether a sandbox name is the shared scope's (a scope slug ends in `-<32 hex>`, a pool name in
    `pool.<12 hex>`: neither ends in `-shared`)."""
    return name.endswith("-shared")


def agent_workspace_dir(agent_id: str) -> str:
    """The agent's own workspace on the host (OpenClaw layout: workspace, workspace-<id>)."""
    base = statefs.state_dir()
    if agent_id == "main":
        return str(base / "workspace")
    path = base / f"workspace-{slugify(agent_id)}"
    # Agent ids are the operator's config, never an agent's choice: a workspace made under the old name
    # (a 32-bit hash) stays its agent's until the operator renames it.
    legacy = base / f"workspace-{slugify(agent_id)[:-SLUG_HASH_HEX]}{_sha(agent_id)[:8]}"
    return str(legacy if not path.exists() and legacy.is_dir() else path)


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class Layout:
    """Where a scope's files live on the host and what is mounted where."""

    scope_key: str
    name: str
    sandbox_workspace: str
    agent_workspace: str
    workspace_dir: str  # mounted at docker.workdir
    agent_mount: str | None  # host dir mounted read-only at /agent, if any


def layout(
    settings: SandboxSettings,
    agent_id: str,
    session_key: str,
    agent_workspace: str | None = None,
    namespace: str = "",
) -> Layout:
    """`namespace`: the calling gateway's on a shared node (scope_key)."""
    # Memoised per settings object (resolve_settings hands out one per distinct config; the entry keeps it
    # alive, so its id is never reused while cached), the state dir and cwd its paths derive from.
    cwd = os.getcwd()
    key = (id(settings), agent_id, session_key, agent_workspace, str(statefs.state_dir()), cwd, namespace)
    known = _layouts.get(key)
    if known is not None and known[0] is settings:
        return known[1]
    if len(_layouts) >= 256:
        _layouts.clear()
    lay = _layout(settings, agent_id, session_key, agent_workspace, namespace)
    _layouts[key] = (settings, lay)
    return lay


_layouts: dict[tuple[int, str, str, str | None, str, str, str], tuple[SandboxSettings, Layout]] = {}


def _layout(
    settings: SandboxSettings, agent_id: str, session_key: str, agent_workspace: str | None, namespace: str
) -> Layout:
    namespace = namespace or split_namespace(session_key)[0]  # (as scope_key reads it)
    key = scope_key(settings.scope, agent_id, session_key, namespace)
    root = Path(settings.workspace_root)
    # The shared scope gets a sibling dir of its own, never the root: mounting the root would hand one
    # container every other scope's workspace (and the power to swap them for links). Slugs always end
    # in "-<hash>", so "shared" never collides with one; a gateway's own shared scope on a node is a slug.
    sandbox_ws = str(root / workspace_name(key))
    # On a shared node the agent's workspace is its gateway's agent's too (`<ns><agent>`, never the name).
    agent_ws = os.path.abspath(agent_workspace or agent_workspace_dir(namespace + agent_id))
    if settings.workspace_access == "rw":
        return Layout(key, container_name(settings, key), sandbox_ws, agent_ws, agent_ws, None)
    agent_mount = agent_ws if settings.workspace_access == "ro" else None
    return Layout(key, container_name(settings, key), sandbox_ws, agent_ws, sandbox_ws, agent_mount)


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in sorted(value.items()) if v is not None}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    return value


def camel_fields(obj: Any) -> dict[str, Any]:
    """A settings dataclass as config.toml spells its keys (for hashes and explanations)."""
    return {_camel(k): v for k, v in asdict(obj).items()}


def digest(payload: dict[str, Any]) -> str:
    """sha256 of a config payload: keys sorted, None dropped, array order kept (reference §6.3)."""
    text = json.dumps(_normalize(payload), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(settings: SandboxSettings, lay: Layout) -> str:
    """sha256 over the effective container config; array order matters, None is dropped (reference §6.3)."""
    # Every warm exec asks (manager.ensure): memoised by the settings' repr, which shows every field.
    key = (repr(settings), lay)
    known = _hashes.get(key)
    if known is None:
        if len(_hashes) >= 256:
            _hashes.clear()
        known = _hashes[key] = _config_hash(settings, lay)
    return known


_hashes: dict[tuple[str, Layout], str] = {}


def _config_hash(settings: SandboxSettings, lay: Layout) -> str:
    docker = camel_fields(settings.docker)
    docker.pop("pool")  # how many spares are kept changes no container
    payload = {
        "docker": docker,
        "workspaceAccess": settings.workspace_access,
        "workspaceDir": lay.workspace_dir,
        "agentWorkspaceDir": lay.agent_workspace,
        "mountFormatVersion": MOUNT_FORMAT_VERSION,
        "supervisor": SUPERVISOR_DIGEST,
    }
    if settings.egress.mode != "none":  # the proxy's socket and forwarder (its lists apply live, unhashed)
        payload["egress"] = settings.egress.mode
    if settings.backend != "docker":  # (absent for Docker: existing containers keep their hash)
        payload["backend"] = settings.backend
        payload["bwrapRootfs"] = settings.bwrap_rootfs
        payload["bwrapLandlock"] = settings.bwrap_landlock
        payload["bwrapTcpPorts"] = list(settings.bwrap_tcp_ports)
    return digest(payload)


def recreate_hint(settings: SandboxSettings, lay: Layout, agent_id: str) -> str:
    if settings.scope == "session":
        return f"exechost sandbox recreate --session {lay.scope_key}"
    if settings.scope == "agent":
        return f"exechost sandbox recreate --agent {agent_id}"
    return "exechost sandbox recreate --all"
