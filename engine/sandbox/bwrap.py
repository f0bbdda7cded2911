"""Bubblewrap sandboxes: a scope's namespaces in milliseconds, with no daemon (docs/SECURITY.md, "Sandbox
backends"); a sandbox's life: its keeper started, adopted, inspected and removed.

A scope's sandbox is one long-lived `bwrap` running the same busybox supervisor as a Docker container
(engine.sandbox.supervisor), with the same control dir at /.exechost and scripts at /.exechost-bin, so
pipes, ready slots, held sessions and kills work exactly as there. Its parent is a small keeper shell in a
session of its own (not the gateway: the sandbox outlives a gateway restart, as a container does), and
`--die-with-parent` ties the sandbox to that keeper: removing the sandbox is killing the keeper's group.
What it sees is engine.sandbox.bwrapview's plan; its limits engine.sandbox.bwraplimits'; its record
engine.sandbox.bwraprecords'; a PTY in it engine.sandbox.bwrapterm's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import resource
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from engine import statefs
from engine.sandbox import bindfds, bwrapmemory, dockercg, hostcpu, landlock, sandboxuid, usershare
from engine.sandbox import supervisor as sv
from engine.sandbox.bwraplimits import (
    budget_lock,
    check_memory_budget,
    kill_cgroup,
    own_cgroup,
    pids_cgroup,
    remove_cgroup,
    sweep_cgroups,
)
from engine.sandbox.bwraprecords import (
    alive,
    children,
    list_sandboxes,
    log_path,
    read_record,
    record_path,
    runtime_dir,
    start_time,
    write_record,
)
from engine.sandbox.bwrapview import Plan, bind_roots, find_bwrap, plan
from engine.sandbox.docker_ops import ContainerState
from engine.sandbox.seccomp import seccomp_fd
from engine.sandbox.settings import Layout, SandboxSettings, split_namespace

log = logging.getLogger(__name__)

# The keeper: waits until the gateway has set its limits (a line on stdin), then runs bwrap as its child
# and waits for it. Its group is the sandbox: bwrap is in it, and --die-with-parent ends the rest.
# $1: the sandbox's pids cgroup (or ""), which the keeper enters before bwrap runs (or runs nothing);
# $2: where the keeper itself goes once bwrap runs (the gateway's pids cgroup, or ""): bwrap stays in the
# sandbox's, the keeper leaves it, so a keeper nobody reaps promptly (its gateway gone) never holds it.
# Each move is the shell's own thread writing 0 to `tasks`: the kernel then skips the global threadgroup
# lock that a pid written to cgroup.procs takes, whose write side waits out an RCU grace period (15 ms p50
# here, with starts apart, against 0.07 ms: docs/BENCHMARKS.md).
# $4, $5: the same for the v1 memory hierarchy (engine.sandbox.bwrapmemory): the sandbox's memory group (or
# ""), entered before bwrap, so every page of the sandbox is charged to it; and the gateway's, for the keeper.
# $6, $7: the same for the v1 cpu hierarchy (engine.sandbox.hostcpu): the sandbox's cpu group in its owner's,
# so its processes weigh as one share of the agent's, never as the gateway's own (fresh round 18 a).
# bwrap's stderr is a pipe, not the log: every process inside inherits it (bwrap's init, pid 1, keeps it),
# and one of the same uid may reopen /proc/<pid>/fd/2 — a host file would take appends without the tmpfs
# cap on its size. `tail` drains it and writes its last 4 KiB to the log when the last process inside has
# gone (what bwrap said, when it failed to start; one exec beside bwrap's start, of the bin dir's static
# busybox ($3) where there is one: no dynamic loading); the keeper waits for it.
KEEPER_SH = (
    "read -r go || exit 0\nexec 0</dev/null\ng=$1\nc=$2\nd=$3\nm=$4\nh=$5\nu=$6\nb=$7\nshift 7\n"
    'if [ -n "$g" ]; then echo 0 > "$g/tasks" || exit 126; fi\n'
    'if [ -n "$m" ]; then echo 0 > "$m/tasks" || exit 126; fi\n'
    'if [ -n "$u" ]; then echo 0 > "$u/tasks" || exit 126; fi\n'
    '"$@" 2>&1 | "${d:-tail}" ${d:+tail} -c 4096 >&2 &\np=$!\n'
    '[ -n "$c" ] && echo 0 > "$c/tasks"\n[ -n "$h" ] && echo 0 > "$h/tasks"\n'
    '[ -n "$b" ] && echo 0 > "$b/tasks"\nwait $p\n'
)


def network_refusal(name: str, network: str) -> str:
    return (
        f'Sandbox {name}: the bwrap backend has no network (docker.network = "{network}" is for the Docker '
        'backend); set network = "none".'
    )


def running(name: str) -> bool:
    """Whether the sandbox's keeper still runs (it ends with bwrap, which ends with everything inside):
    a waitpid for one this process started (polled every millisecond while a sandbox starts), else by its
    record."""
    keeper = _keepers.get(name)
    if keeper is not None:
        return keeper.poll() is None
    record = read_record(name)
    return record is not None and alive(record)


_keepers: dict[str, subprocess.Popen[bytes]] = {}  # this process's keepers, reaped when they end


def inspect(name: str) -> ContainerState:
    record = read_record(name)
    if record is None:
        return ContainerState(name, False)
    created = record.get("createdAtMs")
    return ContainerState(
        name=name,
        exists=True,
        running=alive(record),
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
    # (its scope's owner: on a shared node the gateway's agent, as in docker_ops.create_kwargs)
    owner = dockercg.owner_of(settings.scope, split_namespace(lay.scope_key)[0] + agent_id)
    layer = landlock.status(settings.bwrap_landlock, build=True)
    if not layer.active and layer.abi and settings.bwrap_landlock:
        log.warning("bwrap sandbox %s starts without landlock: %s", lay.name, layer.reason)
    # Under a root gateway the sandbox is a uid of its own that owns nothing else (engine.sandbox.sandboxuid):
    # its workspace and control dir are handed to it first, so it still writes there and nowhere else.
    uid = sandboxuid.for_owner(owner)
    drop = sandboxuid.drop_to(uid)
    if uid is not None:
        sandboxuid.give_tree(lay.workspace_dir, uid)
        sandboxuid.give_control(sv.ctl_dir(lay.name), uid)
        if sv.ctl_dir(lay.name).is_dir():  # its FIFO and exec dirs' dir, the new owner's
            sv.furnish(sv.ctl_dir(lay.name))
    with budget_lock():
        # Checked and opened here, mounted by fd: what bwrap binds is what was checked (bindfds).
        binds = bindfds.open_binds(settings.docker, bind_roots(lay))
        fd = -1
        userns = None
        try:
            fd = seccomp_fd()
            userns = usershare.user_namespace(drop)  # its share of the gateway user's inotify counts
            command = sv.supervisor_command(has_busybox)
            how = plan(
                settings,
                lay,
                bwrap=bwrap,
                env=env,
                seccomp=fd,
                command=command,
                layer=layer,
                binds=binds,
                userns=userns,
                drop=drop,
            )
            if uid is not None:  # (bwrap, as that uid, reaches its private sources where they are staged)
                staged = sandboxuid.stage(
                    how.argv, bwrap, str(sv.bin_dir() / "busybox") if has_busybox else ""
                )
                how = dataclasses.replace(how, argv=staged)
            check_memory_budget(lay.name, owner, how.tmpfs_bytes)
            group = pids_cgroup(lay.name, how.pids_limit, owner)
            memory = bwrapmemory.memory_cgroup(lay.name, owner, settings.docker.memory)
            cpu = hostcpu.sandbox_cpu_group(owner, lay.name)
            try:
                passed = (fd, *(b.fd for b in binds), *(() if userns is None else (userns,)))
                keeper = _spawn_keeper(lay, how, passed, group, has_busybox, (memory, cpu))
            except BaseException:
                for made in (group, memory, cpu):
                    if made is not None:
                        with contextlib.suppress(OSError):
                            made.rmdir()
                raise
        finally:
            for held in (fd, -1 if userns is None else userns):
                if held >= 0:
                    os.close(held)
            bindfds.close(binds)
        return _adopt_keeper(
            settings, lay, how, keeper, (group, memory, cpu), owner, config_hash, created_at_ms, layer, uid
        )


def _spawn_keeper(
    lay: Layout,
    how: Plan,
    fds: tuple[int, ...],
    group: Path | None,
    has_busybox: bool,
    joined: tuple[Path | None, Path | None],
) -> subprocess.Popen[bytes]:
    """The keeper shell, waiting for `go` on stdin while its limits and record are set; at `go` it enters
    `group` (pids) and the `joined` memory and cpu groups itself."""
    memory, cpu = joined
    log_fd = os.open(log_path(lay.name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        home = str(own_cgroup()) if group is not None else ""
        inside = str(group) if group is not None else ""
        drain = str(sv.bin_dir() / "busybox") if has_busybox else ""
        charged = str(memory) if memory is not None else ""
        back = str(bwrapmemory.own_memory_cgroup()) if memory is not None else ""
        weighed = str(cpu) if cpu is not None else ""
        cpu_home = str(hostcpu.own_cpu_group()) if cpu is not None else ""
        return subprocess.Popen(
            [
                "/bin/sh",
                "-c",
                KEEPER_SH,
                "exechost-sandbox",
                *(inside, home, drain, charged, back, weighed, cpu_home),
                *how.argv,
            ],
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
    groups: tuple[Path | None, Path | None, Path | None],
    owner: str,
    config_hash: str,
    created_at_ms: int,
    layer: landlock.Status,
    uid: int | None = None,
) -> list[str]:
    """Limits and record for the waiting keeper, then `go`; the keeper is killed if any fails."""
    assert keeper.stdin is not None
    try:
        for limit, (soft, hard) in how.rlimits.items():
            resource.prlimit(keeper.pid, limit, (soft, hard))
        record = {
            "name": lay.name,
            "pid": keeper.pid,
            "start": start_time(keeper.pid),
            "configHash": config_hash,
            "createdAtMs": created_at_ms,
            "scopeKey": lay.scope_key,
            "rootfs": settings.bwrap_rootfs,
            "cgroup": str(groups[0]) if groups[0] is not None else None,
            "memoryCgroup": str(groups[1]) if groups[1] is not None else None,
            "cpuCgroup": str(groups[2]) if groups[2] is not None else None,
            "owner": owner,
            "tmpfsBytes": how.tmpfs_bytes,
            "landlock": layer.to_dict(),
            "uid": uid,  # its host uid under a root gateway (engine.sandbox.sandboxuid); None: the gateway's
        }
        write_record(lay.name, record)
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
    record = read_record(name)
    if record is None or not alive(record):
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
        with open(log_path(name), "rb") as fh:
            text = fh.read()[-800:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return text


def remove(name: str) -> bool:
    """End the sandbox (SIGKILL to its keeper's group: bwrap, and by --die-with-parent all inside) and
    forget it. True when nothing of it runs any more."""
    record = read_record(name)
    if record is not None and alive(record):
        keeper_pid = int(record["pid"])
        # The sandbox's init first: the kernel ends and reaps everything in its PID namespace, bwrap reaps
        # it, the keeper reaps bwrap, so no zombie stays in the pids cgroup for an init to collect. The
        # keeper's group after, for whatever did not go that way.
        for inner in children(keeper_pid, grandchildren=True):
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
        while alive(record) and time.monotonic() < deadline:
            time.sleep(0.005)  # an orphaned keeper is reaped by init: wait for it to go
        if alive(record):
            return False
        cgroup = record.get("cgroup")
        if isinstance(cgroup, str) and cgroup.startswith("/sys/fs/cgroup/"):
            kill_cgroup(cgroup)  # the scope's terminals: one-shot sandboxes of its own, in its cgroup
            remove_cgroup(cgroup, time.monotonic() + 1.0)
            for parent in Path(cgroup).parents[:2]:  # its owner's and the install's, once empty
                if parent.name.startswith(("exechost-", "agent-", "shared")):
                    with contextlib.suppress(OSError):
                        parent.rmdir()
        memory = record.get("memoryCgroup")
        if isinstance(memory, str):
            bwrapmemory.remove(memory)
        cpu = record.get("cpuCgroup")
        if isinstance(cpu, str):
            hostcpu.remove_group(cpu)
    for path in (record_path(name), log_path(name)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return True


def remove_all() -> list[str]:
    """Every bwrap sandbox of this state dir (tests, `recreate --all`), and its emptied pids groups."""
    removed = [row["name"] for row in list_sandboxes() if remove(row["name"])]
    sweep_cgroups()
    return removed
