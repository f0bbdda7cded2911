"""The keys config.toml accepts: attribute, kind and limits (defaults: once, on model.py's dataclasses)."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.modes import ASKS, HOSTS, SECURITIES

MIB = 1024 * 1024
SANDBOX_MODES = ("off", "non-main", "all")
SANDBOX_SCOPES = ("session", "agent", "shared")
WORKSPACE_ACCESS = ("none", "ro", "rw")
# What confines a sandbox: a Docker container, or bubblewrap namespaces with no daemon (engine.sandbox.bwrap).
SANDBOX_BACKENDS = ("docker", "bwrap")
# The seed's default image: Debian bookworm with the agent's tools, built by `exechost sandbox setup`
# (mmdebstrap + docker import, no registry). The busybox one (engine/sandbox/Dockerfile) is the fast path.
DEFAULT_SANDBOX_IMAGE = "openclaw-sandbox:bookworm-slim"
BUSYBOX_SANDBOX_IMAGE = "exechost-sandbox:busybox"
DEFAULT_BROWSER_IMAGE = "openclaw-sandbox-browser:bookworm-slim"
DEFAULT_BROWSER_PREFIX = "openclaw-sbx-browser-"
DEFAULT_CONTAINER_PREFIX = "openclaw-sbx-"
DEFAULT_WORKDIR = "/workspace"
DEFAULT_PIDS_LIMIT = 512
DEFAULT_SANDBOX_POOL = 1  # ready containers per sandbox config (engine.sandbox.pool)
# Bounded defaults so a fork bomb or fd leak inside a sandbox stays inside it (OpenClaw sets none).
DEFAULT_ULIMITS: dict[str, tuple[int, int]] = {"nofile": (4096, 8192), "core": (0, 0)}
# The resource names Docker's --ulimit accepts; anything else fails only at `docker create`.
ULIMIT_NAMES = (
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
)
# Container names are cut at 63 chars; a longer prefix would cut into the slug's hash and let
# distinct scope keys share one container.
MAX_CONTAINER_PREFIX = 63 - 41
# `workdir` is where the workspace is mounted: never over the root, the kernel's filesystems, the agent
# workspace mount or exechost's own supervisor mounts (engine.sandbox.settings/supervisor name them).
RESERVED_WORKDIRS = (
    "/",
    "/proc",
    "/sys",
    "/dev",
    "/agent",
    "/.exechost",
    "/.exechost-bin",
    "/.exechost-egress",
)


@dataclass(frozen=True)
class Spec:
    """One config key: the attribute it fills, its kind, default and limits."""

    attr: str
    # str | bool | int | number | size | swap | strlist | envkeys | safebins | strmap | enum | profiles
    # | ulimits | iplist | hostlist | cpath (container path) | prefix (container name prefix)
    # | egresslist (egress name patterns) | resolvemap (name -> IP address) | portlist (TCP ports)
    kind: str
    choices: tuple[str, ...] = ()
    clamp: tuple[int, int] | None = None
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class Table:
    """A nested table of keys."""

    attr: str
    keys: Mapping[str, Spec | Table]


EXEC_KEYS: dict[str, Spec | Table] = {
    "host": Spec("host", "enum", HOSTS),
    "security": Spec("security", "enum", SECURITIES),
    "ask": Spec("ask", "enum", ASKS),
    "askFallback": Spec("ask_fallback", "enum", SECURITIES),
    "node": Spec("node", "str"),
    "timeoutSec": Spec("timeout_sec", "int", minimum=1),
    # Clamped, not rejected: the same ranges OpenClaw clamps to.
    "backgroundMs": Spec("background_ms", "int", clamp=(10, 120_000)),
    "cleanupMs": Spec("cleanup_ms", "int", clamp=(60_000, 10_800_000)),
    "notifyOnExit": Spec("notify_on_exit", "bool"),
    "notifyOnExitEmptySuccess": Spec("notify_on_exit_empty_success", "bool"),
    "pathPrepend": Spec("path_prepend", "strlist"),
    "safeBins": Spec("safe_bins", "safebins"),
    "safeBinProfiles": Spec("safe_bin_profiles", "profiles"),
    "logCapBytes": Spec("log_cap_bytes", "int", minimum=64 * 1024),
    "inertEnv": Spec("inert_env", "envkeys"),
    "inheritEnv": Spec("inherit_env", "inheritkeys"),
    # Programs the operator has checked take no code from their working tree (engine.commands.treesafe).
    "treeSafe": Spec("tree_safe", "treesafe"),
    # Per agent (engine.sessions.quota): sessions one agent keeps, output its sessions keep on disk.
    "maxSessionsPerAgent": Spec("max_sessions_per_agent", "int", minimum=1),
    "maxOutputBytesPerAgent": Spec("max_output_bytes_per_agent", "int", minimum=1024 * 1024),
    "maxSandboxesPerAgent": Spec("max_sandboxes_per_agent", "int", minimum=1),  # engine.sandbox.agentcap
    "hostView": Spec("host_view", "enum", ("bwrap", "none")),
    # Whose network gateway-host runs are in (engine.commands.hostnet): the agent's own, or the host's.
    "hostNetwork": Spec("host_network", "enum", ("own", "host")),
    # Directories of the home (besides each run's workdir) gateway-host commands may write
    # (engine.commands.hostview: the rest of the home is read-only in the host view).
    "hostWritable": Spec("host_writable", "hostdirs"),
    # Directories every agent gets its own of in its host view (engine.commands.hostprivate: /tmp, ...).
    "hostPrivate": Spec("host_private", "privatedirs"),
}
ELEVATED_KEYS: dict[str, Spec | Table] = {"enabled": Spec("enabled", "bool")}
DOCKER_KEYS: dict[str, Spec | Table] = {
    "image": Spec("image", "str"),
    "containerPrefix": Spec("container_prefix", "prefix"),
    "workdir": Spec("workdir", "cpath"),
    "readOnlyRoot": Spec("read_only_root", "bool"),
    "tmpfs": Spec("tmpfs", "strlist"),
    "network": Spec("network", "str"),
    "user": Spec("user", "str"),
    "capDrop": Spec("cap_drop", "strlist"),
    "env": Spec("env", "strmap"),
    "memory": Spec("memory", "size"),
    "memorySwap": Spec("memory_swap", "swap"),
    "cpus": Spec("cpus", "number", minimum=0.01),
    # DESIGN §9 lists a pids limit among the hardened defaults (OpenClaw leaves it unset).
    "pidsLimit": Spec("pids_limit", "int", minimum=1),
    "ulimits": Spec("ulimits", "ulimits"),
    # 1/N of the host's fs.file-max one sandbox may hold (nofile x pidsLimit): engine.sandbox.filetable.
    "fileTableShare": Spec("file_table_share", "int", minimum=2, maximum=4096),
    "seccompProfile": Spec("seccomp_profile", "str"),
    "apparmorProfile": Spec("apparmor_profile", "str"),
    "dns": Spec("dns", "iplist"),
    "extraHosts": Spec("extra_hosts", "hostlist"),
    "binds": Spec("binds", "strlist"),
    "setupCommand": Spec("setup_command", "str"),
    # Ready containers kept per config (engine.sandbox.pool); 0 turns the pool off. Not in the config hash.
    "pool": Spec("pool", "int", minimum=0, maximum=16),
    # Opt-outs of validate.py's refusals; explicit booleans only, never on by default.
    "dangerouslyAllowReservedContainerTargets": Spec("dangerously_allow_reserved_container_targets", "bool"),
    "dangerouslyAllowExternalBindSources": Spec("dangerously_allow_external_bind_sources", "bool"),
    "dangerouslyAllowContainerNamespaceJoin": Spec("dangerously_allow_container_namespace_join", "bool"),
}
PRUNE_KEYS: dict[str, Spec | Table] = {
    "idleHours": Spec("idle_hours", "number", minimum=0),
    "maxAgeDays": Spec("max_age_days", "number", minimum=0),
}
# Reference §6.1 browser keys. The ports are inside the container: nothing is published on the host.
BROWSER_KEYS: dict[str, Spec | Table] = {
    "enabled": Spec("enabled", "bool"),
    "image": Spec("image", "str"),
    "containerPrefix": Spec("container_prefix", "prefix"),
    "network": Spec("network", "str"),
    "cdpPort": Spec("cdp_port", "int", minimum=1, maximum=65535),
    "vncPort": Spec("vnc_port", "int", minimum=1, maximum=65535),
    "noVncPort": Spec("no_vnc_port", "int", minimum=1, maximum=65535),
    "headless": Spec("headless", "bool"),
    "enableNoVnc": Spec("enable_no_vnc", "bool"),
    "allowHostControl": Spec("allow_host_control", "bool"),
    "autoStart": Spec("auto_start", "bool"),
    "autoStartTimeoutMs": Spec("auto_start_timeout_ms", "int", minimum=1000, maximum=600_000),
    "binds": Spec("binds", "strlist"),
}
# `[agents.defaults.sandbox.bwrap]`: the system view a bubblewrap sandbox shows read-only (unset: the host's
# /usr, /bin, /lib* and a chosen part of /etc; set: every top-level dir of this tree, such as a Debian one).
# `landlock`: the extra layer where the kernel offers it; `tcpPorts`: set, under it, the only loopback TCP
# ports the sandbox's own programs may bind and connect to (egress's proxy port is added); unset, TCP is
# left to the sandbox's own network namespace, which holds nothing but its loopback.
BWRAP_KEYS: dict[str, Spec | Table] = {
    "rootfs": Spec("rootfs", "str"),
    "landlock": Spec("landlock", "bool"),
    "tcpPorts": Spec("tcp_ports", "portlist"),
}
# `[agents.defaults.sandbox.egress]`: a sandbox's only route out, the host's proxy (engine.sandbox.egress).
EGRESS_MODES = ("none", "allowlist", "open")
EGRESS_KEYS: dict[str, Spec | Table] = {
    "mode": Spec("mode", "enum", EGRESS_MODES),
    "allow": Spec("allow", "egresslist"),
    "deny": Spec("deny", "egresslist"),
    "ask": Spec("ask", "bool"),
    "resolve": Spec("resolve", "resolvemap"),
    # Proxy connections one agent's sandboxes hold at once (engine.sandbox.egress.proxy caps the rest).
    "maxConnections": Spec("max_connections", "int", minimum=1, maximum=1024),
}
SANDBOX_KEYS: dict[str, Spec | Table] = {
    "backend": Spec("backend", "enum", SANDBOX_BACKENDS),
    "mode": Spec("mode", "enum", SANDBOX_MODES),
    "scope": Spec("scope", "enum", SANDBOX_SCOPES),
    "workspaceAccess": Spec("workspace_access", "enum", WORKSPACE_ACCESS),
    "workspaceRoot": Spec("workspace_root", "str"),
    # All of one agent's workspaces together, in bytes (engine.sandbox.wsbudget: each image's size, its cap,
    # counted); at least one small workspace (its FLOOR_BYTES). Unset: a quarter of their filesystem.
    "maxWorkspaceBytesPerAgent": Spec("max_workspace_bytes_per_agent", "int", minimum=2 * MIB),
    # A `[nodes.<name>]` whose Docker engine runs this agent's sandboxes (its node runner creates them).
    "node": Spec("node", "str"),
    "docker": Table("docker", DOCKER_KEYS),
    "bwrap": Table("bwrap", BWRAP_KEYS),
    "egress": Table("egress", EGRESS_KEYS),
    "browser": Table("browser", BROWSER_KEYS),
    "prune": Table("prune", PRUNE_KEYS),
}
NODE_KEYS: dict[str, Spec | Table] = {
    "host": Spec("host", "str"),
    "port": Spec("port", "int", minimum=1, maximum=65535),
    "user": Spec("user", "str"),
    "identityFile": Spec("identity_file", "str"),
    "identityAgent": Spec("identity_agent", "str"),
    "knownHosts": Spec("known_hosts", "str"),
    "dockerSocket": Spec("docker_socket", "str"),
    "proxyJump": Spec("proxy_jump", "str"),
    "exechost": Spec("exechost", "str"),
    "displayName": Spec("display_name", "str"),
    # The node's environment for `exechost node serve` (each value quoted on the remote command line);
    # stateDir is OPENCLAW_STATE_DIR there: the node's own config, approvals and sessions.
    "env": Spec("env", "strmap"),
    "stateDir": Spec("state_dir", "str"),
}
# Seed 004 §4.2: which tools a sandboxed session may call (deny first; an empty allow allows all).
SANDBOX_TOOL_KEYS: dict[str, Spec | Table] = {
    "allow": Spec("allow", "strlist"),
    "deny": Spec("deny", "strlist"),
}
TOOLS_SANDBOX_KEYS: dict[str, Spec | Table] = {"tools": Table("tools", SANDBOX_TOOL_KEYS)}
TOOLS_KEYS: dict[str, Spec | Table] = {
    "exec": Table("exec", EXEC_KEYS),
    "elevated": Table("elevated", ELEVATED_KEYS),
    "sandbox": Table("sandbox", TOOLS_SANDBOX_KEYS),
}
AGENT_KEYS: dict[str, Spec | Table] = {
    "id": Spec("id", "str"),
    # The Unix account this agent runs under (either key): a peer with this uid on the agents' socket
    # is this agent, with no token (docs/SECURITY.md "Principals").
    "uid": Spec("uid", "int", minimum=0, maximum=2**32 - 2),
    "user": Spec("user", "str"),
    "tools": Table("tools", TOOLS_KEYS),
    "sandbox": Table("sandbox", SANDBOX_KEYS),
    # The `[nodes.<name>]` this agent may use (runs, sessions, sandboxes; default: every node).
    "nodes": Spec("nodes", "strlist"),
}
# `[gateway]`: the agents' socket, which admits the members of one group (each mapped by uid to an agent).
GATEWAY_KEYS: dict[str, Spec | Table] = {
    "agentGroup": Spec("agent_group", "str"),
    "agentSocket": Spec("agent_socket", "str"),
    # Who a connection that proves only the gateway token is: agent `main` (default), or nobody (refused),
    # so a credentialed agent that leaves its credential out gains nothing (docs/SECURITY.md).
    "anonymous": Spec("anonymous", "enum", ("main", "none")),
}
# Keys of one safeBinProfiles entry (what engine.commands.safebins.SafeBinProfile.from_config accepts).
PROFILE_KEYS: dict[str, str] = {
    "minPositional": "int",
    "maxPositional": "int",
    "allowedValueFlags": "strlist",
    "deniedFlags": "strlist",
    "booleanFlags": "strlist",
}


def known_keys() -> list[str]:
    """Every dotted key the loader accepts (as `agents.list[].…` and `nodes.<name>.…` for those tables)."""
    out: list[str] = []

    def walk(prefix: str, keys: Mapping[str, Spec | Table]) -> None:
        for name, spec in keys.items():
            if isinstance(spec, Table):
                walk(f"{prefix}{name}.", spec.keys)
            else:
                out.append(prefix + name)

    walk("tools.", TOOLS_KEYS)
    walk("gateway.", GATEWAY_KEYS)
    walk("agents.defaults.sandbox.", SANDBOX_KEYS)
    walk("agents.list[].", AGENT_KEYS)
    walk("nodes.<name>.", NODE_KEYS)
    return out


# ------------------------------------------------------------- value checks of the sandbox kinds

_HOSTNAME = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def parse_ulimit(item: Any) -> tuple[int, int]:
    """One `ulimits` value (N, "soft:hard" or {soft, hard}) as (soft, hard), -1 unlimited; else ValueError."""
    soft: Any
    hard: Any
    if isinstance(item, dict):
        if not item or set(item) - {"soft", "hard"}:
            raise ValueError("expected { soft = N, hard = N }")
        soft, hard = item.get("soft", item.get("hard")), item.get("hard", item.get("soft"))
    elif isinstance(item, str):
        m = re.fullmatch(r"\s*(-?\d+)\s*:\s*(-?\d+)\s*", item)
        if m is None:
            raise ValueError(f'invalid ulimit {item!r} (expected N, "soft:hard" or a table)')
        soft, hard = int(m.group(1)), int(m.group(2))
    else:
        soft = hard = item
    for v in (soft, hard):
        if isinstance(v, bool) or not isinstance(v, int) or v < -1:
            raise ValueError(f"expected a non-negative integer or -1 (unlimited), got {v!r}")
    if hard != -1 and (soft == -1 or soft > hard):
        raise ValueError(f"soft limit {soft} exceeds hard limit {hard}")
    return soft, hard


def container_path_problem(value: str) -> str | None:
    """Why `value` cannot be the workdir (an absolute, normalised container path a bind may target)."""
    if not value.startswith("/") or posixpath.normpath(value) != value or value.startswith("//"):
        return f"expected an absolute, normalised container path, got {value!r}"
    if re.search(r"[\s:,\x00-\x1f\x7f]", value):  # would break the `host:container:mode` volume spec
        return f"invalid character in container path {value!r}"
    for reserved in RESERVED_WORKDIRS:
        if value == reserved or (reserved != "/" and value.startswith(reserved + "/")):
            return f"{value!r} is reserved (it would hide {reserved} in the container)"
    return None


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_host_entry(item: str) -> bool:
    """An `extraHosts` entry as `docker --add-host` takes it: "name:ip" (or Docker's "name:host-gateway")."""
    name, sep, ip = item.partition(":")
    return bool(sep) and _HOSTNAME.fullmatch(name) is not None and (is_ip(ip) or ip == "host-gateway")


def size_bytes(value: str | int) -> int:
    """A Docker size ("512m", "2g", bytes) in bytes."""
    if isinstance(value, int):
        return value
    text = value.strip().lower()
    scale = {"b": 1, "k": 1024, "m": MIB, "g": 1024 * MIB}.get(text[-1:])
    return int(float(text[:-1]) * scale) if scale is not None else int(float(text))
