"""Refuse dangerous sandbox configs (binds, network, profiles, env) with OpenClaw's exact texts (§6.6)."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.errors import ExecHostError
from engine.sandbox.settings import AGENT_MOUNT, DockerSettings, Layout, SandboxSettings

BLOCKED_HOST_PATHS = (
    "/etc", "/private/etc", "/proc", "/sys", "/dev", "/root", "/boot", "/run", "/var/run",
    "/private/var/run", "/var/run/docker.sock", "/private/var/run/docker.sock", "/run/docker.sock",
)  # fmt: skip
BLOCKED_HOME_SUBPATHS = (".aws", ".cargo", ".config", ".docker", ".gnupg", ".netrc", ".npm", ".ssh")
# Our own supervisor mounts are reserved too: shadowing them would hijack command dispatch.
RESERVED_TARGETS = ("/workspace", AGENT_MOUNT, "/.exechost", "/.exechost-bin", "/.exechost-egress")


class SandboxSecurityError(ExecHostError, ValueError):
    """A sandbox config was refused; the message is the exact text shown to agent and operator."""

    code = "tool_error"


def normalize_path(raw: str) -> str:
    """Resolve `.`/`..`, collapse `//`, strip a trailing `/` — purely lexically."""
    norm = posixpath.normpath(raw.replace("\\", "/"))
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    return norm


def resolve_via_existing_ancestor(path: str) -> str:
    """Canonicalise through the deepest existing ancestor, so a symlinked parent of a missing leaf counts."""
    current = path
    tail: list[str] = []
    while True:
        if os.path.lexists(current):
            real = os.path.realpath(current)
            return normalize_path(posixpath.join(real, *reversed(tail))) if tail else real
        parent = posixpath.dirname(current)
        if parent == current:
            return path
        tail.append(posixpath.basename(current))
        current = parent


def _inside(root: str, target: str) -> bool:
    return root == "/" or target == root or target.startswith(root.rstrip("/") + "/")


def split_bind(bind: str) -> tuple[str, str, str]:
    """`source:target[:options]` → (source, target, options)."""
    parts = bind.strip().split(":")
    if len(parts) < 2:
        return bind.strip(), "", ""
    return parts[0], parts[1], ":".join(parts[2:])


def _home_roots() -> list[str]:
    roots: list[str] = []
    candidates = [os.environ.get("OPENCLAW_HOME", ""), os.environ.get("HOME", ""), os.path.expanduser("~")]
    try:
        import pwd

        candidates.append(pwd.getpwuid(os.getuid()).pw_dir)
    except (KeyError, ImportError):
        pass
    for cand in candidates:
        if not cand or not cand.startswith("/"):
            continue
        for variant in (normalize_path(cand), resolve_via_existing_ancestor(normalize_path(cand))):
            if variant != "/" and variant not in roots:
                roots.append(variant)
    return roots


def blocked_host_paths() -> list[str]:
    paths = [normalize_path(p) for p in BLOCKED_HOST_PATHS]
    for home in _home_roots():
        for sub in BLOCKED_HOME_SUBPATHS:
            candidate = normalize_path(posixpath.join(home, sub))
            if candidate not in paths:
                paths.append(candidate)
    return paths


def _blocked_error(bind: str, verb: str, blocked: str) -> SandboxSecurityError:
    return SandboxSecurityError(
        f'Sandbox security: bind mount "{bind}" {verb} blocked path "{blocked}". Mounting system '
        "directories, credential paths, or Docker socket paths into sandbox containers is not allowed. "
        "Use project-specific paths instead (e.g. /home/user/myproject)."
    )


def _check_source(bind: str, source: str, blocked: list[str], roots: list[str], allow_external: bool) -> None:
    if source == "/":
        raise _blocked_error(bind, "covers", "/")
    for path in blocked:
        if _inside(path, source):
            raise _blocked_error(bind, "targets", path)
    if allow_external or not roots:
        return
    if not any(_inside(root, source) for root in roots):
        raise SandboxSecurityError(
            f'Sandbox security: bind mount "{bind}" source "{source}" is outside allowed roots '
            f"({', '.join(roots)}). Use a dangerous override only when you fully trust this runtime."
        )


def validate_binds(
    binds: Iterable[str],
    allowed_roots: Iterable[str] = (),
    *,
    allow_external: bool = False,
    allow_reserved: bool = False,
) -> None:
    roots: list[str] = []
    for root in allowed_roots:
        if root.startswith("/"):
            for variant in (normalize_path(root), resolve_via_existing_ancestor(normalize_path(root))):
                if variant not in roots:
                    roots.append(variant)
    blocked = blocked_host_paths()
    for raw in binds:
        bind = raw.strip()
        if not bind:
            continue
        source, target, _ = split_bind(bind)
        if not source.startswith("/"):
            raise SandboxSecurityError(
                f'Sandbox security: bind mount "{bind}" uses a non-absolute source path "{source}". '
                "Only absolute POSIX paths are supported for sandbox binds."
            )
        if not allow_reserved and target.startswith("/"):
            norm_target = normalize_path(target)
            for reserved in RESERVED_TARGETS:
                if _inside(reserved, norm_target):
                    raise SandboxSecurityError(
                        f'Sandbox security: bind mount "{bind}" targets reserved container path "{reserved}" '
                        f'(resolved target: "{norm_target}"). This can shadow OpenClaw sandbox mounts. '
                        "Use a dangerous override only when you fully trust this runtime."
                    )
        if not target.startswith("/"):
            raise SandboxSecurityError(
                f'Sandbox security: bind mount "{bind}" needs an absolute container target path.'
            )
        norm = normalize_path(source)
        _check_source(bind, norm, blocked, roots, allow_external)
        _check_source(bind, resolve_via_existing_ancestor(norm), blocked, roots, allow_external)


def validate_network(network: str | None, *, allow_namespace_join: bool = False) -> None:
    value = (network or "").strip().lower()
    if value == "host":
        raise SandboxSecurityError(
            f'Sandbox security: network mode "{network}" is blocked. Network "host" mode bypasses container '
            'network isolation. Use "bridge" or "none" instead.'
        )
    if value.startswith("container:") and not allow_namespace_join:
        raise SandboxSecurityError(
            f'Sandbox security: network mode "{network}" is blocked by default. Network "container:*" joins '
            "another container namespace and bypasses sandbox network isolation. Use a custom bridge "
            "network, or set dangerouslyAllowContainerNamespaceJoin=true only when you fully trust this "
            "runtime."
        )


def validate_profiles(seccomp: str | None, apparmor: str | None) -> None:
    if seccomp and seccomp.strip().lower() == "unconfined":
        raise SandboxSecurityError(
            f'Sandbox security: seccomp profile "{seccomp}" is blocked. Disabling seccomp removes syscall '
            "filtering and weakens sandbox isolation. Use a custom seccomp profile file or omit this setting."
        )
    if apparmor and apparmor.strip().lower() == "unconfined":
        raise SandboxSecurityError(
            f'Sandbox security: apparmor profile "{apparmor}" is blocked. Disabling AppArmor removes '
            "mandatory access controls and weakens sandbox isolation. Use a named AppArmor profile or omit "
            "this setting."
        )


def refuse_writable_sources(binds: Iterable[str], writable: Iterable[str]) -> None:
    """Docker only: no bind source inside a tree a sandbox writes. The daemon resolves a bind by path at
    every container start, so such a source (checked here) can be swapped for a link to a host directory
    before that mount, and no check on our side can pin it (docs/SECURITY.md). bwrap mounts by fd instead."""
    roots: list[str] = []
    for root in writable:
        for variant in (normalize_path(root), resolve_via_existing_ancestor(normalize_path(root))):
            if variant not in roots:
                roots.append(variant)
    for raw in binds:
        bind = raw.strip()
        source = normalize_path(split_bind(bind)[0]) if bind else ""
        if not source.startswith("/"):
            continue
        for candidate in (source, resolve_via_existing_ancestor(source)):
            inside = next((r for r in roots if _inside(r, candidate)), None)
            if inside is not None:
                raise SandboxSecurityError(
                    f'Sandbox security: bind mount "{bind}" (docker.binds) has its source inside the '
                    f'workspace "{inside}", which the sandbox writes. Docker mounts a bind by path at every '
                    "container start, so the sandbox could replace it with a link to any host directory. "
                    "Use the path under the container's workspace mount instead (it is mounted already), "
                    'bind a directory no sandbox can write, or use backend = "bwrap" (it mounts by fd).'
                )


def docker_writable(settings: SandboxSettings, lay: Layout) -> list[str]:
    """The tree a Docker sandbox of this scope writes: its workspace mount (the agent's own under rw)."""
    return [] if settings.backend == "bwrap" else [lay.workspace_dir]


def validate_docker(
    docker: DockerSettings, allowed_roots: Iterable[str], writable: Iterable[str] = ()
) -> None:
    """Everything checked at each container create (and start). `writable`: for the Docker backend, the
    trees a sandbox writes, where no bind source may lie (refuse_writable_sources)."""
    validate_binds(
        docker.binds,
        allowed_roots,
        allow_external=docker.dangerously_allow_external_bind_sources,
        allow_reserved=docker.dangerously_allow_reserved_container_targets,
    )
    refuse_writable_sources(docker.binds, writable)
    validate_network(docker.network, allow_namespace_join=docker.dangerously_allow_container_namespace_join)
    validate_profiles(docker.seccomp_profile, docker.apparmor_profile)
    if docker.user is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", docker.user):
        raise SandboxSecurityError(f'Sandbox security: docker user "{docker.user}" is not a valid user spec.')
    for entry in docker.tmpfs:
        target = normalize_path(entry.split(":", 1)[0])
        # A tmpfs over our control mounts would silently cut the exec supervisor off.
        for reserved in RESERVED_TARGETS[2:]:
            if _inside(reserved, target) or _inside(target, reserved):
                raise SandboxSecurityError(
                    f'Sandbox security: tmpfs "{entry}" targets reserved container path "{reserved}".'
                )


# --- container env ------------------------------------------------------------------------------------

_SECRET_SUFFIX = re.compile(r"_?(API_KEY|TOKEN|PASSWORD|PRIVATE_KEY|SECRET)$", re.IGNORECASE)
_SECRET_NAMES = frozenset(
    {
        "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY",
        "TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
        "OPENCLAW_GATEWAY_TOKEN", "OPENCLAW_GATEWAY_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID", "GH_TOKEN", "GITHUB_TOKEN", "GITLAB_TOKEN", "NPM_TOKEN", "DATABASE_URL",
        "AZURE_CLIENT_SECRET",
    }
)  # fmt: skip
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_credential_key(key: str) -> bool:
    return key.upper() in _SECRET_NAMES or bool(_SECRET_SUFFIX.search(key))


@dataclass
class ContainerEnv:
    env: dict[str, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sanitize_container_env(
    env: Mapping[str, str], *, explicit: Iterable[str] = (), reserved: Iterable[str] = ()
) -> ContainerEnv:
    """Drop credential-like keys unless listed in docker.env (OpenClaw drops them silently, even then).

    `explicit` are keys from the config's docker.env: those the operator typed on purpose pass through.
    NUL bytes and non-portable names are always refused; reserved keys (our supervisor's) cannot be set.
    """
    allowed = {k for k in explicit}
    reserved_set = set(reserved)
    out = ContainerEnv()
    for key, value in env.items():
        text = str(value)
        if not _ENV_KEY.match(key) or "\x00" in text or key in reserved_set:
            out.blocked.append(key)
            continue
        if is_credential_key(key) and key not in allowed:
            out.blocked.append(key)
            continue
        if len(text) > 32768:
            out.warnings.append(f"Warning: sandbox env {key} is longer than 32768 characters.")
        out.env[key] = text
    if out.blocked:
        out.warnings.append(f"Blocked sensitive environment variables: {', '.join(sorted(out.blocked))}")
    return out


def filter_exec_env(env: Mapping[str, str], explicit: Iterable[str]) -> ContainerEnv:
    """Per-command env for a sandbox (the tool's `env` param): no credentials unless the operator put the same
    key in docker.env, no loader hooks, no names a shell cannot export. The exec pipeline could also hand us
    a whole host env by mistake: host secrets must not cross into the container either way."""
    allowed = set(explicit)
    out = ContainerEnv()
    for key, value in dict(env or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        bad = not _ENV_KEY.match(key) or "\x00" in value or key == "EXECHOST_SESSION"
        if bad or key.startswith(("LD_", "BASH_FUNC_")) or (is_credential_key(key) and key not in allowed):
            out.blocked.append(key)
            continue
        out.env[key] = value
    if out.blocked:
        out.warnings.append(
            f"Warning: sandbox exec dropped env keys: {', '.join(sorted(out.blocked))} (credential-like keys "
            "pass only when agents.defaults.sandbox.docker.env names them)."
        )
    return out
