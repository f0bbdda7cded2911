"""A PTY command in a scope's running bwrap sandbox, as `docker exec -t`: nsenter into it, a bwrap there."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Any

from engine import sysbin
from engine.sandbox import bindfds, landlock
from engine.sandbox import supervisor as sv
from engine.sandbox.bwraprecords import alive, children, read_record, start_time
from engine.sandbox.bwrapview import PRLIMIT_NAMES, find_bwrap, plan
from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.seccomp import seccomp_fd
from engine.sandbox.settings import Layout, SandboxSettings
from engine.sandbox.validate import sanitize_container_env
from engine.sessions.launcher import LocalLauncher, RunSpec

# A terminal's first step: join the sandbox's pids, memory and cpu cgroups (the words before `--`) as the
# keeper does, or run nothing.
JOIN_SH = 'while [ "$1" != -- ]; do echo 0 > "$1/tasks" || exit 126; shift; done\nshift\nexec "$@"\n'


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
        record = read_record(lay.name)
        # A sandbox of its own uid (a root gateway's: engine.sandbox.sandboxuid): nsenter becomes its root,
        # which is that uid on the host, never the gateway's root; else the gateway's own credentials.
        own_uid = record is not None and isinstance(record.get("uid"), int)
        keep = [] if own_uid else ["--preserve-credentials"]
        argv = [nsenter, *enter, *keep, "--", *how.argv]
        limits = [f"--{PRLIMIT_NAMES[k]}={s}:{h}" for k, (s, h) in how.rlimits.items()]
        prlimit = sysbin.which("prlimit")
        argv = [prlimit, *limits, "--", *argv] if prlimit else argv
        # Into the scope's pids cgroup first (RLIMIT_NPROC does not bind uid 0): a terminal counts
        # against the sandbox's pidsLimit like any of its commands, and ends with the sandbox.
        # Its memory and cpu groups too: its pages and its CPU are the sandbox's (bwrapmemory, hostcpu).
        wanted = (
            (
                record.get("cgroup") if how.pids_limit else None,
                record.get("memoryCgroup"),
                record.get("cpuCgroup"),
            )
            if record
            else ()
        )
        groups = [g for g in wanted if isinstance(g, str) and g.startswith("/sys/fs/cgroup/")]
        if groups:
            argv = ["/bin/sh", "-c", JOIN_SH, "exechost-terminal", *groups, "--", *argv]
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
    record = read_record(name)
    if record is None or not alive(record):
        raise SandboxUnavailable(f"sandbox {name} is not running")
    ours = os.readlink("/proc/self/ns/mnt")
    for pid in children(int(record["pid"]), grandchildren=True):
        start = start_time(pid)
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
        if start is not None and start_time(pid) == start and inside:
            return fds
        for held in fds.values():
            os.close(held)
        if start is not None and start_time(pid) == start and not inside:
            raise SandboxUnavailable(
                f"a terminal in sandbox {name} runs its own bwrap inside it, and {bwrap_exe} is not in "
                "its view (a bwrap.rootfs without bubblewrap): run the command without pty"
            )
    raise SandboxUnavailable(f"sandbox {name} is not running")


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
