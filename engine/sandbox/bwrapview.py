"""What a bwrap sandbox sees and is limited to: one plan (argv, env, rlimits) for keeper, terminal, explain.

What the sandbox sees is built here, once, for the keeper and for `sandbox explain`: a tmpfs root made
read-only, the system dirs bound read-only (the host's /usr, /bin, /lib* and an allowlisted part of /etc, or
every top-level dir of a `rootfs` tree), /proc and /dev of its own, size-capped tmpfs for /tmp, /var/tmp and
/run, the workspace as the only writable host dir, new user/PID/IPC/UTS/net/cgroup namespaces, no
capabilities, no_new_privs, and the seccomp filter of engine.sandbox.seccomp (libseccomp's, refusing what
Docker's default profile refuses). Limits: rlimits on the keeper (inherited by everything in the sandbox)
and, where this process may write one, a pids cgroup (engine.sandbox.bwraplimits).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine import sysbin
from engine.commands import hostkeeper
from engine.sandbox import bindfds, filetable, landlock
from engine.sandbox import supervisor as sv
from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.egress import forwarder
from engine.sandbox.rambudget import SHM_BYTES
from engine.sandbox.rambudget import TMPFS_BYTES as TMPFS_BYTES  # re-exported: tests read it here
from engine.sandbox.rambudget import parse_bytes as _bytes
from engine.sandbox.rambudget import tmpfs_size as _tmpfs
from engine.sandbox.settings import AGENT_MOUNT, Layout, SandboxSettings

INSTALL_HINT = (
    "The bwrap sandbox backend needs bubblewrap, which is not installed: run `sudo apt-get install "
    'bubblewrap` (or set [agents.defaults.sandbox] backend = "docker").'
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
    "ssl/certs",  # never ssl/ whole: ssl/private holds the host's TLS keys
    "ssl/openssl.cnf",
    "ca-certificates",
    "os-release",
)
# A rootfs tree's top-level dirs that never enter: the sandbox gets its own (or none).
ROOTFS_SKIP = {"proc", "dev", "sys", "tmp", "run", "home", "root", "mnt", "media", "boot", "lost+found"}


def find_bwrap() -> str:
    """The bwrap binary; SandboxUnavailable with how to install it when there is none."""
    found = sysbin.which("bwrap")
    if found is None:
        raise SandboxUnavailable(INSTALL_HINT)
    return found


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
    userns: int | None = None,
    drop: Sequence[str] = (),
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
    (`binds` then only name the landlock grants): the grants, seccomp, limits and env are the same.
    `userns`: an fd of the user namespace bwrap joins in place of making one (engine.sandbox.usershare).
    `drop`: what runs bwrap as the sandbox's own uid under a root gateway (engine.sandbox.sandboxuid)."""
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
        argv = _own_view(bwrap, view, userns, drop)
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
        # read-only: its FIFOs still open for writing; the host makes every entry (supervisor.furnish)
        argv += ["--ro-bind", str(sv.ctl_dir(lay.name)), sv.CTL_MOUNT]
        grants.append((landlock.WRITE_EXISTING, sv.CTL_MOUNT))
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
        resource.RLIMIT_NOFILE: filetable.nofile(d),  # (its share of the host's open-file table)
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


def _own_view(bwrap: str, view: list[str], userns: int | None = None, drop: Sequence[str] = ()) -> list[str]:
    """bwrap's namespaces and the system, /proc and /dev mounts of a sandbox's view, made new.

    Its /dev/pts is the devpts instance exechost-hostenter's `own-pts` makes (at most RUN_PTYS
    terminals, engine/commands/hostenter/layers.c) in the mount namespace bwrap starts in: bwrap's own
    `--dev` devpts has no max=, and every instance but the host's takes from one count, kernel.pty.max
    less kernel.pty.reserve, so one sandbox opened every terminal the host had for them (fresh round 10
    b). Without the helper bwrap's own stays (docs/SECURITY.md)."""
    helper = hostkeeper.helper_path()
    own_pts = [helper, "own-pts", hostkeeper.NO_PTY, "--"] if helper is not None else []
    pts = ["--dev-bind", "/dev/pts", "/dev/pts"] if helper is not None else []
    user = ["--unshare-user"] if userns is None else ["--userns", str(userns)]
    return [
        *own_pts,  # (as the gateway: its mount namespace and devpts are made before bwrap drops to its uid)
        *drop,
        bwrap,
        *user,
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
        # Read-only whatever the sandbox's uid: sysctl files check only the uid, and a sandbox that ran as
        # host root (before engine.sandbox.sandboxuid) could write kernel.core_pattern (tests/attacks).
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--dev",
        "/dev",
        *pts,  # (bound from the namespace own-pts made: its capped instance, never the host's own)
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


def bind_roots(lay: Layout) -> list[str]:
    """Where docker.binds sources may lie (validate.validate_docker's roots)."""
    return [lay.workspace_dir, lay.agent_workspace]


SHOWN_ENV = {"PATH", "HOME", "LANG", "OPENCLAW_CLI", *forwarder.PROXY_ENV}


def redacted_env(env: Mapping[str, str]) -> dict[str, str]:
    """The sandbox's environment for an operator's eyes: values other than PATH, HOME, LANG hidden."""
    return {k: v if k in SHOWN_ENV else "<redacted>" for k, v in env.items()}
