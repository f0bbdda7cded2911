"""The second way no Unix socket the gateway's account has bound in the home is connectable from a
gateway-host run, for a run whose home is not layered (engine.commands.homelayer, the first: no helper, or
a run's own bwrap whose home is under a private dir): a read-only mount does not stop connect(2), so the
view covers each socket listed with an empty file (issue 27 §1, fresh round 10 a; from branch sock29). A
list misses what the table does not name where it is (fresh round 11 a: another network namespace's, a
relative name's, a renamed directory's, one behind a link): the layer does not ask.

Which sockets, found without walking the home: the kernel lists every socket bound by a path
(/proc/net/unix, as bound: ssh binds a ControlPath at a temporary name beside it and links it to its name),
so each directory of the home that holds one is read, and every socket there this account owns is covered,
whatever it is called (an ssh ControlMaster in ~/.cache or ~/.ansible/cp, Docker Desktop's engine at
~/.docker/desktop/docker.sock, a database's, an editor's server). A directory a run may write
(`hostWritable`) keeps its sockets: a run's own servers are the agent's, and the operator's there are
reachable as the dir's files are. What this finds is what is bound when the view is made; the kept view's
key holds it (its operations), so a socket bound later is covered from the next run on. Outside the home:
/tmp and the like are each agent's own (engine.commands.hostprivate); abstract sockets are refused by the
run's landlock scope (engine/commands/hostenter/confine.c).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

PROC_NET_UNIX = "/proc/net/unix"


def bound_paths(table: str = PROC_NET_UNIX) -> list[str]:
    """Every path a socket is bound at now, as bound (abstract names, starting with `@`, left out)."""
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as f:
            next(f, None)  # the header
            words = [line.rstrip("\n").split(None, 7) for line in f]
    except OSError:
        return []
    return [w[7] for w in words if len(w) == 8 and w[7].startswith(os.sep)]


def home_sockets(home: str, keep: Iterable[str], table: str = PROC_NET_UNIX) -> list[str]:
    """The real paths of the sockets this account owns in every directory of `home` (a real path) that
    holds a bound socket; none under `keep` (the run's writable dirs, the state dir)."""
    if home == os.sep:
        return []
    dirs = {os.path.dirname(p) for p in bound_paths(table)}
    if not dirs:
        return []
    uid = os.geteuid()
    kept = [_resolved(k).rstrip(os.sep) + os.sep for k in keep]
    found: set[str] = set()
    for d in dirs:
        real = _real_dir(d)  # by real path: the home may be reached through a link; bwrap covers real names
        if real and (real + os.sep).startswith(home + os.sep) and not _kept(real + os.sep, kept):
            found |= set(_sockets_in(real, uid))
    return sorted(found)


def _resolved(path: str) -> str:
    """realpath, or the path as named when a run exchanges a directory on the way for a link meanwhile
    (realpath then fails with EINVAL): a kept dir is the run's own to write, so only its sockets differ."""
    try:
        return os.path.realpath(path)
    except OSError:
        return os.path.abspath(path)


def _real_dir(path: str) -> str | None:
    """The directory's real path as the kernel resolved it (an O_PATH fd's name: three system calls, where
    os.path.realpath lstat's every component); None when it is gone."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def _sockets_in(directory: str, uid: int) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            # the type from the directory entry: only what is neither file, dir nor link is stat'ed
            return [e.path for e in entries if not _plain(e) and _is_socket(e.path, uid)]
    except OSError:
        return []


def _plain(e: os.DirEntry[str]) -> bool:
    return e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False) or e.is_symlink()


def _is_socket(path: str, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(st.st_mode) and st.st_uid == uid


def _kept(path: str, kept: list[str]) -> bool:
    return any(path.startswith(k) or path + os.sep == k for k in kept)


def view_ops(empty: str, sockets: Iterable[str]) -> list[str]:
    """The bwrap operations that cover each socket with the empty file `empty`."""
    return [op for s in sockets for op in ("--ro-bind", empty, s)]
