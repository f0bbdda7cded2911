"""A child's fds on the event loop, for every launcher: batched reads, back-pressure, non-blocking writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Callable

READ_SIZE = 1024 * 1024
# Once a command has printed this much, a read that drained the pipe waits BATCH_SEC before the next
# one, so a flood arrives in few large chunks (toad's read coalescing) while short output stays instant.
FLOOD_BYTES = 1024 * 1024
BATCH_SEC = 0.001
# Reads pause above this many unconsumed bytes, so a stalled consumer throttles the child, not our memory.
HIGH_WATER = 4 * 1024 * 1024


class FdReader:
    """Several non-blocking fds read into one ordered queue of (stream name, bytes) chunks.

    `coalesce` enables the flood pause (pipes only: a PTY buffers a few KiB, and pausing would stall the
    writer instead). Fds in `keep_open` (a PTY master still used for input and resize) are not closed at
    EOF; `on_eof` runs once every fd has reached EOF.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        coalesce: bool = False,
        keep_open: frozenset[int] = frozenset(),
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        self._loop = loop
        self._coalesce = coalesce
        self._keep = keep_open
        self.on_eof = on_eof
        self._names: dict[int, str] = {}
        self._open: set[int] = set()
        self._chunks: deque[tuple[str, bytes]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._buffered = 0
        self._paused = False
        self._bytes_read = 0
        self._closed = False

    def add(self, fd: int, name: str) -> None:
        os.set_blocking(fd, False)
        self._names[fd] = name
        self._open.add(fd)
        self._loop.add_reader(fd, self._on_readable, fd)

    @property
    def open(self) -> bool:
        return bool(self._open)

    def _on_readable(self, fd: int) -> None:
        # Drain what is there now (a PTY hands out ~4 KiB per read): fewer loop turns per MiB.
        parts: list[bytes] = []
        size, eof = 0, False
        while size < READ_SIZE:
            try:
                data = os.read(fd, READ_SIZE - size)
            except BlockingIOError:
                break
            except OSError:  # EIO: the PTY slave has no holder left
                data = b""
            if not data:
                eof = True
                break
            parts.append(data)
            size += len(data)
        if parts:
            self._chunks.append((self._names[fd], parts[0] if len(parts) == 1 else b"".join(parts)))
            self._buffered += size
            if self._buffered > HIGH_WATER and not self._paused:
                self._paused = True
                for open_fd in self._open:
                    self._loop.remove_reader(open_fd)
        if eof:
            self._eof(fd)
            return
        if not parts:
            return
        self._bytes_read += size
        if self._coalesce and size < READ_SIZE and self._bytes_read > FLOOD_BYTES and not self._paused:
            self._loop.remove_reader(fd)
            self._loop.call_later(BATCH_SEC, self._resume, fd)
        self._wake()

    def _resume(self, fd: int) -> None:
        if fd in self._open and not self._paused and not self._closed:
            self._loop.add_reader(fd, self._on_readable, fd)

    def _eof(self, fd: int) -> None:
        self._loop.remove_reader(fd)
        self._open.discard(fd)
        if fd not in self._keep:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake()
        if not self._open and self.on_eof is not None:
            self.on_eof()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> tuple[str, bytes] | None:
        """The next chunk (same-stream chunks that piled up are joined); None once every fd is at EOF."""
        while not self._chunks:
            if not self._open:
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        stream, data = self._chunks.popleft()
        if self._chunks and self._chunks[0][0] == stream:
            parts, size = [data], len(data)
            while self._chunks and self._chunks[0][0] == stream and size < READ_SIZE:
                size += len(self._chunks[0][1])
                parts.append(self._chunks.popleft()[1])
            data = b"".join(parts)
        self._buffered -= len(data)
        if self._paused and self._buffered < HIGH_WATER // 2:
            self._paused = False
            for fd in self._open:
                self._loop.add_reader(fd, self._on_readable, fd)
        return stream, data

    def close(self) -> None:
        """Stop reading and close every fd not in keep_open (on_eof runs if any was still open); a pending
        read() then returns None."""
        if self._closed:
            return
        self._closed = True
        had_open = bool(self._open)
        for fd in list(self._open):
            self._loop.remove_reader(fd)
            if fd not in self._keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._open.clear()
        self._wake()
        if had_open and self.on_eof is not None:
            self.on_eof()


async def write_all(loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
    """Write all of `data` to a non-blocking fd, waiting for writability instead of spinning."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, lambda f=ready: f.done() or f.set_result(None))  # type: ignore[misc]
            try:
                await ready
            finally:
                loop.remove_writer(fd)
