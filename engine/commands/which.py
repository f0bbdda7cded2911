"""Executable resolution as the shell does it (PATH, cwd, symlinks), cached and invalidated by inotify."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import stat
import struct
import threading
from collections.abc import Collection, Mapping
from functools import lru_cache
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

_IN_NONBLOCK, _IN_CLOEXEC, _IN_ONLYDIR, _IN_DONT_FOLLOW = 0o4000, 0o2000000, 0x01000000, 0x02000000
# Entry added, removed, renamed or chmod-ed, or the directory itself moved or deleted.
_IN_MASK = 0x004 | 0x100 | 0x200 | 0x040 | 0x080 | 0x400 | 0x800 | _IN_ONLYDIR
# A file's content or metadata changed, or the file itself moved or deleted (see watch_file).
_IN_FILE_MASK = 0x002 | 0x004 | 0x008 | 0x400 | 0x800


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
        self.poller: Any = None
        self.identity = (-1, -1)  # (st_dev, st_ino) of the inotify file, to tell it from a reused number
        # Bumped whenever cached answers are dropped: an answer computed across a bump is not stored, so a
        # change seen (and drained) by another thread, or a reset, never leaves a stale answer behind.
        self.generation = 0
        # Decisions run on several threads at once (asyncio.to_thread, the offload thread). The lock covers
        # the caches' generation and every use of the inotify fd and its poll object: `select.poll` refuses
        # a concurrent poll() ("concurrent poll() invocation"), a drain seen by one thread must empty the
        # caches before another thread finds nothing pending and trusts them, and the fd must not be closed
        # (and its number reused) under a read. Reentrant: a drain drops the caches under it.
        self.lock = threading.RLock()
        # Directories watched only for their symlink listing (LINKS): an event there drops that listing and
        # nothing else, so a busy directory an operand named (`/tmp`) does not empty the PATH caches.
        # Kernel watches outlive a drop, so both descriptor sets are kept until the inotify fd is replaced:
        # a descriptor ever used for a cached answer (main) always drops everything, even if a listing
        # asks for the same inode later under another name (`/bin` and `/usr/bin`).
        self.main_wds: set[int] = set()
        self.link_wds: dict[int, str] = {}  # descriptor -> directory, never in main_wds
        self.link_dirs: dict[str, int] = {}  # directory -> descriptor, forgotten on every drop
        self.link_epoch = 0  # bumped on every listing dropped: a listing read across a bump is not stored
        self.link_uses: dict[str, int] = {}  # lookups per directory since its listing was last dropped
        # Which events can change a cached answer (issue 31). A resolution depends only on the entries it
        # looked up: an event in a watched directory about another name (a build writing files in the
        # project, anyone's temp file in /tmp) changes none of them, so it drops nothing. Per main
        # descriptor: the paths it was watched under, and the names looked up there (None: any name
        # counts). Forgotten on every drop, like `watched`: a descriptor no answer registered since the
        # last drop carries nothing cached. File watches (watch_file) and unknown descriptors drop all.
        self.path_wd: dict[str, int] = {}
        self.wd_dirs: dict[int, set[str]] = {}
        self.wd_names: dict[int, set[str] | None] = {}
        self.main_listed: dict[int, set[str]] = {}  # main descriptor -> listings (LINKS) read there
        self.file_wds: set[int] = set()

    def _drop_all(self) -> None:
        with self.lock:
            self.generation += 1
            # A watch follows its inode: a watched directory renamed away (and another made in its place)
            # leaves the path unwatched. Every path is watched again as it is next used.
            self.watched = set()
            self.path_wd, self.wd_dirs, self.wd_names, self.main_listed = {}, {}, {}, {}
            RESOLVED.clear()
            REAL.clear()
            NAMED.clear()
            LINKS.clear()
            # The path -> descriptor map is forgotten like `watched` (a directory may have been renamed
            # away with its watch); descriptor -> path stays, to tell those watches' later events apart.
            self.link_dirs, self.link_uses = {}, {}
            self.link_epoch += 1

    def current(self) -> int:
        """The generation, read after a fork's (or first use's) reset so the reset cannot void a store."""
        self._ready()
        return self.generation

    def store(self, generation: int, cache: dict[Any, Any], key: Any, value: Any, limit: int) -> bool:
        """Keep `value` unless anything was dropped since `generation` was read (checked under the lock)."""
        with self.lock:
            if generation != self.generation:
                return False
            if len(cache) >= limit:
                cache.clear()
            cache[key] = value
            return True

    def _forked(self) -> None:
        self.pid = -1  # os.register_at_fork: the next use starts over in the child
        self.lock = threading.RLock()  # another thread may have held the parent's at the fork

    def _stale(self) -> bool:
        # A forked child must not share (and steal) the parent's events. os.register_at_fork marks the
        # child (pid -1); comparing os.getpid() as well costs a syscall on every decision, so it is only
        # compared where there is no fork hook (a fork that runs no Python hooks runs no Python either).
        return self.pid == -1 or (not _AT_FORK and self.pid != os.getpid())

    def _ready(self) -> bool:
        if self._stale():
            if not _AT_FORK:
                self.lock = threading.RLock()
            with self.lock:
                if self._stale():  # another thread may have opened it meanwhile: one fd, never two
                    self._open()
        return self.fd >= 0

    def _open(self) -> None:
        self.fd, self.watched = -1, set()
        self.main_wds, self.link_wds, self.file_wds = set(), {}, set()
        self._drop_all()
        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
            fd = self.libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            fd = -1
        self.poller = select.poll()
        self.identity = (-1, -1)
        if fd >= 0:
            self.poller.register(fd, select.POLLIN)
            st = os.fstat(fd)
            self.identity = (st.st_dev, st.st_ino)
        self.fd = fd
        self.pid = os.getpid()  # last: a thread that sees the pid set sees the fd and poller too

    def watch_file(self, path: str) -> bool:
        """Watch one regular file (not a symlink) for any write, and its directory for a rename over it."""
        if not self._ready() or not self.watch([os.path.dirname(path) or "/"]):
            return False
        key = "\0file:" + path  # NUL never occurs in a path: no clash with a directory's entry
        if key not in self.watched:
            with self.lock:
                if len(self.watched) >= _WATCH_MAX:
                    self._reset()
                    return False
                mask = _IN_FILE_MASK | _IN_DONT_FOLLOW
                wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask) if self.fd >= 0 else -1
                if wd < 0:
                    return False
                self.file_wds.add(wd)
                self.watched.add(key)
        try:  # after the watch: a link (its target unwatched) planted later is an event in the directory
            return stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            return False

    def watch(self, directories: Collection[str] | Mapping[str, Collection[str]]) -> bool:
        """Watch each directory. A mapping names the entries looked up in each: only an event about one of
        those (or about the directory itself, or a watched directory in it) drops cached answers; a plain
        collection means any event there does. Registered before the caller's second look, so an event
        read before registration is about a change that look sees."""
        if not self._ready():
            return False
        named = isinstance(directories, Mapping)
        for directory in directories:
            with self.lock:
                wd = self.path_wd.get(directory, -1) if directory in self.watched else -1
                if wd < 0:
                    if len(self.watched) + len(self.link_wds) >= _WATCH_MAX:
                        # inotify watches are a per-user budget: share it. Start over rather than stop
                        # caching for good once a long-lived gateway has seen this many directories.
                        self._reset()
                        return False
                    if self.fd < 0:  # closed by a read error meanwhile
                        return False
                    wd = self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _IN_MASK)
                    if wd < 0:
                        return False
                self.watched.add(directory)
                self.path_wd[directory] = wd
                self.main_wds.add(wd)
                self.wd_dirs.setdefault(wd, set()).add(directory)
                if not named:
                    self.wd_names[wd] = None
                elif wd not in self.wd_names:
                    self.wd_names[wd] = set(directories[directory])  # type: ignore[index]
                else:
                    known = self.wd_names[wd]
                    if known is not None:
                        known.update(directories[directory])  # type: ignore[index]
                # The same inode may have been watched for a listing: now a main watch, whose events
                # still drop that listing.
                listed = self.link_wds.pop(wd, None)
                if listed is not None:
                    self.link_dirs.pop(listed, None)
                    self.main_listed.setdefault(wd, set()).add(listed)
        return True

    def watch_links(self, directory: str) -> int:
        """Watch `directory` for its listing (LINKS): 1 watched, 0 it does not exist (or is not a directory),
        -1 cannot be watched."""
        if not self._ready():
            return -1
        if directory in self.link_dirs:
            return 1
        with self.lock:
            if directory in self.watched:
                wd = self.path_wd.get(directory)
                if wd is not None:  # every event there now drops this listing (see _drop_some)
                    self.main_listed.setdefault(wd, set()).add(directory)
                    return 1
            if len(self.watched) + len(self.link_wds) >= _WATCH_MAX:
                self._reset()
                return -1
            if self.fd < 0:
                return -1
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _IN_MASK)
            if wd < 0:
                return 0 if ctypes.get_errno() in (errno.ENOENT, errno.ENOTDIR) else -1
            if wd in self.main_wds:
                # Already watched for cached answers: its events drop this listing (see _drop_some).
                self.main_listed.setdefault(wd, set()).add(directory)
                return 1
            old = self.link_wds.get(wd)
            if old is not None and old != directory:
                return -1  # the same inode under two names: keep it simple, lstat instead
            self.link_wds[wd] = directory
            self.link_dirs[directory] = wd
        return 1

    def changed(self) -> bool:
        """Drain pending events; True (and the cache emptied) when anything happened."""
        if (self.pid == -1 or not _AT_FORK) and not self._ready():
            return False
        with self.lock:  # see __init__: one poller, one drain at a time, the drop before anyone trusts
            if self.fd < 0 or not self.poller.poll(0):
                return False  # nothing pending (a poll costs a third of an empty non-blocking read)
            if not self._ours():
                # The number no longer names our inotify file (closed, perhaps reused, by code that
                # closed a number it did not own): nothing it reports can be trusted, so start over,
                # without closing the number (it is someone else's now).
                self._open()
                return True
            seen = False
            events = b""
            # Read only what poll says is there: a read can then never block, whatever the fd has become.
            # At most _DRAIN_READS reads: a racer renaming in a watched directory makes events as fast as
            # they are read, and a drain until empty would never end. Past that, everything counts as
            # changed; the rest is read (and drops the caches again) next time.
            for _ in range(_DRAIN_READS):
                try:
                    chunk = os.read(self.fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.fd = -1
                    seen = True
                    break
                if not chunk:
                    break
                events += chunk
                if not self.poller.poll(0):
                    break
            else:
                seen = True
            if not seen and events and self._drop_some(events):
                return False  # no cached answer rested on what changed (listings dropped as needed)
            if seen or events:
                self._drop_all()
                return True
            return False

    def _drop_some(self, events: bytes) -> bool:
        """Drop the listings these events touch; True when no other cached answer rests on them (else the
        caller drops everything). An event counts for the answers when it is an overflow, on a file watch
        or an unknown descriptor, about the directory itself (no name: chmod, moved, deleted), about a
        name looked up there, or about a watched or listed directory's own name."""
        seen: list[tuple[int, int]] = []
        relevant = False
        at = 0
        while at + _EVENT.size <= len(events):
            wd, mask, _cookie, length = _EVENT.unpack_from(events, at)
            name = events[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0")
            at += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                return False
            seen.append((wd, mask))
            if wd in self.link_wds or relevant:
                continue
            if wd not in self.main_wds or wd in self.file_wds or not name or mask & (_IN_GONE | _IN_UNMOUNT):
                relevant = True
                continue
            if wd not in self.wd_dirs:
                continue  # registered by no answer since the last drop: nothing cached rests on it
            names = self.wd_names.get(wd)
            text = os.fsdecode(name)
            if names is None or text in names:
                relevant = True
                continue
            for parent in self.wd_dirs[wd]:
                child = parent + text if parent.endswith("/") else parent + "/" + text
                if child in self.watched or child in self.link_dirs or child in LINKS:
                    relevant = True
                    break
        if at != len(events):
            return False
        with self.lock:
            self.link_epoch += 1
            for wd, mask in seen:
                for listed in self.main_listed.pop(wd, ()):
                    LINKS.pop(listed, None)
                    self.link_uses.pop(listed, None)
                directory = self.link_wds.get(wd)
                if directory is None:
                    continue
                LINKS.pop(directory, None)
                self.link_uses.pop(directory, None)
                if mask & _IN_GONE and self.link_dirs.get(directory) == wd:
                    del self.link_dirs[directory]  # moved or deleted: the path is watched anew next time
                if mask & _IN_IGNORED:
                    del self.link_wds[wd]  # the watch is gone
        return not relevant

    def _ours(self) -> bool:
        """Whether self.fd still names the inotify file _open made (checked only when events are pending)."""
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity

    def _reset(self) -> None:
        with self.lock:
            with contextlib.suppress(OSError):
                if self.fd >= 0:
                    os.close(self.fd)
            self.fd = -1
            self._open()  # a fresh inotify fd; every cached answer dropped


_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_UNMOUNT = 0x4000, 0x8000, 0x2000
_IN_GONE = 0x400 | 0x800 | _IN_IGNORED  # IN_DELETE_SELF, IN_MOVE_SELF

# (name, cwd, PATH) -> (answer, stamps of what it depends on, whether inotify covers it).
RESOLVED: dict[tuple[str, str, str], tuple[tuple[str, str] | None, Stamps, bool]] = {}
RESOLVED_MAX = 4096
_WATCH_MAX = 512
_DRAIN_READS = 16  # reads of pending events per drain (64 KiB each)
# absolute path -> os.path.realpath(path), for paths whose every looked-into directory is watched.
REAL: dict[str, str] = {}
REAL_MAX = 4096
NAMED: dict[str, str] = {}  # path -> named_path(path), for paths whose directory is in REAL
# real directory -> names of the symlinks in it, while inotify reports no change in it (see dir_links).
LINKS: dict[str, frozenset[str]] = {}
LINKS_MAX = 1024
_LISTING_MAX = 1024  # entries: a bigger directory is not listed, its operands are lstat-ed one by one
_LISTING_USES = 3  # lookups in a directory before it is listed (a listing costs about five lstats)
_UNLISTED = ("/proc", "/sys", "/dev")  # pseudo file systems change without inotify events
WATCH = _DirWatch()
_AT_FORK = hasattr(os, "register_at_fork")
if _AT_FORK:
    os.register_at_fork(after_in_child=WATCH._forked)


def resolve(name: str, cwd: str, path_var: str, *, poll: bool = True) -> tuple[str, str] | None:
    """(absolute path as the shell would find it, its realpath), or None when nothing runs."""
    if not name or "\x00" in name:
        return None
    key = resolve_key(name, cwd, path_var)
    if poll:  # evaluate_allowlist polls once per decision instead
        WATCH.changed()
    cached = RESOLVED.get(key)
    if cached is not None and (cached[2] or all(_stamp(path) == stamp for path, stamp in cached[1])):
        return cached[0]
    generation = WATCH.current()
    # Watch before looking, so a change during the lookup is an event rather than a stale answer.
    dirs = [] if "/" in name else [os.path.join(cwd, e) if e else cwd for e in path_var.split(":")]
    watched = bool(dirs) and WATCH.watch(dirs)
    answer, stamps = resolve_uncached(name, cwd, path_var)
    if watched and answer is not None:
        watched = WATCH.watch(_link_dirs(answer[0])) and os.path.realpath(answer[0]) == answer[1]
    if WATCH.changed() or WATCH.generation != generation:
        watched = False
    if not WATCH.store(generation, RESOLVED, key, (answer, stamps, watched), RESOLVED_MAX):
        # Dropped meanwhile: keep it stat-validated only, never as inotify-covered.
        WATCH.store(WATCH.generation, RESOLVED, key, (answer, stamps, False), RESOLVED_MAX)
    return answer


def resolve_key(name: str, cwd: str, path_var: str) -> tuple[str, str, str]:
    """RESOLVED's key: a bare name looked up in a PATH of absolute entries finds the same file from any
    cwd, so the cwd is left out there (an agent moving between directories keeps its lookups)."""
    if "/" not in name and _absolute_path_var(path_var):
        return (name, "", path_var)
    return (name, cwd, path_var)


@lru_cache(maxsize=64)
def _absolute_path_var(path_var: str) -> bool:
    return all(entry.startswith("/") for entry in path_var.split(":"))


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


def real_path(path: str, *, poll: bool = True) -> str:
    """`os.path.realpath(path)`, cached while nothing it depends on changes.

    A decision resolves the same few paths (the state dir, the cwd, the PATH dirs, each entry's named
    path) about ten times; realpath costs a syscall per component each time. The answer depends only on the
    entries looked up in each directory the resolution walked, so those directories are watched (inotify):
    an entry created, removed, renamed or chmod-ed there, or the directory itself moved, empties the cache.
    Where a directory cannot be watched (no inotify, watch budget spent) the answer is not cached."""
    if not path.startswith("/") or "\x00" in path:
        return os.path.realpath(path)
    if poll:
        WATCH.changed()
    cached = REAL.get(path)
    if cached is not None:
        return cached
    generation = WATCH.current()
    answer, dirs = _traced_realpath(path)
    if any(d == "/proc" or d.startswith(("/proc/", "/sys/")) for d in dirs):
        return answer  # pseudo file systems change (a process's cwd, fds) without inotify events
    # Watch, then resolve again: a change between the first walk and the watch shows up as a different
    # walk; one after the watch is an event (checked last).
    if not WATCH.watch(dirs):
        return answer
    again, dirs_again = _traced_realpath(path)
    if WATCH.changed() or again != answer or dirs_again != dirs:
        return again
    WATCH.store(generation, REAL, path, answer, REAL_MAX)
    return answer


def named_path(path: str, *, poll: bool = True) -> str:
    """`path` with its directory resolved but its last component kept: the name the program sees."""
    if poll:
        WATCH.changed()
    cached = NAMED.get(path)
    if cached is not None:
        return cached
    head, tail = os.path.split(path)
    if not tail:
        return real_path(path, poll=False)
    generation = WATCH.current()
    real_head = real_path(head or ".", poll=False)
    answer = os.path.join(real_head, tail)
    if REAL.get(head) == real_head:  # the directory's answer is watched: so is this one
        WATCH.store(generation, NAMED, path, answer, REAL_MAX)
    return answer


def resolves_through_proc(path: str) -> bool:
    """Whether resolving the absolute `path` looks anything up in /proc (a symlink the agent made into
    /proc/self/cwd): the answer is then the gateway's process's, not the run's."""
    return any(d == "/proc" or d.startswith("/proc/") for d in _traced_realpath(path)[1])


def _traced_realpath(path: str) -> tuple[str, dict[str, set[str]]]:
    """posixpath.realpath (non-strict) for an absolute path, plus every existing directory an entry was
    looked up in, with the names looked up there. Lookups below a missing entry are left out: creating
    that entry is an event in its (watched) parent."""
    dirs: dict[str, set[str]] = {}
    missing: list[str] = []

    def lookup(parent: str, newpath: str) -> bool:
        if not any(parent == gone or parent.startswith(gone + "/") for gone in missing):
            dirs.setdefault(parent, set()).add(newpath[newpath.rfind("/") + 1 :])
        try:
            st = os.lstat(newpath)
        except OSError:
            missing.append(newpath)
            return False
        return stat.S_ISLNK(st.st_mode)

    def join(base: str, rest: str, seen: dict[str, str | None]) -> tuple[str, bool]:
        if rest.startswith("/"):
            rest, base = rest[1:], "/"
        while rest:
            name, _, rest = rest.partition("/")
            if not name or name == ".":
                continue
            if name == "..":
                if base:
                    base, name = os.path.split(base)
                    if name == "..":
                        base = os.path.join(base, "..", "..")
                else:
                    base = ".."
                continue
            newpath = os.path.join(base, name)
            if not lookup(base, newpath):
                base = newpath
                continue
            if newpath in seen:
                known = seen[newpath]
                if known is not None:
                    base = known
                    continue
                return os.path.join(newpath, rest), False  # a symlink loop, as posixpath returns it
            seen[newpath] = None
            base, ok = join(base, os.readlink(newpath), seen)
            if not ok:
                return os.path.join(base, rest), False
            seen[newpath] = base
        return base, True

    resolved, _ = join("", path, {})
    return os.path.abspath(resolved), dirs


def poll_changes() -> None:
    """Drop cached answers if anything watched changed (once per decision, before lookups with poll=False)."""
    WATCH.changed()


def dir_links(directory: str) -> frozenset[str] | None:
    """The names of the symlinks in `directory`, or None (not known: lstat the entry instead).

    `directory` must be a real path (no symlink in it) whose resolution the watched cache holds, so that it
    cannot be moved, replaced or created without an event. The operand check (engine.commands.protected)
    asks whether an operand's last component is a symlink: one lstat per operand, mostly of names that do
    not exist. A directory's listing answers that for every name in it while the directory is unchanged:
    it is watched (an entry created, removed or renamed there, or the directory moved, drops the listing),
    read after the watch, and kept only if nothing was dropped meanwhile. A directory that does not exist
    (or is not one) holds no links; its appearance is an event in the watched parent its resolution looked
    it up in. Listed only after a few lookups, so a directory named once costs no more than its lstat."""
    known = LINKS.get(directory)
    if known is not None:
        return known
    uses = WATCH.link_uses.get(directory, 0) + 1
    if uses < _LISTING_USES:
        if len(WATCH.link_uses) >= LINKS_MAX:
            WATCH.link_uses.clear()
        WATCH.link_uses[directory] = uses
        return None
    if not directory.startswith("/") or any(
        directory == top or directory.startswith(top + "/") for top in _UNLISTED
    ):
        return None
    generation = WATCH.current()
    epoch = WATCH.link_epoch
    watched = WATCH.watch_links(directory)
    if watched < 0:
        return None
    names: list[str] = []
    if watched:
        try:
            with os.scandir(directory) as entries:
                for count, entry in enumerate(entries):
                    if count >= _LISTING_MAX:
                        WATCH.link_uses[directory] = -(1 << 30)  # too big: lstat its entries until a drop
                        return None
                    if entry.is_symlink():
                        names.append(entry.name)
        except OSError:
            return None  # unreadable (searchable only): lstat answers
    if WATCH.changed() or WATCH.generation != generation or WATCH.link_epoch != epoch:
        return None
    listing = frozenset(names)
    with WATCH.lock:
        if WATCH.generation != generation or WATCH.link_epoch != epoch:
            return None
        if len(LINKS) >= LINKS_MAX:
            LINKS.clear()
        LINKS[directory] = listing
    return listing
