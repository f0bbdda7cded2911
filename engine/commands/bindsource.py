"""Bind sources opened exactly: the directory (or file) checked is the one bwrap mounts, whatever a run
renames meanwhile (fresh round 8 q: a hostWritable dir was checked by realpath, then bound by path, and a
run exchanging it for a link to ../.config got the home's config dir bound writable).

A source is resolved once, then opened from `/` one name at a time with O_PATH|O_NOFOLLOW (no link
followed at any depth: a name exchanged for a link fails there), checked on the fd it gives (its path in
/proc/self/fd is the resolved one), and handed to bwrap as that fd (`--bind-fd`, `--ro-bind-fd`, bubblewrap
0.8), never as a path. The one owner of this for the host view and the bwrap sandbox (engine.sandbox.
bindfds)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from engine import pathtrust

_O_PATH = getattr(os, "O_PATH", 0)
_FLAGS = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# bwrap's view operations and how many words follow each (engine.commands.hostview.view_args makes them)
_ARITY = {
    "--dev-bind": 2,
    "--dev": 1,
    "--bind": 2,
    "--ro-bind": 2,
    "--tmpfs": 1,
    "--symlink": 2,
    "--remount-ro": 1,
    "--chdir": 1,
    "--dir": 1,
}
_BY_FD = {"--bind": "--bind-fd", "--ro-bind": "--ro-bind-fd"}


def open_exact(real: str, owner: int | None = None) -> int:
    """An O_PATH fd on `real` (absolute, resolved), reached from `/` with no link followed at any depth;
    OSError (ELOOP, ENOTDIR, ENOENT) when a name on the way is a link or gone now. With `owner`: every
    directory walked judged on its own fd as it is walked (engine.pathtrust.foreign_hold: `real` must be
    `owner`'s, nothing above it another account's to change), EPERM naming why when not."""
    names = [p for p in real.split("/") if p]
    if not real.startswith("/") or any(n in (".", "..") for n in names):
        raise OSError(errno.EINVAL, "not a resolved absolute path", real)
    fd = os.open("/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    chain: list[tuple[str, os.stat_result]] = []
    here = "/"
    try:
        for name in names:
            if owner is not None:
                chain.append((here, os.fstat(fd)))
            # an earlier name that was a link gives an fd of the link itself: this open fails ENOTDIR
            child = os.open(name, _FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            here = os.path.join(here, name)
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "a link now", real)
        if owner is not None:
            why = pathtrust.foreign_hold([*chain, (real, os.fstat(fd))], owner)
            if why is not None:
                raise OSError(errno.EPERM, f"not this gateway's to bind writable: {why}", real)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_checked(real: str, owner: int | None = None) -> int:
    """`real` (resolved when it was checked: never resolved again here, a link now is refused) opened
    exactly (open_exact, judged with `owner`) and checked on the fd: it is still at that path (no directory
    on the way renamed since). The caller closes it."""
    fd = open_exact(real, owner)
    try:
        now = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        now = None
    if now != real:
        os.close(fd)
        raise OSError(errno.ESTALE, f"moved while it was opened (now {now})", real)
    return fd


def by_fd(ops: list[str], owned: frozenset[str] = frozenset()) -> tuple[list[str], tuple[int, ...]]:
    """`ops` with every `--bind`/`--ro-bind` source an fd opened now (open_checked) and the fds, which the
    caller passes to bwrap and closes; `--dev-bind / /` and the tmpfs stay as they are. A `--bind` source
    in `owned` (the hostWritable roots) is judged on the fds it is walked by: this account's, nothing above
    it another's to change (open_exact). OSError when a source cannot be opened exactly or is not ours:
    nothing is left open then."""
    out: list[str] = []
    fds: list[int] = []
    i = 0
    try:
        while i < len(ops):
            op = ops[i]
            arity = _ARITY.get(op)
            if arity is None:
                raise ValueError(f"not a view operation: {op}")
            words = ops[i + 1 : i + 1 + arity]
            if op in _BY_FD:
                try:
                    mine = os.geteuid() if op == "--bind" and words[0] in owned else None
                    fd = open_checked(words[0], mine)
                except OSError as exc:  # named by the whole source, not the one component that failed
                    raise OSError(exc.errno, exc.strerror, words[0]) from None
                fds.append(fd)
                os.set_inheritable(fd, True)
                out += [_BY_FD[op], str(fd), words[1]]
            else:
                out += [op, *words]
            i += 1 + arity
        return out, tuple(fds)
    except BaseException:
        close(fds)
        raise


def close(fds: tuple[int, ...] | list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def bind_pairs(ops: list[str]) -> list[tuple[str, str]]:
    """(source, destination) of every `--bind`/`--ro-bind` of `ops` (bwrap's, by path)."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(ops):
        arity = _ARITY.get(ops[i], 0)
        if ops[i] in _BY_FD:
            pairs.append((ops[i + 1], ops[i + 2]))
        i += 1 + arity
    return pairs
