"""Output bytes as text: the one incremental UTF-8 decoder, byte-exact slices and frames, the clean view."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from engine import termtext


def truncation_marker(dropped: int, session_id: str | None = None) -> str:
    """The honest marker that heads a view whose beginning was dropped from memory."""
    where = f"process log sessionId={session_id}" if session_id else "process log"
    return f"[truncated: {dropped} earlier chars dropped from memory; {where} pages the full log]\n"


def sanitize(text: str, *, terminal: bool = False) -> str:
    """The text view of output: every escape sequence removed whole (7-bit and C1 spellings), and of the
    rest only what draws, tabs, newlines and `\r` (engine.termtext: what is kept, not what is refused).

    Applied when a view is read, not per chunk: a view is at most a few hundred thousand chars,
    while a flood can be gigabytes that nobody will ever read from memory. Escape sequences are
    removed whole for pipes too (OpenClaw strips only the ESC byte and leaves `[32m` remnants in
    what the agent reads); the raw bytes stay available for terminal rendering. `terminal` is
    kept for callers that mark PTY views.
    """
    del terminal
    return termtext.plain(text)


class TextDecoder:
    """Incremental bytes -> text for one stream: UTF-8 with replacement, split characters kept whole."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> str:
        text: str = self._decoder.decode(data, final)
        return text

    def holds_partial(self) -> bool:
        """True while the start of a character split across chunks waits for its end."""
        return bool(self._decoder.getstate()[0])

    def held(self) -> int:
        """How many bytes of a character split across chunks wait for its end (0 to 3)."""
        return len(self._decoder.getstate()[0])

    def span(self, data: bytes, offset: int) -> tuple[str, int, int]:
        """Decode `data`, which starts at raw byte `offset`: the text and the raw byte range [start, end)
        it stands for, so offsets always describe the text they travel with (a character split across
        chunks belongs to the chunk that completes it; replacement characters keep their bytes' range)."""
        start = offset - self.held()
        text = self.feed(data)
        return text, start, offset + len(data) - self.held()


def output_frame(
    session_id: str, stream: str, decoder: TextDecoder, piece: bytes, offset: int
) -> dict[str, Any]:
    """A `session.output` frame (the gateway's and a node's alike): the text and the raw byte range it
    stands for (`offset`, `nextOffset`), so a client lines it up with what `sessions.output` showed by
    bytes, never by re-encoding the text (a replacement character stands for 1 to 3 bytes)."""
    text, start, end = decoder.span(piece, offset)
    return {"sessionId": session_id, "stream": stream, "data": text, "offset": start, "nextOffset": end}


@dataclass(frozen=True)
class OutputSlice:
    """Raw bytes `[offset, next_offset)` as text (`sessions.output`): `text` is exactly their decode."""

    offset: int
    next_offset: int
    text: str
    dropped: int  # bytes asked for that are no longer held


def exact_slice(start: int, data: bytes, dropped: int, *, tail: bool, complete: bool) -> OutputSlice:
    """`data`, raw bytes from `start`, as text whose byte range is exact. A tail read (no offset asked)
    starts at a character: the continuation bytes of one the window cut are left out. A character not
    complete at the end is left for the next read, unless nothing more will come (`complete`): read on
    from `next_offset`, the pieces decode to what the whole decodes to."""
    lead = 0
    if tail and start > 0:
        while lead < min(3, len(data)) and 0x80 <= data[lead] < 0xC0:
            lead += 1
    decoder = TextDecoder()
    text = decoder.feed(data[lead:], final=complete)
    return OutputSlice(start + lead, start + len(data) - decoder.held(), text, dropped)
