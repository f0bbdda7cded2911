"""Session output, one owner (`SessionOutput`): the raw bytes and their offsets, the one UTF-8 decoder, the
text views made from them (ring, poll buffers, tail, disk spill), raw replay and viewer queues."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import statefs

RING_CHARS = 200_000
PENDING_CHARS = 30_000
TAIL_CHARS = 2_000
RAW_REPLAY_BYTES = 256 * 1024
VIEWER_QUEUE_BYTES = 1024 * 1024
DEFAULT_LOG_CAP = 64 * 1024 * 1024

# Control characters below 0x20 except tab, newline and carriage return (reference §1.12).
_C0_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
# Unicode category Cf (\p{Format}): invisible characters that can hide text from a reader.
_FORMAT_RE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
# Terminal escape sequences (CSI, OSC, charset and two-byte ESC forms): noise in a text view of a PTY.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\"
    r"|\x1b[()*+][0-9A-Za-z]|\x1b[@-Z\\-_=>78]"
)


def truncation_marker(dropped: int, session_id: str | None = None) -> str:
    """The honest marker that heads a view whose beginning was dropped from memory."""
    where = f"process log sessionId={session_id}" if session_id else "process log"
    return f"[truncated: {dropped} earlier chars dropped from memory; {where} pages the full log]\n"


def sanitize(text: str, *, terminal: bool = False) -> str:
    """The text view of output: escape sequences, C0 controls and \\p{Format} removed.

    Applied when a view is read, not per chunk: a view is at most a few hundred thousand chars,
    while a flood can be gigabytes that nobody will ever read from memory. Escape sequences are
    removed whole for pipes too (OpenClaw strips only the ESC byte and leaves `[32m` remnants in
    what the agent reads); the raw bytes stay available for terminal rendering. `terminal` is
    kept for callers that mark PTY views.
    """
    del terminal
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    text = _C0_RE.sub("", text)
    if not text.isascii():
        text = _FORMAT_RE.sub("", text)
    return text


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


class _Chunks:
    """A deque of strings capped at `cap` chars that drops its oldest chars and counts them."""

    __slots__ = ("cap", "chunks", "dropped", "length")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: deque[str] = deque()
        self.length = 0
        self.dropped = 0

    def append(self, text: str, skipped: int = 0) -> None:
        """Add `text`; `skipped` chars came before it that were never decoded (only when `text` alone
        fills the cap, so they would be dropped at once anyway)."""
        if len(text) >= self.cap:
            self.dropped += self.length + skipped + len(text) - self.cap
            self.chunks.clear()
            text = text[-self.cap :]
            self.chunks.append(text)
            self.length = len(text)
            return
        self.chunks.append(text)
        self.length += len(text)
        excess = self.length - self.cap
        while excess > 0:
            first = self.chunks[0]
            if len(first) <= excess:
                self.chunks.popleft()
                cut = len(first)
            else:
                self.chunks[0] = first[excess:]
                cut = excess
            self.length -= cut
            self.dropped += cut
            excess -= cut

    def text(self) -> str:
        if len(self.chunks) > 1:
            joined = "".join(self.chunks)
            self.chunks = deque((joined,))
        return self.chunks[0] if self.chunks else ""

    def last(self, n: int) -> str:
        parts: list[str] = []
        size = 0
        for chunk in reversed(self.chunks):
            parts.append(chunk)
            size += len(chunk)
            if size >= n:
                break
        return "".join(reversed(parts))[-n:]

    def clear(self) -> None:
        self.chunks.clear()
        self.length = 0
        self.dropped = 0


# A settled buffer's (empty) poll buffers: one pair for all of them (nothing is appended after the end).
_NO_PENDING = {"stdout": _Chunks(0), "stderr": _Chunks(0)}
_NO_RING = _Chunks(0)
_NO_REPLAY: deque[OutputChunk] = deque()  # a settled session's replay buffer: none (read from disk)


class OutputBuffer:
    """Text views of a session's output: a 200k-char ring, per-stream poll buffers, stdout and stderr apart
    (when asked), and once settled a tail. The bytes they are made of, and the disk log, are the
    `SessionOutput`'s (below); a settled view reads its text back from there."""

    def __init__(
        self,
        *,
        ring_chars: int = RING_CHARS,
        pending_chars: int = PENDING_CHARS,
        session_id: str | None = None,
        terminal: bool = False,
        split_chars: int = 0,
    ) -> None:
        self.session_id = session_id
        self.terminal = terminal
        self.ring = _Chunks(ring_chars)
        self._ring_cap = ring_chars
        # Whole stdout and stderr apart (the last `split_chars` of each), for callers whose answer keeps
        # them apart (a node's system.run); off by default: the ring keeps them merged, in order.
        self.split = {"stdout": _Chunks(split_chars), "stderr": _Chunks(split_chars)} if split_chars else None
        self.pending = {"stdout": _Chunks(pending_chars), "stderr": _Chunks(pending_chars)}
        self._total_chars = 0
        # Settled: the session ended and its text is on disk; memory keeps only its tail.
        self.settled = False
        self._settled_dropped = 0
        self._tail = ""
        # Settled from a session host's spool (`settle_spool`): the text is decoded from it when first
        # needed, and only its length and tail are kept.
        self._spool: Path | None = None
        self._unread_spool = False
        # The most chars any view keeps: the text of a longer ASCII chunk is decoded from its tail only.
        self._keep = max(ring_chars, pending_chars, split_chars)

    @property
    def total_chars(self) -> int:
        if self._unread_spool:
            self._read_spool_summary()
        return self._total_chars

    @total_chars.setter
    def total_chars(self, value: int) -> None:
        self._total_chars = value

    def settle_spool(self, spool: Path) -> None:
        """A session that ended and was reported before this gateway started (adopted): settled as it
        comes, its text in the session host's spool; nothing is read until a view needs it."""
        self._spool = spool
        self._unread_spool = True
        self._let_go()

    def _read_spool_summary(self) -> None:
        self._unread_spool = False
        text = self._settled_text()
        self._total_chars = len(text)
        self._settled_dropped = max(0, len(text) - self._ring_cap)
        self._tail = text[-TAIL_CHARS:]

    @property
    def dropped(self) -> int:
        if self._unread_spool:
            self._read_spool_summary()
        return self._settled_dropped if self.settled else self.ring.dropped

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def _let_go(self) -> None:
        """Settled: the views' buffers go (the unread poll buffers stay, if anything is unread)."""
        self.ring = _NO_RING
        self.split = None
        if not self.has_pending():
            self.pending = _NO_PENDING
        self.settled = True

    def _settled_text(self) -> str:
        """A settled buffer's whole text, from its spool ("" when it has none)."""
        return spool_text(self._spool) if self._spool is not None else ""

    def append(self, stream: str, text: str) -> None:
        if not text:
            return
        self._total_chars += len(text)
        self.ring.append(text)
        self.pending["stderr" if stream == "stderr" else "stdout"].append(text)
        if self.split is not None:
            self.split["stderr" if stream == "stderr" else "stdout"].append(text)

    def append_bytes(self, stream: str, data: bytes, decoder: TextDecoder) -> None:
        """`append(stream, decoder.feed(data))`, without decoding what no view keeps.

        A flood is mostly ASCII, where text and UTF-8 are the same bytes: only the last chars the views
        keep are decoded (the rest would be dropped at once). Anything else (or a character split across
        chunks) goes through the decoder.
        """
        size = len(data)
        if not size:
            return
        if not data.isascii() or decoder.holds_partial():
            self.append(stream, decoder.feed(data))
            return
        self._total_chars += size
        skipped = max(0, size - self._keep)
        text = (data[skipped:] if skipped else data).decode("ascii")
        self.ring.append(text, skipped)
        self.pending["stderr" if stream == "stderr" else "stdout"].append(text, skipped)
        if self.split is not None:
            self.split["stderr" if stream == "stderr" else "stdout"].append(text, skipped)

    def has_pending(self) -> bool:
        return self.pending["stdout"].length > 0 or self.pending["stderr"].length > 0

    def drain(self) -> tuple[str, str, int]:
        """Undelivered stdout, stderr and how many chars overflowed the poll buffers since the last drain."""
        out, err = self.pending["stdout"], self.pending["stderr"]
        result = (self._clean(out.text()), self._clean(err.text()), out.dropped + err.dropped)
        out.clear()
        err.clear()
        return result

    def _clean(self, text: str) -> str:
        return sanitize(text, terminal=self.terminal)

    def text(self) -> str:
        if self.settled:
            return self._clean(self._settled_text()[-self._ring_cap :])
        return self._clean(self.ring.text())

    def aggregated(self) -> str:
        body = self.text()
        return truncation_marker(self.dropped, self.session_id) + body if self.dropped else body

    def streams(self) -> tuple[str, str, bool] | None:
        """(stdout, stderr, truncated) kept apart, when this buffer was asked to (`split_chars`)."""
        if self.split is None:
            return None
        out, err = self.split["stdout"], self.split["stderr"]
        return self._clean(out.text()), self._clean(err.text()), bool(out.dropped or err.dropped)

    def tail(self, n: int = TAIL_CHARS) -> str:
        if self._unread_spool:
            self._read_spool_summary()
        if self.settled:
            held = n <= len(self._tail) or len(self._tail) >= self._total_chars  # (or it is all there is)
            return self._clean(self._tail[-n:] if held else self._settled_text()[-n:])
        return self._clean(self.ring.last(n))

    def full_text_sync(self) -> str:
        if self.settled:
            return self._clean(self._settled_text())
        return self.aggregated()


SPOOL_HEADER = 5  # a spool frame: 1 byte stream, 4 bytes length (engine.sessions.host_io)
SPOOL_READ_CAP = 256 * 1024 * 1024
SPOOL_STREAMS = {"stdout": 0, "stderr": 1, "pty": 2}  # a frame's stream byte


def spool_frames(path: Path, limit: int = SPOOL_READ_CAP) -> list[tuple[int, bytes]]:
    """The (stream, bytes) frames of a spool or session log, in the order written (a torn last one
    left out)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
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


@dataclass(frozen=True)
class OutputChunk:
    """Raw output for a viewer: stream stdout|stderr|pty, or `gap` (`dropped` bytes this viewer missed)."""

    stream: str
    data: bytes
    dropped: int = 0


class OutputSubscription:
    """One viewer's bounded queue: pushing never blocks; overflow drops the oldest bytes and says so."""

    def __init__(self, max_bytes: int = VIEWER_QUEUE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._queue: deque[OutputChunk] = deque()
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        self._wakeup = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed

    def push(self, chunk: OutputChunk) -> None:
        if self._closed:
            return
        self._queue.append(chunk)
        self._bytes += len(chunk.data)
        while self._bytes > self.max_bytes and len(self._queue) > 1:
            old = self._queue.popleft()
            self._bytes -= len(old.data)
            self._dropped += len(old.data)
        self._wakeup.set()

    def end(self) -> None:
        """The session ended: the viewer gets what is queued, then None."""
        self._closed = True
        self._wakeup.set()

    def close(self) -> None:
        self._queue.clear()
        self._bytes = 0
        self.end()

    def get_nowait(self) -> OutputChunk | None:
        if self._dropped:
            dropped, self._dropped = self._dropped, 0
            return OutputChunk("gap", b"", dropped)
        if self._queue:
            chunk = self._queue.popleft()
            self._bytes -= len(chunk.data)
            return chunk
        return None

    async def get(self) -> OutputChunk | None:
        """The next chunk, or None once the session has ended and the queue is empty."""
        while True:
            chunk = self.get_nowait()
            if chunk is not None:
                return chunk
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[OutputChunk]:
        while (chunk := await self.get()) is not None:
            yield chunk


class RawFanout:
    """Raw bytes for terminal rendering: a small replay buffer for late viewers plus live viewer queues."""

    def __init__(self, replay_bytes: int = RAW_REPLAY_BYTES) -> None:
        self._replay: deque[OutputChunk] = deque()
        self._replay_bytes = 0
        self._replay_cap = replay_bytes
        self.viewers: list[OutputSubscription] = []
        self.offset = 0  # raw bytes seen so far
        self._settled: Callable[[], bytes] | None = None

    def push(self, stream: str, data: bytes) -> None:
        chunk = OutputChunk(stream, data)
        self.offset += len(data)
        self._replay.append(chunk)
        self._replay_bytes += len(data)
        while self._replay_bytes > self._replay_cap and len(self._replay) > 1:
            self._replay_bytes -= len(self._replay.popleft().data)
        for viewer in self.viewers:
            viewer.push(chunk)

    def replay(self) -> list[OutputChunk]:
        return list(self._replay)

    def holds_all(self, more: int) -> bool:
        """True while the replay holds every byte so far and would still after `more` bytes."""
        return self.offset + more <= self._replay_cap

    def settle(self, raw: Callable[[], bytes]) -> None:
        """The session ended and its bytes are on disk: late viewers and panes read `raw()` (every byte,
        at the same offsets) instead of a replay buffer, which goes."""
        self._replay = _NO_REPLAY
        self._replay_bytes = 0
        self._replay_cap = 0
        self.viewers = []
        self._settled = raw

    def read(self, offset: int | None = None, limit: int | None = None) -> tuple[int, bytes, int]:
        """Raw bytes still held from `offset` (None: the last `limit` bytes): (start, data, bytes dropped).

        Offsets count every raw byte the session printed, so a pane can resume where it left off;
        `dropped` says how much of what it asked for is no longer held.
        """
        if self._settled is not None:  # settled: every byte, from disk
            text = self._settled()
            if offset is None:
                keep = len(text) if limit is None else min(len(text), max(0, limit))
                return len(text) - keep, text[len(text) - keep :], 0
            body = text[max(0, offset) :]
            return max(0, offset), body if limit is None else body[: max(0, limit)], 0
        held_start = self.offset - self._replay_bytes
        data = b"".join(chunk.data for chunk in self._replay)
        if offset is None:
            keep = len(data) if limit is None else min(len(data), max(0, limit))
            return self.offset - keep, data[len(data) - keep :], 0
        start = max(offset, held_start)
        body = data[start - held_start :]
        if limit is not None:
            body = body[: max(0, limit)]
        return start, body, max(0, held_start - offset)

    def subscribe(self, *, replay: bool = True, max_bytes: int = VIEWER_QUEUE_BYTES) -> OutputSubscription:
        viewer = OutputSubscription(max_bytes)
        if replay and self._settled is not None:
            viewer.push(OutputChunk("stdout", self._settled()))
        if replay:
            for chunk in self._replay:
                viewer.push(chunk)
        if self._settled is not None:
            viewer.end()
            return viewer  # nothing more will come: not kept among the viewers
        self.viewers = [v for v in self.viewers if not v.closed]
        self.viewers.append(viewer)
        return viewer

    def end(self) -> None:
        for viewer in self.viewers:
            viewer.end()
        self.viewers = []


class SessionOutput(OutputBuffer):
    """A session's output, its one owner: the raw bytes as printed with their offsets (`raw`: replay,
    viewers, `read`), the disk log of those bytes, the one decoder per stream that makes text of them,
    and the text views (OutputBuffer: ring, poll buffers, tail). Offsets count raw bytes everywhere.

    The log (`sessions/<id>.log`) holds the raw bytes in the session host's spool frames (1 byte
    stream, 4 bytes length), so a settled session's reads keep their offsets and its text decodes as
    the live one did. It is written only once the replay buffer or the ring is about to drop something
    (it then starts with every byte, still in the replay buffer), so short commands never touch the disk.
    """

    def __init__(self, log_path: Path | None, *, log_cap: int = DEFAULT_LOG_CAP, **views: Any) -> None:
        super().__init__(**views)
        self.raw = RawFanout()
        self.decoders: dict[str, TextDecoder] = {}
        self.ended = False  # no byte will follow (the session ended, or was adopted ended)
        self.log_path = log_path
        self.log_cap = log_cap
        self.log_bytes = 0  # bytes of the log file, frame headers included
        self.log_chars = 0  # chars of text the logged bytes decode to
        self.log_capped = False
        self.spilled = False
        self._log_fd: int | None = None

    @property
    def offset(self) -> int:
        """Raw bytes printed so far."""
        return self.raw.offset

    def feed(self, stream: str, data: bytes, text: bytes | None = None) -> None:
        """Raw bytes as printed, to viewers, the replay and the log, and through the stream's decoder to
        the text views; `text`: what the views take of them when not all (a terminal's queries cut out)."""
        if not data:
            return
        # The log starts before the replay buffer or the ring would drop anything (chars <= bytes).
        spill = not self.raw.holds_all(len(data)) or self.ring.length + len(data) > self.ring.cap
        if spill and self._log_fd is None and self.log_path is not None and not self.settled:
            self._open_log()
        self.raw.push(stream, data)
        text_stream = "stderr" if stream == "stderr" else "stdout"
        decoder = self.decoders.get(text_stream)
        if decoder is None:
            decoder = self.decoders[text_stream] = TextDecoder()
        self.append_bytes(text_stream, data if text is None else text, decoder)
        if self._log_fd is not None and not self.log_capped and self._write_frame(stream, data):
            self.log_chars = self._total_chars

    def finish(self) -> None:
        """EOF: a character left incomplete by the last chunk becomes a replacement character."""
        for stream, decoder in self.decoders.items():
            self.append(stream, decoder.feed(b"", final=True))
        if not self.log_capped:
            self.log_chars = self._total_chars

    def end(self) -> None:
        """No byte will follow: viewers get what is queued, then the end."""
        self.ended = True
        self.raw.end()

    def subscribe(self, *, replay: bool = True) -> OutputSubscription:
        viewer = self.raw.subscribe(replay=replay)
        if self.ended:
            viewer.end()
        return viewer

    def read(self, offset: int | None = None, limit: int | None = None) -> OutputSlice:
        """`sessions.output`: raw bytes by offset (None: the last `limit`), as exact text (`exact_slice`)."""
        start, data, dropped = self.raw.read(offset, limit)
        at_end = start + len(data) >= self.raw.offset or self.settled
        got = exact_slice(start, data, dropped, tail=offset is None, complete=self.ended and at_end)
        if got.next_offset <= got.offset and not at_end and data:
            # A limit under one character's bytes: shown as replacement, or a pane would never move on.
            got = exact_slice(start, data, dropped, tail=offset is None, complete=True)
        return got

    # -- the disk log -----------------------------------------------------------------------------
    def _open_log(self) -> None:
        assert self.log_path is not None
        try:
            statefs.ensure_private_dir(self.log_path.parent)
            self._log_fd = os.open(
                self.log_path,
                os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                statefs.FILE_MODE,
            )
        except (OSError, statefs.StateFileError):
            # No disk log: the ring's marker still says what was dropped.
            self.log_path = None
            return
        self.spilled = True
        for chunk in self.raw.replay():  # every byte so far: the replay has dropped none yet
            if not self._write_frame(chunk.stream, chunk.data):
                return
        self.log_chars = self._total_chars

    def _write_frame(self, stream: str, data: bytes) -> bool:
        assert self._log_fd is not None
        size = SPOOL_HEADER + len(data)
        if self.log_bytes + size > self.log_cap:
            self.log_capped = True
            return False
        header = bytes((SPOOL_STREAMS.get(stream, 0),)) + len(data).to_bytes(4, "big")
        # Blocking write on purpose: it lands in the page cache, and a thread hop per chunk would
        # cost more than the write itself during a flood.
        try:
            done = os.writev(self._log_fd, (header, data))
            if done < size:
                view = memoryview(header + data)[done:]
                while view:
                    view = view[os.write(self._log_fd, view) :]
        except OSError:
            self.log_capped = True
            return False
        self.log_bytes += size
        return True

    def _settled_text(self) -> str:
        if self._spool is not None:
            return spool_text(self._spool)
        if not self.spilled or self.log_path is None:
            return ""
        return spool_text(self.log_path, self.log_bytes) if self._readable() else self._tail

    def _settled_bytes(self) -> bytes:
        path = self._spool if self._spool is not None else self.log_path if self.spilled else None
        return spool_bytes(path) if path is not None else b""

    def _readable(self) -> bool:
        assert self.log_path is not None
        return os.path.exists(self.log_path)

    def settle(self) -> bool:
        """The session ended and its result went out: its bytes are in the disk log (written now when
        the replay held them all), and memory keeps a tail for lists. Every view reads the log from then
        on, so `process log`, `poll` and `sessions.output` still return every byte. False: kept in memory
        (no log, or the log reached its cap and the ring holds its end)."""
        if self.settled:
            return True
        if not self.spilled and self.log_path is not None and self.raw.offset:
            self._open_log()
        if self.log_capped or (self.raw.offset and not self.spilled):
            return False
        self.close()
        self._settled_dropped = self.ring.dropped
        self._tail = self.ring.last(TAIL_CHARS)
        self._let_go()
        return True

    def full_text_sync(self) -> str:
        """Everything still known: the disk log plus the ring, with a gap line where neither kept text."""
        if self.settled:
            return self._clean(self._settled_text())
        if not self.spilled or self.log_path is None:
            return self.aggregated()
        ring = self.ring.text()
        if not self._readable():
            return self.aggregated()
        disk = spool_text(self.log_path, self.log_bytes)
        if not self.log_capped:
            return self._clean(disk)
        ring_start = self._total_chars - self.ring.length
        if ring_start <= self.log_chars:
            return self._clean(disk + ring[self.log_chars - ring_start :])
        gap = f"\n[... {ring_start - self.log_chars} chars not kept (log cap reached) ...]\n"
        return self._clean(disk) + gap + self._clean(ring)

    async def full_text(self) -> str:
        if not self.spilled and not self.settled:
            return self.aggregated()
        return await asyncio.to_thread(self.full_text_sync)

    def compact(self) -> None:
        """Settled (on disk): the replay buffer and decoders go; late viewers and reads take the bytes
        from the log (or spool), at the same offsets."""
        self.ended = True
        self.raw.settle(self._settled_bytes)
        self.decoders.clear()

    def close(self, *, delete: bool = False) -> None:
        if self._log_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = None
        if delete and self.log_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
