"""A root gateway's bwrap sandboxes run as an unprivileged host uid of their own, never as host root.

bwrap run by root maps the sandbox's uid to host uid 0: without capabilities, but a DAC check still passes
as the owner of every root-owned file, so whatever the view binds (all of /usr, a rootfs tree) was readable
down to a root-only 0600 file in a 0700 dir (fresh round 15 b). Listing paths cannot close that; running the
sandbox as a uid that owns nothing on the machine does, for every file bound now or later: the kernel then
refuses it every file that is not world-readable (or its own).

The uid is per agent (its scope's owner, engine.sandbox.dockercg.owner_of), so two agents' sandboxes do not
share files by DAC either, and stable (a hash of the state dir and the owner), so a sandbox recreated after
a gateway restart finds its workspace its own. It is taken from a range no account, group or subordinate-id
range of /etc uses; the user namespace bwrap joins is made by that uid (engine.sandbox.usershare) and maps
the sandbox's root inside to it, and bwrap itself runs as it (setpriv, before bwrap; the keeper stays root to
set the limits). Gateways that are not root are unchanged: their sandboxes are already their own uid.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from pathlib import Path

from engine import statefs, sysbin
from engine.sandbox.docker_ops import SandboxUnavailable

BASE = 0x70000000  # 1879048192: far above any distribution's ranges, below 2^31 (tools that sign uids)
WIDTH = 1 << 24
SETPRIV_HINT = (
    "A root gateway runs its bwrap sandboxes as an unprivileged uid of their own, which needs setpriv "
    "(util-linux): install it."
)


def _taken() -> list[tuple[int, int]]:
    """Ids used on this machine: every account's uid, every group's gid, every subordinate range."""
    used: list[tuple[int, int]] = []
    for path, column in (("/etc/passwd", 2), ("/etc/group", 2)):
        with contextlib.suppress(OSError), open(path) as fh:
            for line in fh:
                parts = line.split(":")
                if len(parts) > column and parts[column].isdigit():
                    used.append((int(parts[column]), 1))
    for path in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError), open(path) as fh:
            for line in fh:
                parts = line.strip().split(":")
                if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                    used.append((int(parts[1]), int(parts[2])))
    return used


def for_owner(owner: str) -> int | None:
    """The host uid (and gid) of `owner`'s bwrap sandboxes under a root gateway; None when the gateway
    is not root (its sandboxes run as its own uid, as before)."""
    if os.geteuid() != 0:
        return None
    seed = hashlib.sha256(f"{statefs.state_dir()}\0{owner}".encode()).digest()
    start = int.from_bytes(seed[:8], "big") % WIDTH
    taken = _taken()
    for step in range(WIDTH):
        uid = BASE + (start + step) % WIDTH
        if not any(first <= uid < first + count for first, count in taken):
            return uid
    raise SandboxUnavailable("no free uid for a bwrap sandbox in its range")  # (every one of 2^24 taken)


def is_sandbox_uid(uid: int) -> bool:
    """Whether `uid` is one a root gateway gives its sandboxes (their workspaces are then that uid's)."""
    return os.geteuid() == 0 and BASE <= uid < BASE + WIDTH


def drop_to(uid: int | None) -> list[str]:
    """The argv prefix that runs what follows as `uid` (no supplementary groups); [] for None."""
    if uid is None:
        return []
    setpriv = sysbin.which("setpriv")
    if setpriv is None:
        raise SandboxUnavailable(SETPRIV_HINT)
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def give_tree(path: str, uid: int) -> None:
    """Make the workspace `uid`'s: its dir, and what the gateway left in it under another owner (skills,
    seeds, a previous uid's files). Nothing is followed; a file with other links is skipped, so a hard
    link planted to a file elsewhere never changes that file's owner. A tree already its own costs a stat."""
    top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(top).st_uid == uid:
            return
        _give(top, uid)
    finally:
        os.close(top)


def _give(dir_fd: int, uid: int) -> None:
    os.fchown(dir_fd, uid, uid)
    for entry in os.scandir(dir_fd):
        with contextlib.suppress(OSError):
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(
                    entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
                )
                try:
                    _give(sub, uid)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid != uid:
                os.chown(entry.name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


def give_control(path: Path, uid: int) -> None:
    """The control dir: `uid`'s, emptied of what the gateway made there for an earlier sandbox under
    another uid; the gateway makes its FIFO and exec dirs again for `uid` (engine.sandbox.supervisor.
    furnish) and hands each exec's files to that owner (supervisor.Channel.give)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # (no control dir: a one-shot sandbox, whose bwrap binds none)
    try:
        if os.fstat(fd).st_uid != uid:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree("x", dir_fd=fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink("ctl", dir_fd=fd)
            os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


STAGE = "/mnt"  # where, in a mount namespace of the keeper's own, the sandbox's private sources are bound
# Run as root (the gateway's uid) in a new mount namespace (unshare), before own-pts and the drop: a tmpfs
# at STAGE, then each source bound there, so bwrap, as the sandbox's uid, reaches each by a path it may
# search. A docker.binds source comes as bindfds' fd (/proc/self/fd/N, inherited): it is resolved to the
# checked directory's path at that moment, as bwrap 0.8 itself realpaths a `--bind-fd` source, since a fd of
# the parent mount namespace cannot be bound in a new one. Nothing else of the host changes: the namespace
# is the sandbox's, and ends with it.
STAGE_SH = (
    "b=$1\nshift\n"
    f"$b mount -t tmpfs -o mode=0755,size=64k exechost-stage {STAGE} || exit 126\ni=0\n"
    'while [ "$1" != -- ]; do\n'
    '  s=$1\n  case $s in /proc/self/fd/*) s=$($b readlink -f "$s") || exit 126;; esac\n'
    f'  t={STAGE}/$i\n  if [ -d "$s" ]; then $b mkdir "$t"; else : > "$t"; fi\n'
    '  $b mount -o bind "$s" "$t" || exit 126\n  i=$((i+1))\n  shift\ndone\nshift\nexec "$@"\n'
)
_SOURCES = {"--bind": "--bind", "--ro-bind": "--ro-bind", "--bind-fd": "--bind", "--ro-bind-fd": "--ro-bind"}
_SYSTEM = ("/etc/", "/proc/", "/dev/")  # reached by path by every uid: the host's own, never the gateway's


def stage(argv: list[str], bwrap: str, busybox: str = "") -> list[str]:
    """The keeper's argv with the sandbox's own sources (workspace, control dir, bin dir, proxy dir, binds,
    a rootfs' dirs) staged where bwrap, as the sandbox's uid, may reach them: bwrap resolves a source by
    path (realpath, even a /proc/self/fd one) as that uid, which may not search the gateway's 0700 state
    dir. Reaching a mount's root is all staging gives: every file under it is still checked against the
    sandbox's uid. `busybox`: a static busybox whose shell runs mkdir and mount without an exec each
    (a third of the staging's cost, bench/bench_sandboxuid.py); "" for the host's sh and mount."""
    unshare, mount = sysbin.which("unshare"), sysbin.which("mount")
    if unshare is None or mount is None:
        raise SandboxUnavailable(SETPRIV_HINT.replace("setpriv", "unshare and mount"))
    if not os.path.isdir(STAGE) or os.path.islink(STAGE):
        raise SandboxUnavailable(
            f"a root gateway's bwrap sandbox stages its sources at {STAGE} (a directory, in a mount "
            f"namespace of its own; the host's {STAGE} is left as it is), and this host has none: "
            f"mkdir -m 0755 {STAGE}"
        )
    out = list(argv)
    staged: list[str] = []
    i = out.index(bwrap) + 1
    while i < len(out) and out[i] != "--":
        flag = out[i]
        if flag in _SOURCES and i + 2 < len(out) and not _system(out[i + 1]):
            source = out[i + 1]
            if flag.endswith("-fd"):  # bindfds' checked source: resolved from its fd when it is bound
                source = f"/proc/self/fd/{int(source)}"
            elif not os.path.lexists(source):  # left to bwrap, which says so ("Can't find source path")
                i += 3
                continue
            out[i : i + 2] = [_SOURCES[flag], f"{STAGE}/{len(staged)}"]
            staged.append(source)
            i += 3
        else:
            i += 1
    if not staged:
        return out
    shell = [busybox, "sh"] if busybox else ["/bin/sh"]
    prefix = [unshare, "--mount", "--propagation", "private", "--", *shell, "-c", STAGE_SH, "exechost-stage"]
    return [*prefix, busybox, *staged, "--", *out]


def _system(path: str) -> bool:
    top = path.split("/")[1] if path.startswith("/") else ""
    return path.startswith(_SYSTEM) or (path.count("/") == 1 and top in _HOST_DIRS)


_HOST_DIRS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
