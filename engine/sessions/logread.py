"""A session log read back in bounded memory: a byte range by seeking frame headers, the text streamed
frame by frame, cleaned and cut into lines as it passes, keeping only what the caller asked for."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from engine.sessions.logframes import SPOOL_HEADER, SPOOL_READ_CAP
from engine.sessions.outtext import TextDecoder, sanitize

# An escape sequence still open at a piece's end is carried into the next piece so it is removed whole;
# past this many chars it is cleaned as it stands (one open sequence cannot hold the whole log in memory).
CARRY_MAX = 1 << 20
_PIECE = 1 << 16  # chars gathered before they are cleaned
_READ = 1 << 16  # bytes read at once


def _headers(fh: BinaryIO, limit: int) -> Iterator[tuple[int, int, int]]:
    """(stream, payload position, size) of every whole frame within `limit` bytes, seeking past payloads."""
    fd = fh.fileno()
    end = min(os.fstat(fd).st_size, limit)
    pos = 0
    while pos + SPOOL_HEADER <= end:
        header = os.pread(fd, SPOOL_HEADER, pos)
        if len(header) < SPOOL_HEADER:
            return
        size = int.from_bytes(header[1:], "big")
        if pos + SPOOL_HEADER + size > end:
            return  # a torn last frame
        yield header[0], pos + SPOOL_HEADER, size
        pos += SPOOL_HEADER + size


def log_range(path: Path, offset: int | None, limit: int | None) -> tuple[int, bytes]:
    """Raw bytes [offset, offset+limit) of the log's payload (offset None: the last `limit`), as
    `spool_bytes(path)[...]` would give, reading only those bytes: (start, data)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return (0, b"")
    with fh:
        if offset is None:
            total = sum(size for _s, _p, size in _headers(fh, SPOOL_READ_CAP))
            keep = total if limit is None else min(total, max(0, limit))
            start = total - keep
        else:
            start = max(0, offset)
        stop = None if limit is None else start + max(0, limit)
        parts: list[bytes] = []
        seen = 0
        for _stream, pos, size in _headers(fh, SPOOL_READ_CAP):
            lo, hi = max(start, seen), seen + size if stop is None else min(stop, seen + size)
            if hi > lo:
                parts.append(os.pread(fh.fileno(), hi - lo, pos + lo - seen))
            seen += size
            if stop is not None and seen >= stop:
                break
        return start, b"".join(parts)


def log_text(path: Path, limit: int = SPOOL_READ_CAP) -> Iterator[str]:
    """The log's text frame by frame, each stream decoded apart (as `spool_text` joins it)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return
    with fh:
        decoders: dict[int, TextDecoder] = {}
        for stream, pos, size in _headers(fh, limit):
            key = 1 if stream == 1 else 0  # stderr apart; stdout and a terminal's are one stream
            decoder = decoders.get(key)
            if decoder is None:
                decoder = decoders[key] = TextDecoder()
            for at in range(pos, pos + size, _READ):  # a big frame in reads of _READ bytes
                yield decoder.feed(os.pread(fh.fileno(), min(_READ, pos + size - at), at))
        for decoder in decoders.values():
            yield decoder.feed(b"", final=True)


def _cut(text: str) -> int:
    """Where `text` can be cleaned apart from what follows: before the escape sequence that may still be
    open (the last ESC, or an earlier one whose `ESC \\` terminator may be that one)."""
    cut = text.rfind("\x1b")
    while cut >= 0:
        before = text.rfind("\x1b", 0, cut)
        if before < 0 or (cut + 1 < len(text) and text[cut + 1] != "\\"):
            break
        cut = before
    if cut < 0 or len(text) - cut > CARRY_MAX:
        return len(text)
    return cut


def cleaned(pieces: Iterable[str]) -> Iterator[str]:
    """`sanitize("".join(pieces))`, in pieces: each escape sequence is removed whole though it spans
    pieces (C0 and format characters are removed one by one anyway)."""
    held: list[str] = []
    size = 0
    for piece in pieces:
        held.append(piece)
        size += len(piece)
        if size >= _PIECE:
            text = "".join(held)
            cut = _cut(text)
            if cut:
                yield sanitize(text[:cut])
            held, size = [text[cut:]], len(text) - cut
    if size:
        yield sanitize("".join(held))


def last_chars(pieces: Iterable[str], n: int) -> str:
    """`"".join(pieces)[-n:]`, holding about n chars."""
    kept: deque[str] = deque()
    size = 0
    for piece in pieces:
        if not piece:
            continue
        kept.append(piece)
        size += len(piece)
        while kept and size - len(kept[0]) >= n:
            size -= len(kept.popleft())
    text = "".join(kept)
    return text[-n:] if n > 0 else ""


def lines_window(pieces: Iterable[str], offset: int | None, limit: int | None, tail: int) -> tuple[str, int]:
    """`process log`'s lines of the joined text: `\\r\\n` read as `\\n`, a last empty line not counted;
    offset/limit page it (neither: the last `tail` lines; no offset: the last `limit`). (body, total)."""
    if offset is None:
        keep = tail if limit is None else max(0, limit)
        window: deque[str] = deque(maxlen=keep)
        first, stop = -1, -1
    else:
        window = deque()
        keep = 0
        first = max(0, offset)
        stop = -1 if limit is None else first + max(0, limit)
    total = 0
    partial: list[str] = []  # the line still open at a piece's end
    cr = False  # the last piece ended in `\r`: a `\n` opening the next makes them one newline

    def wanted(lo: int, hi: int) -> bool:
        """Any of lines [lo, hi) is asked for (offset given)."""
        return hi > first and (stop < 0 or lo < stop)

    for piece in pieces:
        if cr:
            piece = "\r" + piece
        cr = piece.endswith("\r")
        if cr:
            piece = piece[:-1]
        if "\r\n" in piece:
            piece = piece.replace("\r\n", "\n")
        count = piece.count("\n")
        if not count:
            if piece:
                partial.append(piece)
            continue
        head, last = piece.find("\n"), piece.rfind("\n")
        partial.append(piece[:head])
        if (offset is None and keep) or (offset is not None and wanted(total, total + 1)):
            window.append("".join(partial))
        total += 1
        partial = [piece[last + 1 :]] if last + 1 < len(piece) else []
        middle = count - 1  # whole lines between the first and the last newline
        if middle:
            if offset is None:
                if keep:
                    window.extend(piece[head + 1 : last].rsplit("\n", keep)[-min(keep, middle) :])
            elif wanted(total, total + middle):
                lines = piece[head + 1 : last].split("\n")
                lo = max(0, first - total)
                hi = middle if stop < 0 else min(middle, stop - total)
                window.extend(lines[lo:hi])
            total += middle
    if cr:
        partial.append("\r")
    rest = "".join(partial)
    if rest:
        if (offset is None and keep) or (offset is not None and wanted(total, total + 1)):
            window.append(rest)
        total += 1
    return "\n".join(window), total
