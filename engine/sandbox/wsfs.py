"""Each sandbox workspace a filesystem of its own, capped in bytes and inodes: as plain dirs under the state
dir (<state>/sandboxes), one agent's workspace filled the state dir's disk, and another agent's run and the
operator's decisions had nowhere to be written (fresh round 10 b).

A workspace is the agent's files and outlives gateways and reboots, so it is not a tmpfs (as the private
/tmp of engine.commands.privatefs is) but a sparse ext4 image (journal kept), <root>/.images/<name>.img
(0600, in a 0700 dir beside the workspaces), loop-mounted (nosuid, nodev) at the workspace dir in the
gateway's mount namespace, where Docker and bubblewrap bind it from. Its size is the smallest of MAX_BYTES
and a SHARE of the filesystem the images are on (never less than FLOOR_BYTES, so a tiny test filesystem
still works); its inodes are ext4's own, so the host's filesystem spends one inode per workspace. The image
is sparse: only what the agent writes takes the host's disk.

Nothing is lost: an image whose workspace is not mounted (after a reboot, or its mount detached) is mounted
again, never made anew; a workspace that is already a plain dir with files in it stays plain (said once in
the log, docs/SECURITY.md); a loop device already backed by the image is mounted again rather than a second
one (two devices over one ext4 would corrupt it). Mounting needs root: a gateway that is not root keeps
plain dirs, as docs/SECURITY.md says; so does one whose local Docker engine is in another mount namespace
(Docker would bind the dir under the mount).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import logging
import os
import socket
import stat
import struct
import subprocess

from engine.commands import gatewaydirs
from engine.commands.hostoutside import home_dir
from engine.sandbox import beneath, wsbudget
from engine.sandbox.workspace import WorkspaceError, open_workspace
from engine.sandbox.wsbudget import Budget

log = logging.getLogger(__name__)

IMAGES = ".images"  # (a slug ends in "-<hash>" and a pool dir is "pool.<token>": never this)
MAX_BYTES = 16 << 30
SHARE = 8  # of the filesystem the images are on
FLOOR_BYTES = 2 << 20  # ext4 with its journal still has room for files
_MKFS_EXTENDED = "nodiscard,lazy_itable_init=1,lazy_journal_init=1"
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LOOP_GET_STATUS64 = 0x4C05
_INFO_SIZE = 232  # struct loop_info64
_INFO_FLAGS = 52  # its lo_flags
_CONFIG_SIZE = 8 + _INFO_SIZE + 64  # struct loop_config
_LO_FLAGS_AUTOCLEAR = 4  # the device goes with its last mount
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_BIND = 0x1000
_MNT_DETACH = 2

_said_plain: set[str] = set()  # plain workspaces with files, said once in the log
_refused: set[str] = set()  # roots where a mount failed once: plain dirs (said once in the log)


def cap(root: str) -> int:
    """The bytes a workspace under `root` may hold, from the size of the filesystem its image is on."""
    st = os.statvfs(root)
    return max(min(MAX_BYTES, st.f_blocks * st.f_frsize // SHARE), FLOOR_BYTES)


def enabled() -> bool:
    """Whether workspaces get a filesystem of their own here (root only: mount and loop devices)."""
    return os.geteuid() == 0


def image_path(root: str, path: str) -> str:
    return os.path.join(os.path.abspath(root), IMAGES, os.path.basename(path) + ".img")


def ensure(root: str, path: str, budget: Budget | None = None) -> bool:
    """`path` (a sandbox workspace, a child of `root`) created and mounted on its capped filesystem: True
    when it is one (now or before), False when it stays a plain dir (not root, a plain dir with files, or
    the mount refused). Raises WorkspaceError when its image cannot be mounted again (its files are there:
    never replaced by an empty dir). `budget`: whose it is (engine.sandbox.wsbudget): a new one is made
    within what its owner's budget has left (WorkspaceBudgetError: nothing is), an image from before owners
    were recorded becomes theirs; None (the shared scope's, a pool spare's): nobody's, its cap alone."""
    # every host view covers each root ever used, not only the config's now (fresh round 15 b)
    gatewaydirs.record_root(home_dir(), root)
    ws = open_workspace(root, path)
    try:
        if not enabled():
            return False
        parent = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            mounted = os.fstat(ws).st_dev != os.fstat(parent).st_dev  # (the common case: one stat each)
        finally:
            os.close(parent)
        images = open_workspace(root, os.path.join(root, IMAGES))
        try:
            name = os.path.basename(path) + ".img"
            if mounted and (budget is None or wsbudget.owner_of(images, name) is not None):
                return True
            fcntl.flock(images, fcntl.LOCK_EX)  # (one mounter at a time: gateway, CLI, pool)
            return _ensure_locked(root, path, images, budget)
        finally:
            os.close(images)
    finally:
        os.close(ws)


def _adopt(images: int, name: str, budget: Budget | None) -> None:
    """An image made before owners were recorded becomes the owner of its scope's (counted from now on)."""
    if budget is not None and wsbudget.owner_of(images, name) is None:
        wsbudget.record(images, name, budget.owner)


def _ensure_locked(root: str, path: str, images: int, budget: Budget | None) -> bool:
    ws = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)  # (again, under the lock)
    try:
        name = os.path.basename(path) + ".img"
        image = os.path.join(root, IMAGES, name)
        have = beneath.lstat(images, name)
        if os.path.ismount(path):
            if have is not None and stat.S_ISREG(have.st_mode):
                _adopt(images, name, budget)
            return True
        if have is not None:
            if not stat.S_ISREG(have.st_mode):
                raise WorkspaceError(f"sandbox workspace image {image} is not a regular file")
            _adopt(images, name, budget)
            if os.listdir(ws):  # (its files would be hidden under the mount, and the agent's lost to it)
                raise WorkspaceError(
                    f"sandbox workspace {path} has files, and its filesystem {image} is not mounted: move "
                    "the files aside (or the image), and retry."
                )
            try:
                _mount(images, name, ws)
            except OSError as exc:
                raise WorkspaceError(f"sandbox workspace {path}: mounting {image}: {exc}") from None
            return True
        if os.listdir(ws):
            if path not in _said_plain:
                _said_plain.add(path)
                log.warning("sandbox workspace %s has files from before: stays a plain dir (uncapped)", path)
            return False
        if root in _refused:
            return False
        if not docker_sees_our_mounts():
            if root not in _said_plain:
                _said_plain.add(root)
                log.warning(
                    "sandbox workspaces under %s stay plain dirs (uncapped): the Docker engine is in another "
                    "mount namespace, and would bind the dir under the mount",
                    root,
                )
            return False
        size = cap(root)
        if budget is not None:  # (WorkspaceBudgetError: the owner's others take its budget)
            size = wsbudget.size_for(root, images, name, budget, size, FLOOR_BYTES)
        try:
            if budget is not None:
                wsbudget.record(images, name, budget.owner)  # (first: no image of nobody's is ever left)
            _make(images, name, size)
            _mount(images, name, ws)
        except (OSError, subprocess.SubprocessError) as exc:
            _refused.add(root)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=images)
            wsbudget.forget(images, name)
            log.warning("sandbox workspaces under %s stay plain dirs (uncapped): %s", root, exc)
            return False
        _fresh(path)
        return True
    finally:
        os.close(ws)


def docker_sees_our_mounts() -> bool:
    """Whether a mount made here is what Docker binds: the engine on the local socket (DOCKER_HOST or the
    default) is in this process's mount namespace, by the socket's peer credentials. A gateway in a mount
    namespace of its own (a unit's PrivateTmp, ProtectSystem, PrivateMounts) would give its sandboxes the
    empty dir under the mount while it wrote into the mount. No local engine: nothing to disagree with."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return False  # an engine elsewhere cannot bind this host's dirs as we see them
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(2.0)
        try:
            sock.connect(host[len("unix://") :])
        except OSError:
            return True  # no engine answers: the bwrap backend's mount is the only one
        pid = struct.unpack("=iII", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    finally:
        sock.close()
    try:
        return pid > 0 and os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def _make(images: int, name: str, size: int) -> None:
    """A new sparse image of `size` bytes, its filesystem made before it takes its name (a crash leaves no
    half-made one)."""
    new = name + ".new"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(new, dir_fd=images)
    fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=images)
    try:
        os.ftruncate(fd, size)
        subprocess.run(
            # A new sparse file reads as zeros: its journal and inode tables need no zeroing, which would
            # write them out (a 16 GiB image took 135 MB of the host's disk made, 4 MB without)
            ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", _MKFS_EXTENDED, f"/proc/self/fd/{fd}"],
            pass_fds=(fd,),
            check=True,
            capture_output=True,
            timeout=60,
        )
    finally:
        os.close(fd)
    os.rename(new, name, src_dir_fd=images, dst_dir_fd=images)


def _fresh(path: str) -> None:
    """A new filesystem's root as a workspace dir is made: 0700, no lost+found for the agent to wonder at."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)
        with contextlib.suppress(OSError):
            os.rmdir("lost+found", dir_fd=fd)
    finally:
        os.close(fd)


def _mount(images: int, name: str, ws: int) -> None:
    """The image mounted at the dir `ws` (an fd: never a path a link could be swapped into)."""
    fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=images)
    try:
        image = os.fstat(fd)
        held = _held_loop(image)
        if held is not None:  # the device a sandbox still holds: the same filesystem, never a second
            dev, loop = held
            try:
                _mount_dev(dev, ws)
            finally:
                os.close(loop)
            return
        for _ in range(8):  # (another process may take the free device first)
            ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
            try:
                number = fcntl.ioctl(ctl, _LOOP_CTL_GET_FREE)
            finally:
                os.close(ctl)
            dev = f"/dev/loop{number}"
            loop = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
            try:
                config = bytearray(_CONFIG_SIZE)  # struct loop_config: fd, block_size, loop_info64, reserved
                struct.pack_into("=I", config, 0, fd)
                struct.pack_into("=I", config, 8 + _INFO_FLAGS, _LO_FLAGS_AUTOCLEAR)
                try:
                    fcntl.ioctl(loop, _LOOP_CONFIGURE, bytes(config))
                except OSError as exc:
                    if exc.errno == errno.EBUSY:  # taken meanwhile
                        continue
                    raise
                _mount_dev(dev, ws)  # (before the device's fd closes: autoclear would take it)
                return
            finally:
                os.close(loop)
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(fd)


def _mount_dev(dev: str, ws: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    target = f"/proc/self/fd/{ws}".encode()
    # noinit_itable: the kernel would zero the inode tables mkfs left (zeros already) into the host's disk
    if libc.mount(dev.encode(), target, b"ext4", _MS_NOSUID | _MS_NODEV, b"noinit_itable") != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _held_loop(image: os.stat_result) -> tuple[str, int] | None:
    """A loop device bound to this very image (its dev and inode, as the device says), opened: held open,
    it stays bound until mounted. One whose autoclear runs (its last mount just went) is not bound any more
    (ENXIO): mounting it would read a detached file, so a new device is set up instead."""
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        dev = "/dev/" + backing.split("/")[3]
        try:
            with open(backing, encoding="utf-8", errors="surrogateescape") as f:
                st = os.stat(f.read().rstrip("\n"))
            if (st.st_dev, st.st_ino) != (image.st_dev, image.st_ino):
                continue
            loop = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = bytearray(_INFO_SIZE)
            fcntl.ioctl(loop, _LOOP_GET_STATUS64, info)
            device, inode = struct.unpack_from("=QQ", info, 0)
        except OSError:
            os.close(loop)
            continue
        if (device, inode) == (image.st_dev, image.st_ino):
            return dev, loop
        os.close(loop)
    return None


def remove(root: str, path: str) -> None:
    """A workspace being removed: its mount detached and its image gone (its dir is the caller's)."""
    if os.path.ismount(path):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.umount2(os.fsencode(path), _MNT_DETACH)  # (a run still inside keeps its files until it ends)
    image = image_path(root, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(image)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(image + wsbudget.OWNER_SUFFIX)


def fits(root: str, budget: Budget) -> bool:
    """Whether the owner's budget has a full workspace's cap left under `root` (a pool spare, made at its
    cap, may become theirs). Only a hint: move and ensure decide, under the images lock."""
    if not enabled():
        return True
    images = open_workspace(root, os.path.join(root, IMAGES))
    try:
        fcntl.flock(images, fcntl.LOCK_SH)
        most = wsbudget.limit(root, budget, FLOOR_BYTES)
        return wsbudget.used(images, budget.owner) + cap(root) <= most
    finally:
        os.close(images)


def move(root: str, source: str, target: str, budget: Budget | None = None) -> None:
    """A pool spare's workspace made a scope's: its filesystem bound at `target` (a new empty dir; a bind,
    not MS_MOVE, which a shared parent mount refuses), detached from `source` (then removed), and its image
    renamed with it. The spare's container keeps the same filesystem: it bound it, not the path. `budget`:
    the scope's owner, whose budget the spare's image must fit (WorkspaceBudgetError, nothing moved)."""
    images = open_workspace(root, os.path.join(root, IMAGES))
    try:
        fcntl.flock(images, fcntl.LOCK_EX)  # (the owner's others counted as no one else adds one)
        spare = os.path.basename(source) + ".img"
        name = os.path.basename(target) + ".img"
        if budget is not None:
            st = beneath.lstat(images, spare)
            size = st.st_size if st is not None and stat.S_ISREG(st.st_mode) else cap(root)
            wsbudget.check(root, images, name, budget, size, FLOOR_BYTES)
            wsbudget.record(images, name, budget.owner)  # (first: its image is never nobody's)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None) != 0:
            err = ctypes.get_errno()
            wsbudget.forget(images, name)
            raise OSError(err, os.strerror(err))
        libc.umount2(os.fsencode(source), _MNT_DETACH)
        os.rename(spare, name, src_dir_fd=images, dst_dir_fd=images)
        wsbudget.forget(images, spare)
    finally:
        os.close(images)
    os.rmdir(source)
