"""The submodules git recurses into are the gitlinks of its index, whatever .gitmodules says: read them."""

from __future__ import annotations

import hashlib
import os
import struct

from engine.commands.regular import Unreadable, read_regular

__all__ = ["UnreadableIndex", "gitlinks"]

_GITLINK = 0o160000
_TYPE_MASK = 0o170000
_READ_CAP = 256 << 20  # a bigger index asks rather than being read on every decision
# (hash size, sha256 of the index bytes) -> its gitlinks: a pure function of the key, so it cannot go
# stale (a rewritten index is other bytes). Hashing costs a tenth of walking a large index's entries.
_SEEN: dict[tuple[int, bytes], tuple[str, ...]] = {}
_SEEN_MAX = 16


class UnreadableIndex(Exception):
    """The index is in a form this reader does not know (split index, unknown version, damaged): the
    caller asks instead of guessing which repositories git would enter."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """git's offset varint (varint.c decode_varint): index v4's prefix lengths."""
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        byte = data[pos]
        pos += 1
        value = (value << 7) + (byte & 0x7F)
    return value, pos


def _read(path: str) -> bytes | None:
    try:
        return read_regular(path, _READ_CAP)
    except Unreadable as exc:
        if exc.absent:
            return None
        raise UnreadableIndex(f"could not be read: {exc.reason}" if exc.errno else exc.reason) from None


def gitlinks(index_path: str, hash_size: int = 20) -> list[str]:
    """The paths of every gitlink (mode 160000) entry of the index at `index_path` (none when there is no
    index). Fails closed (UnreadableIndex) on a version, extension or layout it does not read whole: a split
    index keeps entries in another file, so its `link` extension is refused rather than half-read."""
    data = _read(index_path)
    if data is None:
        return []
    if len(data) < 12 + hash_size or data[:4] != b"DIRC":
        raise UnreadableIndex("is not a git index")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        raise UnreadableIndex(f"has index version {version}")
    key = (hash_size, hashlib.sha256(data).digest())
    if key in _SEEN:
        return list(_SEEN[key])
    end = len(data) - hash_size
    out: list[str] = []
    try:
        pos = (
            _v4_entries(data, count, hash_size, end, out)
            if version == 4
            else _entries(data, count, hash_size, end, out, version)
        )
        while pos < end:  # extensions: a 4-byte signature and a 4-byte size each
            signature = data[pos : pos + 4]
            (size,) = struct.unpack_from(">I", data, pos + 4)
            if signature == b"link":
                raise UnreadableIndex("is a split index")
            pos += 8 + size
    except (struct.error, ValueError, IndexError) as exc:
        raise UnreadableIndex("has a damaged entry") from exc
    if pos != end:
        raise UnreadableIndex("has a damaged entry or extension")
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN[key] = tuple(out)
    return out


def _entries(data: bytes, count: int, hash_size: int, end: int, out: list[str], version: int) -> int:
    """Versions 2 and 3: each entry padded with 1-8 NULs to a multiple of 8 bytes."""
    pos = 12
    unpack, find = struct.unpack_from, data.find
    flags_at = 40 + hash_size
    for _ in range(count):
        mode, flags = unpack(">I", data, pos + 24)[0], unpack(">H", data, pos + flags_at)[0]
        name_at = pos + flags_at + (4 if flags & 0x4000 else 2)
        if flags & 0x4000 and version < 3:
            raise UnreadableIndex("has an extended entry in a version 2 index")
        nul = find(b"\0", name_at, end)
        if nul < 0:
            raise UnreadableIndex("has a damaged entry")
        if mode & _TYPE_MASK == _GITLINK:
            out.append(os.fsdecode(data[name_at:nul]))
        pos += (nul - pos + 8) & ~7
    return pos


def _v4_entries(data: bytes, count: int, hash_size: int, end: int, out: list[str]) -> int:
    """Version 4: each path is the previous one less a number of trailing bytes, plus a suffix."""
    pos = 12
    previous = b""
    flags_at = 40 + hash_size
    for _ in range(count):
        (mode,) = struct.unpack_from(">I", data, pos + 24)
        (flags,) = struct.unpack_from(">H", data, pos + flags_at)
        pos += flags_at + (4 if flags & 0x4000 else 2)
        strip, pos = _varint(data, pos)
        nul = data.find(b"\0", pos, end)
        if strip > len(previous) or nul < 0:
            raise UnreadableIndex("has a damaged path")
        previous = previous[: len(previous) - strip] + data[pos:nul]
        pos = nul + 1
        if mode & _TYPE_MASK == _GITLINK:
            out.append(os.fsdecode(previous))
    return pos
