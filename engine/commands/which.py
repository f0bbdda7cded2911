"""Executable resolution as the shell does it (PATH, cwd, symlinks), cached and invalidated by inotify."""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Collection, Mapping
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _stamp(path: str) -> tuple[int, int, int]:
    """What must stay equal for a cached answer about `path` to hold: inode, mtime, mode."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return (-1, -1, -1)
    return (info.st_ino, info.st_mtime_ns, info.st_mode)


def _executable(stamp: tuple[int, int, int], path: str) -> bool:
    return stamp[2] != -1 and stat.S_ISREG(stamp[2]) and os.access(path, os.X_OK)


Stamps = tuple[tuple[str, tuple[int, int, int]], ...]

_IN_NONBLOCK, _IN_CLOEXEC, _IN_ONLYDIR = 0o4000, 0o2000000, 0x01000000
# Entry added, removed, renamed or chmod-ed, or the directory itself moved or deleted.
_IN_MASK = 0x004 | 0x100 | 0x200 | 0x040 | 0x080 | 0x400 | 0x800 | _IN_ONLYDIR


class _DirWatch:
    """inotify on the directories cached answers depend on: any event empties the cache.

    Re-stating every searched directory on each hit costs more than the lookup it saves on a loaded
    machine (bench/bench_policy.py); one non-blocking read per lookup does not. Where inotify is not
    available, or a directory cannot be watched, answers fall back to stat validation.
    """

    def __init__(self) -> None:
        self.pid = -1
        self.fd = -1
        self.watched: set[str] = set()
        self.libc: Any = None

    def _ready(self) -> bool:
        if self.pid != os.getpid():  # a forked child must not share (and steal) the parent's events
            self.pid, self.fd, self.watched = os.getpid(), -1, set()
            RESOLVED.clear()
            try:
                self.libc = ctypes.CDLL(None, use_errno=True)
                self.fd = self.libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            except (OSError, AttributeError):
                self.fd = -1
        return self.fd >= 0

    def watch(self, directories: Collection[str]) -> bool:
        if not self._ready():
            return False
        for directory in directories:
            if directory not in self.watched:
                if len(self.watched) >= _WATCH_MAX:  # inotify watches are a per-user budget: share it
                    return False
                if self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _IN_MASK) < 0:
                    return False
                self.watched.add(directory)
        return True

    def changed(self) -> bool:
        """Drain pending events; True (and the cache emptied) when anything happened."""
        if not self._ready():
            return False
        seen = False
        while True:
            try:
                seen = bool(os.read(self.fd, 65536)) or seen
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.fd = -1
                seen = True
                break
        if seen:
            RESOLVED.clear()
        return seen


# (name, cwd, PATH) -> (answer, stamps of what it depends on, whether inotify covers it).
RESOLVED: dict[tuple[str, str, str], tuple[tuple[str, str] | None, Stamps, bool]] = {}
RESOLVED_MAX = 4096
_WATCH_MAX = 512
WATCH = _DirWatch()


def resolve(name: str, cwd: str, path_var: str, *, poll: bool = True) -> tuple[str, str] | None:
    """(absolute path as the shell would find it, its realpath), or None when nothing runs."""
    if not name or "\x00" in name:
        return None
    key = (name, cwd, path_var)
    if poll:  # evaluate_allowlist polls once per decision instead
        WATCH.changed()
    cached = RESOLVED.get(key)
    if cached is not None and (cached[2] or all(_stamp(path) == stamp for path, stamp in cached[1])):
        return cached[0]
    # Watch before looking, so a change during the lookup is an event rather than a stale answer.
    dirs = [] if "/" in name else [os.path.join(cwd, e) if e else cwd for e in path_var.split(":")]
    watched = bool(dirs) and WATCH.watch(dirs)
    answer, stamps = resolve_uncached(name, cwd, path_var)
    if watched and answer is not None:
        watched = WATCH.watch(_link_dirs(answer[0])) and os.path.realpath(answer[0]) == answer[1]
    if WATCH.changed():
        watched = False
    if len(RESOLVED) >= RESOLVED_MAX:
        RESOLVED.clear()
    RESOLVED[key] = (answer, stamps, watched)
    return answer


def _link_dirs(path: str) -> set[str]:
    """Directories holding each symlink hop from `path` to its real file."""
    dirs = {os.path.dirname(os.path.realpath(path))}
    for _ in range(40):
        if not os.path.islink(path):
            break
        path = os.path.join(os.path.dirname(path), os.readlink(path))
        dirs.add(os.path.dirname(path))
    return dirs


def resolve_uncached(name: str, cwd: str, path_var: str) -> tuple[tuple[str, str] | None, Stamps]:
    stamps: list[tuple[str, tuple[int, int, int]]] = []
    # No normpath: `link/../x` must follow the symlink before `..`, as the kernel does.
    if "/" in name:
        candidate = os.path.join(cwd, name)
        stamps.append((os.path.dirname(candidate), _stamp(os.path.dirname(candidate))))
        found = _stamp(candidate)
        stamps.append((candidate, found))
        if _executable(found, candidate):
            return (candidate, os.path.realpath(candidate)), tuple(stamps)
        return None, tuple(stamps)
    for entry in path_var.split(":"):
        # An empty PATH entry means the cwd, exactly as the shell reads it.
        directory = os.path.join(cwd, entry) if entry else cwd
        stamps.append((directory, _stamp(directory)))
        candidate = os.path.join(directory, name)
        found = _stamp(candidate)
        if _executable(found, candidate):
            stamps.append((candidate, found))
            return (candidate, os.path.realpath(candidate)), tuple(stamps)
    return None, tuple(stamps)


def resolve_executable(name: str, *, cwd: str, env: Mapping[str, str]) -> str | None:
    """Real path of what `name` runs in `cwd` with `env`'s PATH (the default PATH when unset)."""
    found = resolve(name, cwd, env.get("PATH", DEFAULT_PATH))
    return found[1] if found else None


def poll_changes() -> None:
    """Drop cached answers if anything watched changed (once per decision, before lookups with poll=False)."""
    WATCH.changed()
