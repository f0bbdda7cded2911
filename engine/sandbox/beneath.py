"""Host writes into trees a sandbox can write: by directory fd from a trusted root, never following a link.

Checking a path and then using it by name is a race a sandboxed process wins: it can atomically exchange
(`renameat2 RENAME_EXCHANGE`) any directory below its workspace with a link to a host directory between the
check and the use. So nothing here takes a path through such a tree: a directory is reached from a root fd
with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (or, where the kernel lacks it, one `O_NOFOLLOW |
O_DIRECTORY` open per component), and every write, rename, chmod, chown and mkdir is an `*at` call on a
single name relative to that fd. A directory swapped after it was opened no longer matters: the fd still
names the real directory, which the sandbox can only move within its own mount.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Iterator

from engine.errors import ExecHostError

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
SYS_OPENAT2 = 437  # the same number on every architecture (syscalls added after 5.1 share one table)
_NO_LINKS = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Refused(ExecHostError):
    """One path below the root is a link or not what we need: that write is refused, the rest goes on."""

    code = "tool_error"

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(f"{rel}: {why}")
        self.rel = rel
        self.why = why


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# None: not probed yet. Tests set it to False to exercise the per-component walk on a kernel with openat2.
use_openat2: bool | None = None


def _openat2(dir_fd: int, rel: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _NO_LINKS)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(rel)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def has_openat2() -> bool:
    """Whether this kernel (and its seccomp filter) lets us call openat2 (Linux 5.6+)."""
    global use_openat2
    if use_openat2 is None:
        try:
            os.close(_openat2(-100, "/", _DIR))  # AT_FDCWD; an absolute path is fine without BENEATH...
        except OSError as exc:
            use_openat2 = exc.errno == errno.EXDEV  # ...and refused with it: the flag is understood
        else:
            use_openat2 = False  # RESOLVE_BENEATH ignored: never trust this openat2
    return use_openat2


def name_ok(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def parts(rel: str) -> list[str]:
    """The components of a relative path, each a plain name; anything else is refused."""
    got = [p for p in rel.split("/") if p not in ("", ".")]
    for p in got:
        if not name_ok(p):
            raise Refused(rel, "not a plain relative path")
    if rel.startswith("/"):
        raise Refused(rel, "not a plain relative path")
    return got


def describe(dir_fd: int, name: str) -> str:
    """What stands at `name` instead of what we wanted, for the refusal text."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        return exc.strerror or "it cannot be opened"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink (left by the sandbox?)"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    return "it cannot be opened"


def open_dir(root_fd: int, rel: str, *, create: int | None = None) -> int:
    """An fd on the directory `rel` below `root_fd`, no link followed at any depth; `create` is the mode
    for missing components (None: they must exist). Raises Refused naming the first bad component."""
    names = parts(rel)
    if names and has_openat2():
        try:
            return _openat2(root_fd, "/".join(names), _DIR)  # the common case: all there, one call
        except OSError:
            pass  # missing (create it) or refused (say which component): one name at a time, below
    fd = os.dup(root_fd)
    try:
        done: list[str] = []
        for name in names:
            done.append(name)
            if create is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, create, dir_fd=fd)
            try:
                child = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                why = describe(fd, name) if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
                raise Refused("/".join(done), why or "it cannot be opened") from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def opened_dir(root_fd: int, rel: str, *, create: int | None = None) -> Iterator[int]:
    fd = open_dir(root_fd, rel, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def write_file(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int = 0o644,
    replace: bool = False,
    times_ns: tuple[int, int] | None = None,
) -> None:
    """Write `name` in the directory `dir_fd`. Without `replace` the name must be new (FileExistsError);
    with it, a temp file in the same directory fd is renamed over the name (a link there is replaced
    itself, never written through). Times and mode are set on the open file, never by name."""
    if not name_ok(name):
        raise Refused(name, "not a plain file name")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    target = f".{name}.exechost-{secrets.token_hex(4)}" if replace else name
    fd = os.open(target, flags, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # whatever the umask took away
            if times_ns is not None:
                os.utime(fd, ns=times_ns)
        finally:
            os.close(fd)
        if replace:
            os.replace(target, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target, dir_fd=dir_fd)
        raise


def unlink(dir_fd: int, name: str) -> None:
    if not name_ok(name):
        raise Refused(name, "not a plain file name")
    os.unlink(name, dir_fd=dir_fd)


def rename(dir_fd: int, src: str, dst: str, dst_dir_fd: int | None = None) -> None:
    if not (name_ok(src) and name_ok(dst)):
        raise Refused(f"{src} -> {dst}", "not a plain file name")
    os.replace(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd if dst_dir_fd is None else dst_dir_fd)


def chmod(dir_fd: int, name: str, mode: int) -> None:
    """chmod through an fd opened without following a link (fchmodat cannot refuse a link portably)."""
    if not name_ok(name):
        raise Refused(name, "not a plain file name")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(name, describe(dir_fd, name)) from None
        raise
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def chown(dir_fd: int, name: str, uid: int, gid: int) -> None:
    """fchownat(AT_SYMLINK_NOFOLLOW): a link there is changed itself, never what it names."""
    if not name_ok(name):
        raise Refused(name, "not a plain file name")
    os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
