"""Lines from an ssh channel with a ceiling, so a node that never sends a newline cannot grow the gateway."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.nodes.wire import MAX_LINE, WireError

if TYPE_CHECKING:
    import asyncssh


class LineReader:
    """Lines from a channel with a ceiling: asyncssh's readline has none, and a node that never sends a
    newline must not grow the gateway's memory without bound."""

    def __init__(self, stream: asyncssh.SSHReader[bytes], limit: int = MAX_LINE) -> None:
        self._stream = stream
        self._limit = limit
        self._buf = bytearray()

    async def readline(self) -> bytes:
        """One line with its newline; b"" at end of stream; WireError past the limit."""
        while True:
            cut = self._buf.find(b"\n")
            if cut >= 0:
                line = bytes(self._buf[: cut + 1])
                del self._buf[: cut + 1]
                return line
            if len(self._buf) > self._limit:
                raise WireError(f"frame longer than {self._limit} bytes")
            chunk = await self._stream.read(256 * 1024)
            if not chunk:
                rest = bytes(self._buf)
                self._buf.clear()
                return rest
            self._buf += chunk
