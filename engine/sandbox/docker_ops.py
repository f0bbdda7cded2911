"""Blocking docker-py calls for sandboxes (run in asyncio.to_thread): create, inspect, remove, build."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import statefs
from engine.errors import ExecHostError
from engine.sandbox import dockercg, dockerpts, dockerseccomp, filetable, rambudget
from engine.sandbox import supervisor as sv
from engine.sandbox.egress import forwarder
from engine.sandbox.settings import (
    AGENT_MOUNT,
    MOUNT_FORMAT_VERSION,
    STATE_LABEL,
    DockerSettings,
    Layout,
    SandboxSettings,
    split_namespace,
    state_id,
)

LABEL = "openclaw.sandbox"
# Set on a pool container at create (engine.sandbox.pool): its pool key, and the dev:inode of the workspace
# dir it was born with. Labels are immutable, so a claimed container keeps them; its scope is the registry's.
POOL_LABEL = "exechost.pool"
POOL_WS_LABEL = "exechost.poolWorkspace"
DOCKERFILE = Path(__file__).with_name("Dockerfile")


class SandboxUnavailable(ExecHostError):
    """Docker or the image is missing; the message says what to run."""

    code = "tool_error"


_client: Any = None
_client_pid: int | None = None


def client() -> Any:
    """One docker-py client per process (keeps its HTTP connection pool to the engine socket)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        try:
            import docker
        except ImportError as exc:  # pragma: no cover - docker is a declared dependency
            raise SandboxUnavailable(
                "Sandbox mode requires Docker, but the docker Python package is not installed. "
                "Run `pip install docker`."
            ) from exc
        try:
            new = docker.from_env(timeout=60)
            new.ping()
        except Exception as exc:
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise SandboxUnavailable(
                f"Sandbox mode requires Docker, but no Docker engine answers at {host} "
                f"({exc.__class__.__name__}). "
                "Install Docker and start the engine (e.g. `sudo systemctl start docker`, or "
                '`bash scripts/services.sh` in a dev checkout), or set agents.defaults.sandbox.mode = "off".'
            ) from exc
        _client, _client_pid = new, os.getpid()
    return _client


def reset_client() -> None:
    global _client
    _client = None


def api_errors() -> tuple[type[Exception], ...]:
    """What a docker-py call raises when the engine refuses or the connection fails (requests' errors
    are OSErrors)."""
    import docker.errors

    return (docker.errors.DockerException, OSError)


def not_found_type() -> type[Exception]:
    import docker.errors

    return docker.errors.NotFound


def ensure_image(image: str) -> None:
    import docker.errors

    try:
        client().images.get(image)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"Sandbox image not found: {image}. Build or pull it first "
            "(`exechost sandbox setup` builds the default image)."
        ) from None


@dataclass
class ContainerState:
    name: str
    exists: bool
    running: bool = False
    image: str = ""
    labels: dict[str, str] | None = None
    created_at_ms: int | None = None
    id: str = ""

    @property
    def config_hash(self) -> str | None:
        return (self.labels or {}).get("openclaw.configHash")

    @property
    def pool_key(self) -> str | None:
        """Set when the container was born in the pool (claimed or not)."""
        return (self.labels or {}).get(POOL_LABEL)


def inspect(name: str) -> ContainerState:
    try:
        info = client().api.inspect_container(name)
    except not_found_type():
        return ContainerState(name, False)
    labels = dict(info.get("Config", {}).get("Labels") or {})
    created = labels.get("openclaw.createdAtMs")
    return ContainerState(
        name=name,
        exists=True,
        running=bool(info.get("State", {}).get("Running")),
        image=str(info.get("Config", {}).get("Image", "")),
        labels=labels,
        created_at_ms=int(created) if created and created.isdigit() else None,
        id=str(info.get("Id", "")),
    )


def create_kwargs(
    settings: SandboxSettings,
    lay: Layout,
    *,
    config_hash: str,
    created_at_ms: int,
    env: dict[str, str],
    user: str | None,
    has_busybox: bool,
    agent_id: str,
    extra_labels: dict[str, str] | None = None,
    pool_workspace: str | None = None,
) -> dict[str, Any]:
    """docker-py `containers.create` arguments: hardened defaults plus the resource keys (reference §6.2).

    `pool_workspace` (the workspace's dev:inode) makes a pool container: no scope or agent labels, since
    any scope of its pool key (one owner's: pool.pool_key) may claim it, and `config_hash` is then the pool
    key; `agent_id` then names only the owner group it is made in."""
    d = settings.docker
    labels = {
        LABEL: "1",
        "openclaw.createdAtMs": str(created_at_ms),
        "openclaw.mountFormatVersion": str(MOUNT_FORMAT_VERSION),
        "openclaw.configHash": config_hash,
        STATE_LABEL: state_id(),
        **(extra_labels or {}),
    }
    if pool_workspace is None:
        labels.update({"openclaw.sessionKey": lay.scope_key, "exechost.agentId": agent_id})
    else:  # (made for one agent's claims: in its owner group, since a claim cannot move a cgroup)
        labels.update({POOL_LABEL: config_hash, POOL_WS_LABEL: pool_workspace})
    # Its owner group is its scope's owner's: on a shared node a gateway's agent's (namespace + agent, as
    # that agent's host runs there are: ExecContext.owner), never every gateway's agent of the name.
    owner = dockercg.owner_of(settings.scope, split_namespace(lay.scope_key)[0] + agent_id)
    volumes = [f"{lay.workspace_dir}:{d.workdir}:rw"]
    if lay.agent_mount is not None:
        volumes.append(f"{lay.agent_mount}:{AGENT_MOUNT}:ro")
    # read-only: its FIFOs still open for writing; the host makes every entry (supervisor.furnish)
    volumes.append(f"{sv.ctl_dir(lay.name)}:{sv.CTL_MOUNT}:ro")
    volumes.append(f"{sv.bin_dir()}:{sv.BIN_MOUNT}:ro")
    command = sv.supervisor_command(has_busybox)
    environment = {**env, "OPENCLAW_CLI": "1"}
    if settings.egress.mode != "none":  # network none, and the proxy's socket the only way out
        volumes.append(f"{forwarder.socket_dir(lay.name)}:{forwarder.MOUNT}:ro")
        command = forwarder.wrap(command)
        environment.update(forwarder.PROXY_ENV)
    volumes.extend(b.strip() for b in d.binds if b.strip())  # after ours: reserved targets are refused
    kwargs: dict[str, Any] = {
        "image": d.image,
        "command": command,
        "name": lay.name,
        "labels": labels,
        "environment": environment,
        "working_dir": d.workdir,
        "volumes": volumes,
        "network_mode": d.network or "none",
        **hardening_kwargs(d, user),
    }
    parent = dockercg.parent_for(owner)  # pidsLimit caps one container; the owner's group caps them all
    if parent is not None:
        kwargs["cgroup_parent"] = parent
    return kwargs


# Whatever else the operator keeps, never the capabilities that make a set-id or file-capability binary
# (security.capability xattr) or a device node in a workspace the host shares.
HOST_FILE_CAPS = ("FSETID", "SETFCAP", "MKNOD")


def _cap_drop(configured: tuple[str, ...]) -> list[str]:
    names = {c.upper().removeprefix("CAP_") for c in configured}
    if "ALL" in names:
        return list(configured)
    return [*configured, *(c for c in HOST_FILE_CAPS if c not in names)]


# One file (no rotated ones beside it) of at most this much: a flood rotates in place.
LOG_CONFIG: dict[str, Any] = {"type": "json-file", "config": {"max-size": "64k", "max-file": "1"}}


def hardening_kwargs(d: DockerSettings, user: str | None) -> dict[str, Any]:
    """What every exechost container shares: init, read-only root, tmpfs, dropped capabilities,
    no-new-privileges, profiles, limits (sandboxes and browser sandboxes alike)."""
    from docker.types import Ulimit

    security_opt = ["no-new-privileges"]
    # Ours unless the operator names one: Docker's default lets a file's owner set S_ISUID (docs/SECURITY.md).
    # "default"/"builtin" is Docker's own (the Engine API refuses those words as a profile: no option at all).
    if d.seccomp_profile not in ("default", "builtin"):
        seccomp = _seccomp_value(d.seccomp_profile) if d.seccomp_profile else dockerseccomp.profile_json()
        security_opt.append(f"seccomp={seccomp}")
    if d.apparmor_profile:
        security_opt.append(f"apparmor={d.apparmor_profile}")
    kwargs: dict[str, Any] = {
        "detach": True,
        "init": True,  # a real PID 1 reaps whatever the commands orphan
        "read_only": d.read_only_root,
        "tmpfs": rambudget.docker_tmpfs(d.tmpfs),  # each sized: the kernel's default is half the RAM
        "shm_size": rambudget.SHM_BYTES,
        "cap_drop": _cap_drop(d.cap_drop),
        "mem_limit": rambudget.container_memory(d.memory),
        "security_opt": security_opt,
        # nofile within the sandbox's share of the host's open-file table (engine.sandbox.filetable)
        "ulimits": [Ulimit(name=n, soft=s, hard=h) for n, (s, h) in filetable.ulimits(d).items()],
        # The container's init keeps the engine's log pipe as stdout, and a command of its uid reopens it
        # (/proc/1/fd/1): its log on the host's disk is a capped one, whatever the daemon's default driver
        # (fresh round 17 a; bwrap's is a 4 KiB tail). json-file, so `docker logs` still reads it.
        "log_config": dict(LOG_CONFIG),
    }
    if user:
        kwargs["user"] = user
    if d.pids_limit:
        kwargs["pids_limit"] = int(d.pids_limit)
    if d.memory_swap:
        kwargs["memswap_limit"] = d.memory_swap
    if d.cpus:
        kwargs["nano_cpus"] = int(float(d.cpus) * 1e9)
    if d.dns:
        kwargs["dns"] = list(d.dns)
    if d.extra_hosts:
        kwargs["extra_hosts"] = dict(h.split(":", 1) for h in d.extra_hosts if ":" in h)
    return kwargs


def _seccomp_value(profile: str) -> str:
    """The Engine API wants the profile JSON itself (the docker CLI reads a path client-side for you)."""
    path = os.path.expanduser(profile)
    if profile not in ("default", "builtin") and os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    return profile


def create_and_start(kwargs: dict[str, Any]) -> None:
    container = client().containers.create(**kwargs)
    try:
        with dockercg.holding(kwargs.get("cgroup_parent")):
            container.start()
            _confine_started(str(container.id), kwargs.get("cgroup_parent"))
    except Exception:
        remove(kwargs["name"])
        raise


def rename(old: str, new: str) -> None:
    """docker rename by the old name: fails (NotFound) once anything else renamed it first."""
    client().api.rename(old, new)


def start(name: str) -> None:
    parent = _cgroup_parent(name)
    with dockercg.holding(parent):
        client().api.start(name)
        _confine_started(name, parent)


def restart(name: str) -> None:
    parent = _cgroup_parent(name)
    with dockercg.holding(parent):
        client().api.restart(name, timeout=1)
        _confine_started(name, parent)  # (runc made its groups and mounts anew)


def _confine_started(name: str, parent: str | None) -> None:
    """What a started container gets before any command of the agent's runs in it (each comes by an exec
    afterwards): its TCP socket buffers charged to its memory group (dockercg.charge_container_tcp), its
    /dev/pts a devpts with max= (dockerpts). The container is stopped when the terminals' cap fails."""
    info = client().api.inspect_container(name)
    if not info.get("State", {}).get("Running"):
        return  # (it ended already, its supervisor gone: no command runs in it, and its next start caps it)
    container_id = str(info.get("Id", ""))
    dockercg.charge_container_tcp(parent, container_id)
    why = dockerpts.cap_terminals(int(info.get("State", {}).get("Pid") or 0), container_id)
    if why is not None:
        with contextlib.suppress(Exception):
            client().api.kill(container_id or name)
        raise SandboxUnavailable(f"sandbox {name} not started: its terminals could not be capped ({why})")


def _cgroup_parent(name: str) -> str | None:
    """The parent cgroup a container was created under: runc makes it again, uncapped, if it was swept."""
    try:
        return client().api.inspect_container(name).get("HostConfig", {}).get("CgroupParent") or None
    except not_found_type():
        return None


def remove(name: str) -> bool:
    """docker rm -f; True if something was removed, errors ignored (reference §6.4)."""
    try:
        client().api.remove_container(name, force=True)
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(OSError):
            dockercg.sweep()  # its owner's group, once that held the owner's last container


def list_sandboxes(label: str | None = None, *, every_install: bool = False) -> list[dict[str, Any]]:
    """This install's sandbox containers (`every_install`: all exechost installs', for test cleanup)."""
    labels = [f"{LABEL}=1"] + ([label] if label else [])
    if not every_install:
        labels.append(f"{STATE_LABEL}={state_id()}")
    return list(client().api.containers(all=True, filters={"label": labels}))


def build_image(tags: list[str], progress: Callable[[str], None]) -> None:
    """Build the default image from engine/sandbox/Dockerfile with the host's static busybox."""
    busybox = sv.find_static_busybox()
    if busybox is None:
        raise SandboxUnavailable(
            "Building the default sandbox image needs a static busybox on this machine "
            "(`apt-get install busybox-static`)."
        )
    # The context in the state dir, never under /tmp: every gateway-host run sees /tmp and, as the same
    # uid, may write a 0700 dir of ours there, so it could rewrite the Dockerfile or busybox before
    # docker-py tars them, and every agent's sandbox would run that image (round 8 q).
    with tempfile.TemporaryDirectory(
        prefix=".image-", dir=statefs.ensure_private_dir(statefs.state_dir())
    ) as ctx:
        shutil.copyfile(DOCKERFILE, os.path.join(ctx, "Dockerfile"))
        shutil.copyfile(busybox, os.path.join(ctx, "busybox"))
        os.chmod(os.path.join(ctx, "busybox"), 0o755)  # noqa: S103 - build context copy
        stream: Iterator[dict[str, Any]] = client().api.build(path=ctx, tag=tags[0], rm=True, decode=True)
        for chunk in stream:
            if "error" in chunk:
                raise SandboxUnavailable(f"sandbox image build failed: {chunk['error'].strip()}")
            text = str(chunk.get("stream") or chunk.get("status") or "").rstrip()
            if text:
                progress(text)
    for tag in tags[1:]:
        repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        client().images.get(tags[0]).tag(repo, version or "latest")
