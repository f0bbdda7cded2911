"""A spool's or session log's frames read back: the bytes in the order printed, and the text they make."""

from __future__ import annotations

import os
from pathlib import Path

from engine.sessions.outtext import TextDecoder

SPOOL_HEADER = 5  # a spool frame: 1 byte stream, 4 bytes length (engine.sessions.host_io)
SPOOL_READ_CAP = 256 * 1024 * 1024
SPOOL_STREAMS = {"stdout": 0, "stderr": 1, "pty": 2}  # a frame's stream byte


def spool_frames(path: Path, limit: int = SPOOL_READ_CAP) -> list[tuple[int, bytes]]:
    """The (stream, bytes) frames of a spool or session log, in the order written (a torn last one
    left out)."""
    try:
        with open(path, "rb") as fh:
            # Asked for no more than the file holds: read(n) allocates n bytes first (256 MiB for any log).
            data = fh.read(min(limit, os.fstat(fh.fileno()).st_size))
    except OSError:
        return []
    frames = []
    pos = 0
    while pos + SPOOL_HEADER <= len(data):
        stream, size = data[pos], int.from_bytes(data[pos + 1 : pos + SPOOL_HEADER], "big")
        end = pos + SPOOL_HEADER + size
        if end > len(data):
            break
        frames.append((stream, data[pos + SPOOL_HEADER : end]))
        pos = end
    return frames


def spool_bytes(path: Path) -> bytes:
    """A spool's or session log's raw bytes, every stream in the order printed: what offsets count."""
    return b"".join(data for _stream, data in spool_frames(path))


def spool_text(path: Path, limit: int = SPOOL_READ_CAP) -> str:
    """A session host's spool (or a session log, the same frames) as text, the streams in the order
    written, each decoded as UTF-8 apart (as the live path does: a character split across two frames of
    one stream is joined)."""
    decoders: dict[int, TextDecoder] = {}
    parts: list[str] = []
    for stream, data in spool_frames(path, limit):
        key = 1 if stream == 1 else 0  # stderr (1) apart; stdout (0) and a terminal's (2) are one stream
        decoder = decoders.get(key)
        if decoder is None:
            decoder = decoders[key] = TextDecoder()
        parts.append(decoder.feed(data))
    parts.extend(decoder.feed(b"", final=True) for decoder in decoders.values())
    return "".join(parts)
