"""A child's fds on the event loop, for every launcher: batched reads, back-pressure or direct delivery to a
consumer, non-blocking writes."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
from collections import deque
from collections.abc import Callable

READ_SIZE = 1024 * 1024
# Once a command has printed this much, a read that drained the pipe waits BATCH_SEC before the next
# one, so a flood arrives in few large chunks (toad's read coalescing) while short output stays instant.
FLOOD_BYTES = 1024 * 1024
BATCH_SEC = 0.001
# ...but only while the writer is slow enough that the pause (a timer fires late: PAUSE_SPAN) fills at
# most PAUSE_FILL of the pipe: a full pipe stops the writer, and the flood would go at the pause's pace.
PAUSE_SPAN = 0.0015
PAUSE_FILL = 0.75
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
# Reads pause above this many unconsumed bytes, so a stalled consumer throttles the child, not our memory.
HIGH_WATER = 4 * 1024 * 1024

Sink = Callable[[str, bytes], None]

_local = threading.local()


def pause_fits(size: int, since: float, pipe_size: int) -> bool:
    """Whether a flood pause leaves the writer room: `size` bytes came in the last `since` seconds, and
    at that pace a pause must fill at most PAUSE_FILL of the pipe (0 = size unknown: pause)."""
    return not pipe_size or size * PAUSE_SPAN < pipe_size * PAUSE_FILL * since


def _read_buffer() -> memoryview:
    """This thread's read buffer: reads land in it, and only what they brought is copied out. A fresh
    1 MiB object per read would cost an allocation (often mmap, page faults, a shrink) per read."""
    view: memoryview | None = getattr(_local, "view", None)
    if view is None:
        view = _local.view = memoryview(bytearray(READ_SIZE))
    return view


class FdReader:
    """Several non-blocking fds read into one ordered queue of (stream name, bytes) chunks.

    `coalesce` enables the flood pause (pipes only: a PTY buffers a few KiB, and pausing would stall the
    writer instead). Fds in `keep_open` (a PTY master still used for input and resize) are not closed at
    EOF; `on_eof` runs once every fd has reached EOF. `stream_to` replaces the queue with a callback.
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
        self._pipe_sizes: dict[int, int] = {}  # fd -> capacity, for the fds that are pipes
        self._last_read: dict[int, float] = {}
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None

    def add(self, fd: int, name: str) -> None:
        os.set_blocking(fd, False)
        self._names[fd] = name
        self._open.add(fd)
        with contextlib.suppress(OSError):  # not a pipe (a PTY master, a socket): no size
            self._pipe_sizes[fd] = fcntl.fcntl(fd, F_GETPIPE_SZ)
        self._loop.add_reader(fd, self._on_readable, fd)

    @property
    def open(self) -> bool:
        return bool(self._open)

    def _on_readable(self, fd: int) -> None:
        # Drain what is there now (a PTY hands out ~4 KiB per read): fewer loop turns per MiB. A pipe is
        # empty once a read comes back short, so it takes no second read to learn that.
        view = _read_buffer()
        size, eof = 0, False
        pipe = fd in self._pipe_sizes
        while size < READ_SIZE:
            want = READ_SIZE - size
            try:
                got = os.readv(fd, [view[size:]])
            except BlockingIOError:
                break
            except OSError:  # EIO: the PTY slave has no holder left
                got = 0
            if not got:
                eof = True
                break
            size += got
            if pipe and got < want:
                break
        if size:
            data = view[:size].tobytes()
            if self._sink is not None:
                if not self._deliver(self._names[fd], data):
                    return
            else:
                self._chunks.append((self._names[fd], data))
                self._buffered += size
                if self._buffered > HIGH_WATER and not self._paused:
                    self._paused = True
                    for open_fd in self._open:
                        self._loop.remove_reader(open_fd)
        if eof:
            self._eof(fd)
            return
        if not size:
            return
        self._bytes_read += size
        if self._coalesce:
            now = self._loop.time()
            since = now - self._last_read.get(fd, now)
            self._last_read[fd] = now
            if (
                size < READ_SIZE
                and self._bytes_read > FLOOD_BYTES
                and not self._paused
                and pause_fits(size, since, self._pipe_sizes.get(fd, 0))
            ):
                self._loop.remove_reader(fd)
                self._loop.call_later(BATCH_SEC, self._resume, fd)
        self._wake()

    def _deliver(self, stream: str, data: bytes) -> bool:
        assert self._sink is not None
        try:
            self._sink(stream, data)
        except BaseException as exc:  # the consumer failed: stop reading (as a pump task would), say why
            self._sink = None
            self._paused = True
            for open_fd in self._open:
                self._loop.remove_reader(open_fd)
            if self._done is not None and not self._done.done():
                self._done.set_exception(exc)
            return False
        return True

    def stream_to(self, sink: Sink) -> asyncio.Future[None]:
        """Hand every chunk to `sink` as it is read (what is queued first), instead of queueing it: a
        flood then costs no task switch per chunk. The future is done once every fd is at EOF or `close`
        was called, or fails with what `sink` raised (reading stops then)."""
        self._done = self._loop.create_future()
        self._sink = sink
        while self._chunks:
            stream, data = self._chunks.popleft()
            self._buffered -= len(data)
            if not self._deliver(stream, data):
                return self._done
        if self._paused:
            self._paused = False
            for fd in self._open:
                self._loop.add_reader(fd, self._on_readable, fd)
        if not self._open:
            self._done.set_result(None)
        return self._done

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
        if not self._open and self._done is not None and not self._done.done():
            self._done.set_result(None)

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
