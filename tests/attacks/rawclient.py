"""A control-socket client that writes JSON lines itself and reads only when told: what an attacker's
connection that never reads looks like."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from engine.protocol.frames import read_token


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.next_id = 0

    @classmethod
    async def open(
        cls, state: Path, path: Path | None = None, **hello: Any
    ) -> tuple[RawClient, dict[str, Any]]:
        """Connect and say hello (gateway token unless given); the gateway's first frame back."""
        reader, writer = await asyncio.open_unix_connection(
            str(path or state / "gateway.sock"), limit=1 << 21
        )
        client = cls(reader, writer)
        hello.setdefault("token", read_token(state))
        await client.send({"type": "hello", "version": 1, "client": "raw", **hello})
        first = json.loads(await asyncio.wait_for(reader.readline(), 30))
        client.reading(False)  # from now on nothing leaves the socket's kernel buffer unless told
        return client, first

    def reading(self, on: bool) -> None:
        transport = self.writer.transport
        assert isinstance(transport, asyncio.ReadTransport)
        transport.resume_reading() if on else transport.pause_reading()

    async def send(self, frame: dict[str, Any]) -> None:
        self.writer.write(json.dumps(frame).encode() + b"\n")
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    async def request(self, method: str, params: dict[str, Any]) -> None:
        """Send a request and do not wait for (or read) its answer."""
        self.next_id += 1
        await self.send({"type": "req", "id": self.next_id, "method": method, "params": params})

    async def burst(self, method: str, params: dict[str, Any], count: int) -> None:
        """`count` requests in one write, answers never read: the gateway reads them in one go, so it has
        started them all before any answer is queued (sent one at a time, it may pause reading first, and
        what it owes then depends on how the kernel split them)."""
        frames = []
        for _ in range(count):
            self.next_id += 1
            frames.append(json.dumps({"type": "req", "id": self.next_id, "method": method, "params": params}))
        self.writer.write(("\n".join(frames) + "\n").encode())
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()

    def close(self) -> None:
        self.writer.transport.abort()
