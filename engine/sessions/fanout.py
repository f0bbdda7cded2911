"""Raw output for terminal viewers: a replay buffer for late ones, a bounded queue each that never blocks."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

RAW_REPLAY_BYTES = 256 * 1024
VIEWER_QUEUE_BYTES = 1024 * 1024


_NO_REPLAY: deque[OutputChunk] = deque()  # a settled session's replay buffer: none (read from disk)


@dataclass(frozen=True)
class OutputChunk:
    """Raw output for a viewer: stream stdout|stderr|pty, or `gap` (`dropped` bytes this viewer missed)."""

    stream: str
    data: bytes
    dropped: int = 0


def merge(batch: list[OutputChunk]) -> list[tuple[str, bytes, int]]:
    """Adjacent chunks of one stream joined (fewer frames); gaps kept as ("gap", b"", dropped)."""
    out: list[tuple[str, bytes, int]] = []
    for chunk in batch:
        if chunk.dropped:
            out.append(("gap", b"", chunk.dropped))
        elif out and out[-1][0] == chunk.stream and not out[-1][2]:
            out[-1] = (chunk.stream, out[-1][1] + chunk.data, 0)
        else:
            out.append((chunk.stream, chunk.data, 0))
    return out


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
        self._ranged: Callable[[int | None, int | None], tuple[int, bytes]] | None = None

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

    def settle(
        self,
        raw: Callable[[], bytes],
        ranged: Callable[[int | None, int | None], tuple[int, bytes]] | None = None,
    ) -> None:
        """The session ended and its bytes are on disk: late viewers and panes read `raw()` (every byte,
        at the same offsets) instead of a replay buffer, which goes."""
        self._replay = _NO_REPLAY
        self._replay_bytes = 0
        self._replay_cap = 0
        self.viewers = []
        self._settled = raw
        self._ranged = ranged  # (offset, limit) -> (start, bytes): reads only those bytes

    def read(self, offset: int | None = None, limit: int | None = None) -> tuple[int, bytes, int]:
        """Raw bytes still held from `offset` (None: the last `limit` bytes): (start, data, bytes dropped).

        Offsets count every raw byte the session printed, so a pane can resume where it left off;
        `dropped` says how much of what it asked for is no longer held.
        """
        if self._ranged is not None:  # settled: the bytes asked for, from disk
            start, data = self._ranged(offset, limit)
            return start, data, 0
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
