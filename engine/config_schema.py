"""The keys config.toml accepts: each one's attribute, kind, default and limits (the loader's schema)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.policy import ASKS, HOSTS, SECURITIES

MIB = 1024 * 1024
SANDBOX_MODES = ("off", "non-main", "all")
SANDBOX_SCOPES = ("session", "agent", "shared")
WORKSPACE_ACCESS = ("none", "ro", "rw")
DEFAULT_SANDBOX_IMAGE = "openclaw-sandbox:bookworm-slim"


@dataclass(frozen=True)
class Spec:
    """One config key: the attribute it fills, its kind, default and limits."""

    attr: str
    kind: str  # str | bool | int | number | size | strlist | strmap | enum | profiles
    default: Any = None
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
    "host": Spec("host", "enum", None, HOSTS),
    "security": Spec("security", "enum", None, SECURITIES),
    "ask": Spec("ask", "enum", None, ASKS),
    "askFallback": Spec("ask_fallback", "enum", None, SECURITIES),
    "node": Spec("node", "str"),
    "timeoutSec": Spec("timeout_sec", "int", 1800, minimum=1),
    # Clamped, not rejected: the same ranges OpenClaw clamps to.
    "backgroundMs": Spec("background_ms", "int", 10_000, clamp=(10, 120_000)),
    "cleanupMs": Spec("cleanup_ms", "int", 1_800_000, clamp=(60_000, 10_800_000)),
    "notifyOnExit": Spec("notify_on_exit", "bool", True),
    "notifyOnExitEmptySuccess": Spec("notify_on_exit_empty_success", "bool", False),
    "pathPrepend": Spec("path_prepend", "strlist", ()),
    "safeBins": Spec("safe_bins", "strlist", None),
    "safeBinProfiles": Spec("safe_bin_profiles", "profiles", None),
    "logCapBytes": Spec("log_cap_bytes", "int", 64 * MIB, minimum=64 * 1024),
}
ELEVATED_KEYS: dict[str, Spec | Table] = {"enabled": Spec("enabled", "bool", False)}
DOCKER_KEYS: dict[str, Spec | Table] = {
    "image": Spec("image", "str", DEFAULT_SANDBOX_IMAGE),
    "readOnlyRoot": Spec("read_only_root", "bool", True),
    "tmpfs": Spec("tmpfs", "strlist", ("/tmp", "/var/tmp", "/run")),
    "network": Spec("network", "str", "none"),
    "user": Spec("user", "str"),
    "capDrop": Spec("cap_drop", "strlist", ("ALL",)),
    "env": Spec("env", "strmap", {"LANG": "C.UTF-8"}),
    "memory": Spec("memory", "size"),
    "cpus": Spec("cpus", "number", None, minimum=0.01),
    # DESIGN §9 lists a pids limit among the hardened defaults (OpenClaw leaves it unset).
    "pidsLimit": Spec("pids_limit", "int", 512, minimum=1),
    "seccompProfile": Spec("seccomp_profile", "str"),
    "apparmorProfile": Spec("apparmor_profile", "str"),
    "binds": Spec("binds", "strlist", ()),
    "setupCommand": Spec("setup_command", "str"),
}
PRUNE_KEYS: dict[str, Spec | Table] = {
    "idleHours": Spec("idle_hours", "number", 24, minimum=0),
    "maxAgeDays": Spec("max_age_days", "number", 7, minimum=0),
}
SANDBOX_KEYS: dict[str, Spec | Table] = {
    "mode": Spec("mode", "enum", "off", SANDBOX_MODES),
    "scope": Spec("scope", "enum", "agent", SANDBOX_SCOPES),
    "workspaceAccess": Spec("workspace_access", "enum", "none", WORKSPACE_ACCESS),
    "workspaceRoot": Spec("workspace_root", "str"),
    "docker": Table("docker", DOCKER_KEYS),
    "prune": Table("prune", PRUNE_KEYS),
}
NODE_KEYS: dict[str, Spec | Table] = {
    "host": Spec("host", "str"),
    "port": Spec("port", "int", 22, minimum=1, maximum=65535),
    "user": Spec("user", "str"),
    "identityFile": Spec("identity_file", "str"),
    "knownHosts": Spec("known_hosts", "str"),
    "dockerSocket": Spec("docker_socket", "str"),
}
TOOLS_KEYS: dict[str, Spec | Table] = {
    "exec": Table("exec", EXEC_KEYS),
    "elevated": Table("elevated", ELEVATED_KEYS),
}
AGENT_KEYS: dict[str, Spec | Table] = {
    "id": Spec("id", "str"),
    "tools": Table("tools", TOOLS_KEYS),
    "sandbox": Table("sandbox", SANDBOX_KEYS),
}
# Keys of one safeBinProfiles entry (what engine.safebins.SafeBinProfile.from_config accepts).
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
    walk("agents.defaults.sandbox.", SANDBOX_KEYS)
    walk("agents.list[].", AGENT_KEYS)
    walk("nodes.<name>.", NODE_KEYS)
    return out
