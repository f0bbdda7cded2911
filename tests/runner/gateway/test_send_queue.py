"""One client's outgoing queue: capped in bytes, not frames, and one ask's `approval.updated` events merged
(issue 27: a flood of small events cut a pausing console off by frame count, far under the byte caps)."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from engine.protocol.frames import Event, Hello
from engine.protocol.methods import EventName
from runner.gateway.connection import TRANSPORT_BUFFER_BYTES, Connection


async def test_updates_of_one_ask_are_merged_and_small_frames_never_cut_a_client_off() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    _, writer = await asyncio.open_unix_connection(sock=ours)
    closed: list[Connection] = []
    conn = Connection(writer, Hello(token="t", client="console"), 0, on_close=closed.append)
    try:
        # The client pauses: fill the socket and the transport's buffer so what follows waits in the queue.
        pad = "x" * 4096
        while writer.transport.get_write_buffer_size() <= TRANSPORT_BUFFER_BYTES:
            conn.send(Event(event=EventName.SYSTEM_EVENT, data={"text": pad}))
        conn.send(Event(event=EventName.SYSTEM_EVENT, data={"text": pad}))  # this one waits in the queue
        assert conn._queue.qsize() >= 1
        queued = conn._queue.qsize()
        for count in range(1, 5001):  # one ask joined 5,000 times: one queued update, the latest
            conn.send(Event(event=EventName.APPROVAL_UPDATED, data={"id": "ask-1", "count": count}))
        assert conn._queue.qsize() == queued + 1
        for i in range(3000):  # 3,000 small frames of other asks: more frames than the old cap's 2,048
            conn.send(Event(event=EventName.APPROVAL_UPDATED, data={"id": f"other-{i}", "count": 1}))
        assert not conn.closed and not closed, "a pausing client was cut off under the byte caps"
        # The client reads again: ask-1's update arrives once, with the latest count.
        got = b""
        loop = asyncio.get_running_loop()
        while b'"other-2999"' not in got:
            got += await asyncio.wait_for(loop.sock_recv(theirs, 1 << 16), 10)
        updates = [
            json.loads(line)["data"]
            for line in got.split(b"\n")
            if b'"approval.updated"' in line and b'"ask-1"' in line
        ]
        assert updates == [{"id": "ask-1", "count": 5000}]
    finally:
        conn.abort(hard=True)
        theirs.close()


async def test_a_gap_in_shed_output_is_told_before_the_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output shed for a client that does not read, then the session's exit: the gap marker goes out before
    `session.exited`, never shed itself (a reader stopping at the exit took what it got for everything)."""
    import runner.gateway.connection as connection

    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    _, writer = await asyncio.open_unix_connection(sock=ours)
    conn = Connection(writer, Hello(token="t", client="console"), 0, on_close=lambda _c: None)
    monkeypatch.setattr(connection, "EVENT_DROP_BYTES", 32 * 1024)
    try:
        pad = "x" * 16384
        offset = 0
        for _ in range(200):  # far past the socket, the transport and the shed threshold
            data = {"sessionId": "s", "offset": offset, "data": pad}
            conn.send(Event(event=EventName.SESSION_OUTPUT, data=data))
            offset += len(pad)
        assert conn.shed_output.get("s") is not None  # some output was shed
        conn.send(Event(event=EventName.SESSION_EXITED, data={"sessionId": "s", "exitCode": 0}))
        got, loop = b"", asyncio.get_running_loop()
        while b'"session.exited"' not in got:
            got += await asyncio.wait_for(loop.sock_recv(theirs, 1 << 16), 10)
        events = [json.loads(line) for line in got.split(b"\n") if line.strip()]
        kinds = [(e["event"], bool(e["data"].get("dropped"))) for e in events]
        assert ("session.output", True) in kinds
        assert kinds.index(("session.output", True)) < kinds.index(("session.exited", False))
    finally:
        conn.abort(hard=True)
        theirs.close()
