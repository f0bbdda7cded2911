"""Session output, one owner (`SessionOutput`): the raw bytes and their offsets, the one UTF-8 decoder, the
text views made from them (ring, poll buffers, tail, disk spill), raw replay and viewer queues."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar

from engine import fairpool, statefs
from engine.sessions import diskroom
from engine.sessions.fanout import OutputSubscription, RawFanout
from engine.sessions.logframes import SPOOL_HEADER, SPOOL_STREAMS, spool_bytes, spool_text
from engine.sessions.logread import cleaned, lines_window, log_range, log_text
from engine.sessions.outtext import OutputSlice, TextDecoder, exact_slice
from engine.sessions.textviews import TAIL_CHARS, OutputBuffer

DEFAULT_LOG_CAP = 64 * 1024 * 1024
T = TypeVar("T")


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
        self._room = diskroom.Room()  # what the state dir's filesystem lets it write (its reserve kept)

    @property
    def offset(self) -> int:
        """Raw bytes printed so far."""
        return self.raw.offset

    def feed(self, stream: str, data: bytes, text: bytes | None = None) -> None:
        """Raw bytes as printed, to viewers, the replay and the log, and through the stream's decoder to
        the text views; `text`: what the views take of them when not all (a terminal's queries cut out)."""
        if not data:
            return
        piece = diskroom.PIECE
        logging = self._log_fd is not None and not self.log_capped
        if text is None and len(data) > piece and logging and not self._room.holds(len(data)):
            # near the reserve: in pieces, so the log stops within a piece of it
            for at in range(0, len(data), piece):
                self._feed(stream, data[at : at + piece], None)
            return
        self._feed(stream, data, text)

    def _feed(self, stream: str, data: bytes, text: bytes | None) -> None:
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
            if not diskroom.has_room(os.statvfs(self.log_path.parent)):
                raise OSError("the state dir's filesystem is down to its reserve")
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
        # the log's cap, and the room the state dir's filesystem keeps for the gateway's own records
        if self.log_bytes + size > self.log_cap or not self._room.take(self._log_fd, size):
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

    def _settled_pieces(self) -> Iterator[str]:
        if self._spool is not None:
            return log_text(self._spool)
        if not self.spilled or self.log_path is None:
            return iter(())
        return log_text(self.log_path, self.log_bytes) if self._readable() else iter((self._tail,))

    def _settled_range(self, offset: int | None, limit: int | None) -> tuple[int, bytes]:
        path = self._spool if self._spool is not None else self.log_path if self.spilled else None
        return log_range(path, offset, limit) if path is not None else (0, b"")

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

    def log_lines(self, offset: int | None, limit: int | None, tail: int) -> tuple[str, int]:
        """`process log`: the lines asked for of `full_text_sync()` and how many it has, streamed from
        disk keeping only those lines (logread.lines_window), never the whole text."""
        if self.settled:
            return lines_window(cleaned(self._settled_pieces()), offset, limit, tail)
        if not self.spilled or self.log_path is None or not self._readable():
            return lines_window((self.aggregated(),), offset, limit, tail)
        disk = log_text(self.log_path, self.log_bytes)
        if not self.log_capped:
            return lines_window(cleaned(disk), offset, limit, tail)
        ring = self.ring.text()
        ring_start = self._total_chars - self.ring.length
        if ring_start <= self.log_chars:
            return lines_window(
                cleaned(chain(disk, (ring[self.log_chars - ring_start :],))), offset, limit, tail
            )
        gap = f"\n[... {ring_start - self.log_chars} chars not kept (log cap reached) ...]\n"
        return lines_window(chain(cleaned(disk), (gap,), cleaned((ring,))), offset, limit, tail)

    async def off_loop(self, call: Callable[[], T]) -> T:
        """call() where it may read the disk log: in the acting agent's turn of the reads pool (the reader
        pays for its read), on the loop when everything is in memory."""
        if not self.spilled and not self.settled:
            return call()
        return await fairpool.offload(fairpool.reads, call)

    async def read_async(self, offset: int | None = None, limit: int | None = None) -> OutputSlice:
        return await self.off_loop(functools.partial(self.read, offset, limit))

    async def full_text(self) -> str:
        if not self.spilled and not self.settled:
            return self.aggregated()
        return await asyncio.to_thread(self.full_text_sync)

    def compact(self) -> None:
        """Settled (on disk): the replay buffer and decoders go; late viewers and reads take the bytes
        from the log (or spool), at the same offsets."""
        self.ended = True
        self.raw.settle(self._settled_bytes, self._settled_range)
        self.decoders.clear()

    def close(self, *, delete: bool = False) -> None:
        if self._log_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._log_fd)
            self._log_fd = None
        if delete and self.log_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
