"""Bubblewrap sandboxes: a scope's namespaces in milliseconds, with no daemon (docs/SECURITY.md, "Sandbox
backends").

A scope's sandbox is one long-lived `bwrap` running the same busybox supervisor as a Docker container
(engine.sandbox.supervisor), with the same control dir at /.exechost and scripts at /.exechost-bin, so
pipes, ready slots, held sessions and kills work exactly as there. Its parent is a small keeper shell in a
session of its own (not the gateway: the sandbox outlives a gateway restart, as a container does), and
`--die-with-parent` ties the sandbox to that keeper: removing the sandbox is killing the keeper's group.

What the sandbox sees is built here, once, for the keeper and for `sandbox explain`: a tmpfs root made
read-only, the system dirs bound read-only (the host's /usr, /bin, /lib* and an allowlisted part of /etc, or
every top-level dir of a `rootfs` tree), /proc and /dev of its own, size-capped tmpfs for /tmp, /var/tmp and
/run, the workspace as the only writable host dir, new user/PID/IPC/UTS/net/cgroup namespaces, no
capabilities, no_new_privs, and the seccomp filter of engine.sandbox.seccomp (libseccomp's, refusing what
Docker's default profile refuses). Limits: rlimits on the keeper (inherited by everything in the sandbox)
and, where this process may write one, a pids cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import statefs, sysbin
from engine.sandbox import bindfds, landlock
from engine.sandbox import supervisor as sv
from engine.sandbox.docker_ops import ContainerState, SandboxUnavailable
from engine.sandbox.egress import forwarder
from engine.sandbox.seccomp import seccomp_fd
from engine.sandbox.settings import AGENT_MOUNT, Layout, SandboxSettings, slugify, state_id
from engine.sandbox.validate import sanitize_container_env
from engine.sessions.launcher import LocalLauncher, RunSpec

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "The bwrap sandbox backend needs bubblewrap, which is not installed: run `sudo apt-get install "
    'bubblewrap` (or set [agents.defaults.sandbox] backend = "docker").'
)
RUNTIME_DIR = "sandbox-bwrap"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TMPFS_BYTES = 256 * 1024 * 1024  # each of /tmp, /var/tmp, /run: a full /tmp stops there, not at the host disk
# /dev/shm (POSIX shared memory): Docker's size. bwrap's own /dev is a tmpfs of half the RAM, so it is made
# read-only once populated, and only this capped tmpfs in it takes writes.
SHM_BYTES = 64 * 1024 * 1024
HOSTNAME = "sandbox"
# The host's system dirs a sandbox sees read-only (a symlink stays a symlink, as in a merged-/usr Debian).
HOST_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What of the host's /etc a program needs to run (names, libraries, certificates, the shell's profile):
# allowed by name, so shadow, sudoers, ssh keys and whatever else lives there never appear. Each entry is
# a bind mount at every sandbox start (~1 ms apiece on a busy machine): the list stays short.
HOST_ETC = (
    "passwd",
    "group",
    "hosts",
    "nsswitch.conf",
    "resolv.conf",
    "services",
    "protocols",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "environment",
    "profile",
    "profile.d",
    "bash.bashrc",
    "shells",
    "alternatives",
    "ssl/certs",  # never ssl/ whole: ssl/private holds the host's TLS keys, and the sandbox's uid may be 0
    "ssl/openssl.cnf",
    "ca-certificates",
    "os-release",
)
# A rootfs tree's top-level dirs that never enter: the sandbox gets its own (or none).
ROOTFS_SKIP = {"proc", "dev", "sys", "tmp", "run", "home", "root", "mnt", "media", "boot", "lost+found"}

# The keeper: waits until the gateway has set its limits (a line on stdin), then runs bwrap as its child
# and waits for it. Its group is the sandbox: bwrap is in it, and --die-with-parent ends the rest.
# $1: the sandbox's pids cgroup (or ""), which the keeper enters before bwrap runs (or runs nothing);
# $2: where the keeper itself goes once bwrap runs (the gateway's pids cgroup, or ""): bwrap stays in the
# sandbox's, the keeper leaves it, so a keeper nobody reaps promptly (its gateway gone) never holds it.
# Each move is the shell's own thread writing 0 to `tasks`: the kernel then skips the global threadgroup
# lock that a pid written to cgroup.procs takes, whose write side waits out an RCU grace period (15 ms p50
# here, with starts apart, against 0.07 ms: docs/BENCHMARKS.md).
# bwrap's stderr is a pipe, not the log: every process inside inherits it (bwrap's init, pid 1, keeps it),
# and one of the same uid may reopen /proc/<pid>/fd/2 — a host file would take appends without the tmpfs
# cap on its size. `tail` drains it and writes its last 4 KiB to the log when the last process inside has
# gone (what bwrap said, when it failed to start; one exec beside bwrap's start, of the bin dir's static
# busybox ($3) where there is one: no dynamic loading); the keeper waits for it.
KEEPER_SH = (
    "read -r go || exit 0\nexec 0</dev/null\ng=$1\nc=$2\nd=$3\nshift 3\n"
    'if [ -n "$g" ]; then echo 0 > "$g/tasks" || exit 126; fi\n'
    '"$@" 2>&1 | "${d:-tail}" ${d:+tail} -c 4096 >&2 &\np=$!\n'
    '[ -n "$c" ] && echo 0 > "$c/tasks"\nwait $p\n'
)


# A terminal's first step: join the sandbox's pids cgroup ($1) as the keeper does, or run nothing.
JOIN_SH = 'echo 0 > "$1/tasks" || exit 126\nshift\nexec "$@"\n'


def network_refusal(name: str, network: str) -> str:
    return (
        f'Sandbox {name}: the bwrap backend has no network (docker.network = "{network}" is for the Docker '
        'backend); set network = "none".'
    )


def find_bwrap() -> str:
    """The bwrap binary; SandboxUnavailable with how to install it when there is none."""
    found = sysbin.which("bwrap")
    if found is None:
        raise SandboxUnavailable(INSTALL_HINT)
    return found


# --- the argv ----------------------------------------------------------------------------------------


def system_view(rootfs: str | None) -> list[str]:
    """The read-only system dirs: the host's (and an allowlisted /etc), or every top-level dir of `rootfs`."""
    args: list[str] = []
    if rootfs is not None:
        try:
            names = sorted(os.listdir(rootfs))
        except OSError as exc:
            raise SandboxUnavailable(f"bwrap rootfs {rootfs} cannot be read: {exc.strerror}") from None
        for name in names:
            if name in ROOTFS_SKIP:
                continue
            path = os.path.join(rootfs, name)
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), f"/{name}"]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, f"/{name}"]
        return args
    for name in HOST_SYSTEM:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--dir", "/etc"]
    for name in HOST_ETC:
        if os.path.lexists(f"/etc/{name}"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


@dataclass(frozen=True)
class Plan:
    """How one sandbox is started: bwrap's argv (the seccomp fd named by number) and the keeper's limits."""

    argv: list[str]
    env: dict[str, str]  # bwrap's environment, which the sandbox inherits (nothing else of ours)
    rlimits: dict[int, tuple[int, int]]
    pids_limit: int | None
    tmpfs_bytes: int = 0  # what its size-capped tmpfs mounts may pin in RAM: no OOM kill frees it
    ruleset: landlock.Ruleset | None = None  # the landlock layer its command runs under, when it has one


def sandbox_env(settings: SandboxSettings, env: Mapping[str, str]) -> dict[str, str]:
    return {"PATH": DEFAULT_PATH, "HOME": settings.docker.workdir, **env, "OPENCLAW_CLI": "1"}


def plan(
    settings: SandboxSettings,
    lay: Layout,
    *,
    bwrap: str,
    env: Mapping[str, str],
    seccomp: int,
    command: list[str],
    control: bool = True,
    sockets: Mapping[str, str] | None = None,
    files: Mapping[int, str] | None = None,
    layer: landlock.Status | None = None,
    binds: Sequence[bindfds.Bind] = (),
    joined: bool = False,
) -> Plan:
    """The exact argv. `control`: the supervisor's control dir is mounted (the scope's long-lived
    sandbox); without, a one-shot run (a terminal) in the same view. `sockets` ({host path: sandbox path}):
    Unix sockets bound in read-only (a connect needs no write to the mount). Egress binds its socket's dir
    instead (engine.sandbox.egress): a socket re-made by the next gateway is then seen inside too. `files`
    ({fd: sandbox path}): read-only files bwrap copies from those fds (a terminal's spec). `layer`: when
    active, the command runs under the landlock helper with the ruleset this view implies. `binds`:
    docker.binds as bindfds.open_binds opened them (mounted by fd, never by path), or bindfds.shown for a
    plan that is only shown. `joined`: bwrap runs in the scope's running sandbox (a terminal, in its
    namespaces: terminal()) and takes that view whole, its tmpfs mounts and binds the same ones, never new
    (`binds` then only name the landlock grants): the grants, seccomp, limits and env are the same."""
    d = settings.docker
    view = system_view(settings.bwrap_rootfs)
    # Landlock's grants, beside the mounts they follow: read anywhere in the view, execute only in the
    # system dirs, the bin mount and what Docker leaves executable, write only where a mount is writable.
    grants: list[tuple[str, str]] = [(landlock.READ, "/")]
    grants += [(landlock.EXEC, path) for path in _system_dirs(view)]
    grants += [(landlock.DEVICE, "/dev"), (landlock.WRITE, "/dev/shm"), (landlock.WRITE_EXISTING, "/proc")]
    if joined:
        # A user namespace of its own inside the sandbox's, so every mount it copies stays locked as it
        # is; the rest (PID, IPC, UTS, network, cgroup) is the sandbox's, joined by nsenter.
        argv = [bwrap, "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        argv += ["--dev-bind", "/", "/"]  # every mount as the sandbox has it (nosuid added; ro stays ro)
    else:
        argv = _own_view(bwrap, view)
    pinned = 0 if joined else SHM_BYTES
    for entry in d.tmpfs or ("/tmp",):
        path, size = _tmpfs(entry)
        if not joined:
            pinned += size
            argv += ["--perms", "1777", "--size", str(size), "--tmpfs", path]
        # Docker mounts a tmpfs noexec unless its options say `exec`: the same here.
        grants.append((landlock.WRITE + (landlock.EXEC if _tmpfs_exec(entry) else ""), path))
    if not joined:
        argv += ["--bind", lay.workspace_dir, d.workdir]
    grants.append((landlock.WRITE + landlock.EXEC, d.workdir))  # where an agent builds and runs its code
    if lay.agent_mount is not None:
        argv += [] if joined else ["--ro-bind", lay.agent_mount, AGENT_MOUNT]
        grants.append((landlock.EXEC, AGENT_MOUNT))
    if control:
        argv += ["--bind", str(sv.ctl_dir(lay.name)), sv.CTL_MOUNT]
        grants.append((landlock.WRITE, sv.CTL_MOUNT))
    if not joined:
        argv += ["--ro-bind", str(sv.bin_dir()), sv.BIN_MOUNT]
    grants.append((landlock.EXEC, sv.BIN_MOUNT))
    egress = settings.egress.mode != "none"
    if egress and not joined:  # joined: the sandbox's own forwarder serves its network namespace
        argv += ["--ro-bind", str(forwarder.socket_dir(lay.name)), forwarder.MOUNT]
        command = forwarder.wrap(command)
    for b in binds:
        argv += [] if joined else b.args()
        grants.append(((landlock.EXEC if b.read_only else landlock.WRITE + landlock.EXEC), b.target))
    ruleset = None
    if layer is not None and layer.active:
        # Outermost, so the forwarder runs under it too: it binds the proxy port, commands connect to it.
        # TCP is restricted only when the operator lists ports: the sandbox's network namespace holds
        # nothing but its own loopback, so a default refusal would only break dev servers and tests that
        # bind port 0, and add no confinement.
        ports = settings.bwrap_tcp_ports
        proxy = (forwarder.PORT,) if egress else ()
        ruleset = landlock.Ruleset(
            tuple(grants),
            tcp=layer.abi >= landlock.NET_ABI and bool(ports),
            bind=tuple(sorted({*ports, *proxy})),
            connect=tuple(sorted({*ports, *proxy})),
        )
        command = ruleset.wrap(command)
    for host_path, inside in (sockets or {}).items():
        argv += ["--ro-bind", host_path, inside]
    for fd, inside in (files or {}).items():
        argv += ["--perms", "0400", "--ro-bind-data", str(fd), inside]
    # The environment is bwrap's own (the keeper's, set by the caller), never argv: argv is readable by
    # every local user (ps), and docker.env may carry a key the operator meant for the sandbox only.
    argv += [] if joined else ["--remount-ro", "/"]
    argv += ["--chdir", d.workdir]
    argv += ["--seccomp", str(seccomp), "--", *command]
    rlimits = {
        resource.RLIMIT_NOFILE: d.ulimits.get("nofile", (4096, 8192)),
        resource.RLIMIT_CORE: d.ulimits.get("core", (0, 0)),
    }
    if d.pids_limit:
        rlimits[resource.RLIMIT_NPROC] = (d.pids_limit, d.pids_limit)
    memory = _bytes(d.memory)
    if memory:
        rlimits[resource.RLIMIT_AS] = (memory, memory)
    sandbox_vars = sandbox_env(settings, env)
    if egress:
        sandbox_vars.update(forwarder.PROXY_ENV)
    return Plan(argv, sandbox_vars, rlimits, d.pids_limit, pinned, ruleset)


def _own_view(bwrap: str, view: list[str]) -> list[str]:
    """bwrap's namespaces and the system, /proc and /dev mounts of a sandbox's view, made new."""
    return [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",  # a loopback of its own; egress only through the bind-mounted proxy socket
        "--unshare-cgroup-try",
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *view,
        "--proc",
        "/proc",
        # The sandbox's uid is the caller's: under a root gateway that is root on the host (without
        # capabilities), and sysctl files check only the uid, so /proc/sys must be read-only, or a command
        # could write kernel.core_pattern and run a program as root on the host (tests/attacks).
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(SHM_BYTES),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",  # not recursive: /dev/shm and /dev/pts stay writable, device nodes work on a read-only mount
    ]


def _system_dirs(view: list[str]) -> list[str]:
    """Where the system view mounts (or links) a top-level dir other than /etc: the programs' dirs."""
    found = []
    for i, arg in enumerate(view):
        if arg in ("--ro-bind", "--symlink") and i + 2 < len(view):
            target = view[i + 2]
            if target.count("/") == 1 and target != "/etc":
                found.append(target)
    return found


def _tmpfs_exec(entry: str) -> bool:
    return "exec" in (o.strip() for o in entry.partition(":")[2].split(","))


PRLIMIT_NAMES = {
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_AS: "as",
}


async def terminal(
    settings: SandboxSettings,
    lay: Layout,
    has_busybox: bool,
    session_host: Any,
    spec: RunSpec,
    script: str,
    marker: str,
) -> Any:
    """A PTY command in the scope's running sandbox, as `docker exec -t` is in its container: it joins the
    sandbox's namespaces (nsenter) and a bwrap there takes its view whole (plan(joined=True)), so its /tmp,
    /var/tmp, /run and /dev/shm are the sandbox's own mounts, counted once in its RAM reservation, never a
    new tmpfs per terminal; seccomp, landlock, no capabilities and the limits are as for any command in it.
    Run like a gateway-host terminal (the session host's child, so it outlives a gateway restart), it ends
    with its sandbox (its PID namespace's init)."""
    exe = find_bwrap()
    nsenter = sysbin.which("nsenter")
    if nsenter is None:
        raise SandboxUnavailable("a terminal in a bwrap sandbox needs nsenter (util-linux): install it")
    env = sanitize_container_env(settings.docker.env, explicit=settings.docker.env.keys()).env
    layer = await asyncio.to_thread(landlock.status, settings.bwrap_landlock, build=True)
    namespaces = await asyncio.to_thread(_join_fds, lay.name, exe)
    fd = seccomp_fd()
    spec_fd = _memfd("exechost-spec", script.encode())
    try:
        # The spec by its fd, inherited (the sandbox's root is read-only: no file can be made there for
        # it); never argv, which every local user reads.
        spec_path = f"/proc/self/fd/{spec_fd}"
        shell = [sv.BUSYBOX, "sh", spec_path] if has_busybox else ["/bin/sh", spec_path]
        how = plan(
            settings,
            lay,
            bwrap=exe,
            env=env,
            seccomp=fd,
            command=shell,
            control=False,
            layer=layer,
            binds=bindfds.shown(settings.docker),  # already mounted in the sandbox: their grants only
            joined=True,
        )
        enter = [f"--{kind}=/proc/self/fd/{ns}" for kind, ns in namespaces.items()]
        argv = [nsenter, *enter, "--preserve-credentials", "--", *how.argv]
        limits = [f"--{PRLIMIT_NAMES[k]}={s}:{h}" for k, (s, h) in how.rlimits.items()]
        prlimit = sysbin.which("prlimit")
        argv = [prlimit, *limits, "--", *argv] if prlimit else argv
        # Into the scope's pids cgroup first (RLIMIT_NPROC does not bind uid 0): a terminal counts
        # against the sandbox's pidsLimit like any of its commands, and ends with the sandbox.
        record = _read_record(lay.name) if how.pids_limit else None
        group = record.get("cgroup") if record is not None else None
        if isinstance(group, str) and group.startswith("/sys/fs/cgroup/"):
            argv = ["/bin/sh", "-c", JOIN_SH, "exechost-terminal", group, *argv]
        passed = (fd, spec_fd, *namespaces.values())
        one = replace(spec, argv=argv, env=how.env, cwd="/", pass_fds=passed)
        launcher = session_host if session_host is not None else LocalLauncher()
        return await launcher.spawn(one)
    finally:
        for held in (fd, spec_fd, *namespaces.values()):
            os.close(held)


# The namespaces a terminal joins (nsenter's names), the user namespace first: the rest are its.
JOINED = ("user", "mount", "pid", "net", "ipc", "uts", "cgroup")
_PROC_NS = {"mount": "mnt"}


def _join_fds(name: str, bwrap_exe: str) -> dict[str, int]:
    """Fds of the running sandbox's namespaces, opened from its init (the keeper's grandchild, in a mount
    namespace not ours) and checked to be that process's still (its start time, after the opens): a fd
    holds its namespace, where a pid could name another process by the time nsenter ran."""
    record = _read_record(name)
    if record is None or not _alive(record):
        raise SandboxUnavailable(f"sandbox {name} is not running")
    ours = os.readlink("/proc/self/ns/mnt")
    for pid in _children(int(record["pid"]), grandchildren=True):
        start = _start_time(pid)
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ours:
                continue
        except OSError:
            continue
        fds: dict[str, int] = {}
        try:
            for kind in JOINED:
                fds[kind] = os.open(f"/proc/{pid}/ns/{_PROC_NS.get(kind, kind)}", os.O_RDONLY | os.O_CLOEXEC)
            inside = os.path.exists(f"/proc/{pid}/root{bwrap_exe}")
        except OSError:
            inside = False
        if start is not None and _start_time(pid) == start and inside:
            return fds
        for held in fds.values():
            os.close(held)
        if start is not None and _start_time(pid) == start and not inside:
            raise SandboxUnavailable(
                f"a terminal in sandbox {name} runs its own bwrap inside it, and {bwrap_exe} is not in "
                "its view (a bwrap.rootfs without bubblewrap): run the command without pty"
            )
    raise SandboxUnavailable(f"sandbox {name} is not running")


def bind_roots(lay: Layout) -> list[str]:
    """Where docker.binds sources may lie (validate.validate_docker's roots)."""
    return [lay.workspace_dir, lay.agent_workspace]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _tmpfs(entry: str) -> tuple[str, int]:
    """A docker.tmpfs entry ("/tmp" or "/tmp:size=64m,mode=1777") as (path, size): its size option, else
    TMPFS_BYTES (Docker's default, half the RAM, is no bound at all for a sandbox)."""
    path, _, options = entry.partition(":")
    for option in options.split(","):
        key, _, value = option.partition("=")
        if key.strip() == "size" and value.strip():
            try:
                return path, _bytes(value) or TMPFS_BYTES
            except ValueError:
                break
    return path, TMPFS_BYTES


def _bytes(value: str | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = value.strip().lower()
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    scale = units.get(text[-1:], 1)
    return int(float(text.rstrip("bkmg")) * scale)


SHOWN_ENV = {"PATH", "HOME", "LANG", "OPENCLAW_CLI", *forwarder.PROXY_ENV}


def redacted_env(env: Mapping[str, str]) -> dict[str, str]:
    """The sandbox's environment for an operator's eyes: values other than PATH, HOME, LANG hidden."""
    return {k: v if k in SHOWN_ENV else "<redacted>" for k, v in env.items()}


# --- runtime records ---------------------------------------------------------------------------------


def runtime_dir() -> Path:
    return statefs.state_dir() / RUNTIME_DIR


def _record_path(name: str) -> Path:
    return runtime_dir() / f"{name}.json"


def _log_path(name: str) -> Path:
    return runtime_dir() / f"{name}.log"


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (/proc/<pid>/stat field 22): a pid plus this names one
    process, never a later one that got the number again."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if fields[:1] in ([b"Z"], [b"X"]):
        return None  # ended, not yet reaped: gone as far as its sandbox is concerned
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _write_record(name: str, record: dict[str, Any]) -> None:
    """Temp file and rename, without fsync: a record outlives nothing its processes do not (a reboot ends
    both), and the cold path is milliseconds."""
    path = _record_path(name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record))
    os.replace(tmp, path)


def _read_record(name: str) -> dict[str, Any] | None:
    try:
        text = statefs.read_text(_record_path(name))
        data = json.loads(text) if text else None
    except (OSError, ValueError, statefs.StateFileError):
        return None
    return data if isinstance(data, dict) else None


def running(name: str) -> bool:
    """Whether the sandbox's keeper still runs (it ends with bwrap, which ends with everything inside):
    a waitpid for one this process started (polled every millisecond while a sandbox starts), else by its
    record."""
    keeper = _keepers.get(name)
    if keeper is not None:
        return keeper.poll() is None
    record = _read_record(name)
    return record is not None and _alive(record)


def _alive(record: dict[str, Any]) -> bool:
    pid, start = record.get("pid"), record.get("start")
    return isinstance(pid, int) and pid > 0 and start is not None and _start_time(pid) == start


_keepers: dict[str, subprocess.Popen[bytes]] = {}  # this process's keepers, reaped when they end


def inspect(name: str) -> ContainerState:
    record = _read_record(name)
    if record is None:
        return ContainerState(name, False)
    created = record.get("createdAtMs")
    return ContainerState(
        name=name,
        exists=True,
        running=_alive(record),
        image=str(record.get("rootfs") or "host"),
        labels={
            "openclaw.configHash": str(record.get("configHash") or ""),
            "openclaw.sessionKey": str(record.get("scopeKey") or ""),
        },
        created_at_ms=created if isinstance(created, int) else None,
    )


def start(
    settings: SandboxSettings,
    lay: Layout,
    *,
    env: Mapping[str, str],
    config_hash: str,
    created_at_ms: int,
    has_busybox: bool,
    agent_id: str = "main",
) -> list[str]:
    """Start the scope's sandbox (blocking, a few ms): keeper, limits, bwrap. Returns the argv it ran.
    `agent_id`: whose pids budget the sandbox counts against (the shared scope's is its own)."""
    bwrap = find_bwrap()
    statefs.ensure_private_dir(runtime_dir())
    sweep_cgroups()
    owner = "shared" if settings.scope == "shared" else f"agent-{slugify(agent_id)}"
    layer = landlock.status(settings.bwrap_landlock, build=True)
    if not layer.active and layer.abi and settings.bwrap_landlock:
        log.warning("bwrap sandbox %s starts without landlock: %s", lay.name, layer.reason)
    with _budget_lock():
        # Checked and opened here, mounted by fd: what bwrap binds is what was checked (bindfds).
        binds = bindfds.open_binds(settings.docker, bind_roots(lay))
        fd = -1
        try:
            fd = seccomp_fd()
            command = sv.supervisor_command(has_busybox)
            how = plan(
                settings, lay, bwrap=bwrap, env=env, seccomp=fd, command=command, layer=layer, binds=binds
            )
            _check_memory_budget(lay.name, owner, how.tmpfs_bytes)
            group = _pids_cgroup(lay.name, how.pids_limit, owner)
            try:
                keeper = _spawn_keeper(lay, how, (fd, *(b.fd for b in binds)), group, has_busybox)
            except BaseException:
                if group is not None:
                    with contextlib.suppress(OSError):
                        group.rmdir()
                raise
        finally:
            if fd >= 0:
                os.close(fd)
            bindfds.close(binds)
        return _adopt_keeper(settings, lay, how, keeper, group, owner, config_hash, created_at_ms, layer)


def _spawn_keeper(
    lay: Layout, how: Plan, fds: tuple[int, ...], group: Path | None, has_busybox: bool
) -> subprocess.Popen[bytes]:
    """The keeper shell, waiting for `go` on stdin while its limits and record are set; at `go` it enters
    `group` itself."""
    log_fd = os.open(_log_path(lay.name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        home = str(_own_cgroup()) if group is not None else ""
        inside = str(group) if group is not None else ""
        drain = str(sv.bin_dir() / "busybox") if has_busybox else ""
        return subprocess.Popen(
            ["/bin/sh", "-c", KEEPER_SH, "exechost-sandbox", inside, home, drain, *how.argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            pass_fds=fds,
            start_new_session=True,
            # The sandbox's environment (bwrap's init, its pid 1, keeps it too): nothing of the gateway's.
            env=how.env,
            cwd="/",
        )
    finally:
        os.close(log_fd)


def _adopt_keeper(
    settings: SandboxSettings,
    lay: Layout,
    how: Plan,
    keeper: subprocess.Popen[bytes],
    group: Path | None,
    owner: str,
    config_hash: str,
    created_at_ms: int,
    layer: landlock.Status,
) -> list[str]:
    """Limits and record for the waiting keeper, then `go`; the keeper is killed if any fails."""
    assert keeper.stdin is not None
    try:
        for limit, (soft, hard) in how.rlimits.items():
            resource.prlimit(keeper.pid, limit, (soft, hard))
        record = {
            "name": lay.name,
            "pid": keeper.pid,
            "start": _start_time(keeper.pid),
            "configHash": config_hash,
            "createdAtMs": created_at_ms,
            "scopeKey": lay.scope_key,
            "rootfs": settings.bwrap_rootfs,
            "cgroup": str(group) if group is not None else None,
            "owner": owner,
            "tmpfsBytes": how.tmpfs_bytes,
            "landlock": layer.to_dict(),
        }
        _write_record(lay.name, record)
        keeper.stdin.write(b"go\n")
        keeper.stdin.close()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()
        raise
    _keepers[lay.name] = keeper
    return how.argv


def live_argv(name: str) -> list[str]:
    """The running sandbox's keeper argv (`sh -c KEEPER exechost-sandbox bwrap …`) as /proc shows it to
    anyone; [] when it does not run."""
    record = _read_record(name)
    if record is None or not _alive(record):
        return []
    try:
        with open(f"/proc/{int(record['pid'])}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0")[:-1]]


def failure(name: str) -> str:
    """What bwrap said when the sandbox did not come up (its stderr, kept in the runtime dir)."""
    try:
        with open(_log_path(name), "rb") as fh:
            text = fh.read()[-800:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return text


def remove(name: str) -> bool:
    """End the sandbox (SIGKILL to its keeper's group: bwrap, and by --die-with-parent all inside) and
    forget it. True when nothing of it runs any more."""
    record = _read_record(name)
    if record is not None and _alive(record):
        keeper_pid = int(record["pid"])
        # The sandbox's init first: the kernel ends and reaps everything in its PID namespace, bwrap reaps
        # it, the keeper reaps bwrap, so no zombie stays in the pids cgroup for an init to collect. The
        # keeper's group after, for whatever did not go that way.
        for inner in _children(keeper_pid, grandchildren=True):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(inner, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(keeper_pid, signal.SIGKILL)
    keeper = _keepers.pop(name, None)
    if keeper is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            keeper.wait(timeout=5)
    if record is not None:
        deadline = time.monotonic() + 5
        while _alive(record) and time.monotonic() < deadline:
            time.sleep(0.005)  # an orphaned keeper is reaped by init: wait for it to go
        if _alive(record):
            return False
        cgroup = record.get("cgroup")
        if isinstance(cgroup, str) and cgroup.startswith("/sys/fs/cgroup/"):
            _kill_cgroup(cgroup)  # the scope's terminals: one-shot sandboxes of its own, in its cgroup
            _remove_cgroup(cgroup, time.monotonic() + 1.0)
            for parent in Path(cgroup).parents[:2]:  # its owner's and the install's, once empty
                if parent.name.startswith(("exechost-", "agent-", "shared")):
                    with contextlib.suppress(OSError):
                        parent.rmdir()
    for path in (_record_path(name), _log_path(name)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return True


def _children(pid: int, *, grandchildren: bool = False) -> list[int]:
    """pid's children (or their children) by /proc/<pid>/task/*/children."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found.extend(int(x) for x in fh.read().split())
    except (OSError, ValueError):
        return []
    if grandchildren:
        return [g for child in found for g in _children(child)]
    return found


def sweep_cgroups() -> None:
    """Empty pids cgroups of this install's sandboxes that are gone (one whose last task a slow init had
    not reaped yet when the sandbox was removed). Under the start lock: a starting sandbox's group is made,
    and its record written, before its keeper enters it, so it is empty but never unrecorded here."""
    if not _cgroup_bases():
        return
    statefs.ensure_private_dir(runtime_dir())
    with _budget_lock():
        live = {str(r.get("cgroup")) for r in list_sandboxes()}
        for base in _cgroup_bases():
            install = base / f"exechost-{state_id()}"
            # Owners' groups (and those an earlier layout made directly under the base), emptied ones last.
            for group in [*install.glob("*/*"), *install.glob("*"), *base.glob(f"exechost-{state_id()}-*")]:
                if group.is_dir() and str(group) not in live:
                    with contextlib.suppress(OSError):
                        group.rmdir()


def _kill_cgroup(path: str) -> None:
    """SIGKILL every task of the sandbox's pids cgroup, each through a pidfd taken while it was still a
    member (a pid read from cgroup.procs may be another process's by the time a kill by number arrives)."""
    name = path.removeprefix("/sys/fs/cgroup/pids")
    try:
        with open(f"{path}/cgroup.procs") as fh:
            pids = [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as fh:
                member = any(line.split(":", 2)[1:] == ["pids", name] for line in fh.read().splitlines())
            if member:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def _remove_cgroup(path: str, deadline: float) -> None:
    """rmdir the sandbox's pids cgroup once its last task is gone (the keeper goes first; what bwrap ran
    dies by --die-with-parent a moment later, and until then the kernel says EBUSY)."""
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("bwrap sandbox cgroup %s not removed: %s", path, exc.strerror)
                return
        time.sleep(0.002)


def list_sandboxes() -> list[dict[str, Any]]:
    """This install's bwrap sandboxes (their records), each with `running`."""
    try:
        names = sorted(p.name[:-5] for p in runtime_dir().glob("*.json"))
    except OSError:
        return []
    rows = []
    for name in names:
        record = _read_record(name)
        if record is not None:
            rows.append({**record, "name": name, "running": _alive(record)})
    return rows


def remove_all() -> list[str]:
    """Every bwrap sandbox of this state dir (tests, `recreate --all`), and its emptied pids groups."""
    removed = [row["name"] for row in list_sandboxes() if remove(row["name"])]
    sweep_cgroups()
    return removed


# --- limits ------------------------------------------------------------------------------------------


def _pids_cgroup(name: str, limit: int | None, owner: str) -> Path | None:
    """A pids cgroup (the v1 controller; a delegated v2 subtree is not used yet) capping the sandbox's
    tasks, where this process may make one; None elsewhere (RLIMIT_NPROC is then the only cap, and it
    does not bind root). It sits in its owner's group, and that in the install's: pidsLimit caps one
    sandbox, but an agent names as many session scopes as it likes, so its sandboxes together get at most
    a quarter of the host's pid_max, and all of this install's at most half (the rest is the host's)."""
    if not limit:
        return None
    host = _pid_max()
    for base in _cgroup_bases():
        install = base / f"exechost-{state_id()}"
        group = install / owner / name
        caps = ((install, host // INSTALL_PIDS_SHARE), (install / owner, host // AGENT_PIDS_SHARE))
        for _ in range(3):  # a sweep by another start may remove an owner's group emptied a moment ago
            try:
                for parent, cap in caps:
                    parent.mkdir(exist_ok=True)
                    (parent / "pids.max").write_text(str(cap))
                group.mkdir(exist_ok=True)
                (group / "pids.max").write_text(str(limit))
                return group
            except FileNotFoundError:
                continue
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()
                break
    return None


INSTALL_PIDS_SHARE = 2  # all sandboxes of an install: half the host's pids
AGENT_PIDS_SHARE = 4  # one agent's (or the shared scope's) sandboxes: a quarter
# The same shares of the host's RAM bound what sandboxes' tmpfs mounts may pin (a memory cgroup would
# charge the pages too, but this process's memory group is its supervisor's to divide, not ours).
INSTALL_MEMORY_SHARE = 2
AGENT_MEMORY_SHARE = 4


@contextlib.contextmanager
def _budget_lock() -> Iterator[None]:
    """One start at a time per state dir reads the live reservations and adds its own (threads and other
    processes alike: a gateway and a CLI's `sandbox recreate`)."""
    fd = os.open(runtime_dir() / "budget.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with _budget_mutex:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
    finally:
        os.close(fd)  # drops the flock


_budget_mutex = threading.Lock()  # flock is per open file: threads of one process need their own lock


def _check_memory_budget(name: str, owner: str, tmpfs_bytes: int) -> None:
    """Refuse a sandbox whose tmpfs would take its owner's (or the install's) reservations of RAM past
    their share: an agent names as many session scopes as it likes, and a full tmpfs is freed by no OOM kill.
    Sandboxes that no longer run hold nothing (their mounts went with their last process)."""
    ram = _mem_total()
    own = everyone = 0
    for row in list_sandboxes():
        if row["name"] == name or not row["running"]:
            continue
        held = row.get("tmpfsBytes")
        held = held if isinstance(held, int) and held > 0 else TMPFS_BYTES * 3 + SHM_BYTES  # an older record
        everyone += held
        if row.get("owner") == owner:
            own += held
    for total, share, whose in (
        (own, AGENT_MEMORY_SHARE, "this agent's" if owner != "shared" else "the shared scope's"),
        (everyone, INSTALL_MEMORY_SHARE, "this install's"),
    ):
        if total + tmpfs_bytes > ram // share:
            raise SandboxUnavailable(
                f"sandbox not started: {whose} running sandboxes already reserve {_mib(total)} of tmpfs "
                f"and this one needs {_mib(tmpfs_bytes)}, past the 1/{share} of this host's RAM "
                f"({_mib(ram // share)}) they may pin. Remove some (exechost sandbox recreate --session KEY, "
                'or sandbox prune), or set smaller docker.tmpfs sizes (e.g. "/tmp:size=64m").'
            )


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB"


def _mem_total() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 1024**3  # unknown: assume a small machine


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 32768  # the kernel's default


def pids_cap() -> str:
    """How a sandbox's pids limit is enforced here, for `sandbox explain`."""
    if any(os.access(base, os.W_OK) for base in _cgroup_bases()):
        return "pids cgroup (v1) and RLIMIT_NPROC"
    if os.geteuid() == 0:
        return "none: no writable pids cgroup, and RLIMIT_NPROC does not bind root"
    return "RLIMIT_NPROC (per user namespace)"


def _own_cgroup() -> Path | str:
    """This process's pids cgroup (v1), where a keeper goes back to; "" when unknown."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and "pids" in parts[1].split(","):
                    for base in _cgroup_bases():
                        return base / parts[2].lstrip("/")
    except OSError:
        pass
    return ""


@functools.cache
def _cgroup_bases() -> tuple[Path, ...]:
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        return (v1,)
    return ()
