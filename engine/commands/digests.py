"""The sha256 of a file as it is now, and a cache of root's files that no change can leave stale."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

from engine.commands.filetrust import system_stat
from engine.commands.regular import Unreadable, read_fd
from engine.commands.regular import open_regular as _open_regular

# Agent-writable files are copied into memory to run: past this size the run is refused instead.
WRITABLE_MAX_BYTES = 64 * 1024 * 1024
# Content binding reads no more than this of a file a command names as code (a script, a file it sources or
# loads): no real script comes near it, and a larger one (a VM image, a backup) is bound as unreadable, so
# the run is refused with the reason given, never hashed whole inside a decision worker (fresh round 18 b).
SCRIPT_MAX_BYTES = 16 * 1024 * 1024
# Executables (a pinned binary, a wrapper, a `#!` interpreter): real ones reach a few hundred MiB (a browser,
# a static Go or Rust build), still read once and then served from CACHE; nothing past this is hashed.
PROGRAM_MAX_BYTES = 1024 * 1024 * 1024
SHEBANG_MAX = 256  # Linux reads at most this much of a `#!` line (BINPRM_BUF_SIZE)
CACHE_MAX = 4096
UNREADABLE = ""  # the digest of a file that could not be read: never matches, so the run is refused


class DigestCache:
    """sha256 of system-owned files keyed by (dev, ino, size, mtime_ns, ctime_ns): any write, truncate,
    rename over or chmod changes the key (ctime cannot be set back), so a stale digest is never served.
    Agent-writable files are never cached: they are read and hashed at every decision and every spawn."""

    def __init__(self, limit: int = CACHE_MAX) -> None:
        self._limit = limit
        self._entries: OrderedDict[tuple[int, int, int, int, int], tuple[str, bytes]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()  # decisions run on worker threads, spawn checks on the event loop

    def get(self, st: os.stat_result) -> tuple[str, bytes] | None:
        """(sha256, the first bytes: `#!` line or ELF magic) of an unchanged file."""
        key = _key(st)
        with self._lock:
            digest = self._entries.get(key)
            if digest is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        return digest

    def put(self, st: os.stat_result, digest: str, head: bytes) -> None:
        with self._lock:
            self.misses += 1
            self._entries[_key(st)] = (digest, head)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


CACHE = DigestCache()


# A file cannot be opened or bound as it must be (engine.commands.regular: the one way files are read).
ContentError = Unreadable


def open_regular(real: str) -> tuple[int, os.stat_result]:
    """An fd on the regular file at `real` (resolved already, so its last component must not be a link;
    O_NONBLOCK so a FIFO planted there cannot hang the gateway)."""
    return _open_regular(real, follow=False)


def read_all(fd: int, size: int, limit: int, path: str = "") -> bytes:
    return read_fd(fd, size, limit, path)


def digest_path(
    real: str, cache: DigestCache = CACHE, limit: int = SCRIPT_MAX_BYTES
) -> tuple[str, int, bool, bytes]:
    """(sha256, size, agent-writable, first bytes) of the file at `real` right now; ContentError past
    `limit` bytes (and past WRITABLE_MAX_BYTES for an agent-writable one), before any of it is read."""
    st = system_stat(real)
    if st is not None:
        hit = cache.get(st)
        if hit is not None:
            return hit[0], st.st_size, False, hit[1]
    fd, fst = open_regular(real)
    try:
        if st is None:
            data = read_all(fd, fst.st_size, min(limit, WRITABLE_MAX_BYTES), real)
            return hashlib.sha256(data).hexdigest(), len(data), True, data[:SHEBANG_MAX]
        digest = hash_fd(fd, fst, cache, limit, real)
        return digest, fst.st_size, False, os.pread(fd, SHEBANG_MAX, 0)
    finally:
        os.close(fd)


def hash_fd(
    fd: int, st: os.stat_result, cache: DigestCache = CACHE, limit: int = PROGRAM_MAX_BYTES, path: str = ""
) -> str:
    """sha256 of an open system-owned file, from `cache` while its (dev, ino, size, mtime, ctime) hold;
    ContentError for a file over `limit` bytes (unread) or one that grows past it while being read."""
    hit = cache.get(st)
    if hit is not None:
        return hit[0]
    if st.st_size > limit:
        raise ContentError(
            path, f"has {st.st_size} bytes, over the {limit}-byte limit content binding reads", over=True
        )
    h = hashlib.sha256()
    offset = 0
    head = b""
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        if not offset:
            head = chunk[:SHEBANG_MAX]
        h.update(chunk)
        offset += len(chunk)
        if offset > limit:
            raise ContentError(path, f"grew past the {limit}-byte limit content binding reads", over=True)
    digest = h.hexdigest()
    cache.put(st, digest, head)
    return digest
