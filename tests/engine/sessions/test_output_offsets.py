"""One output model (issue 33 §4): a session's offsets count raw bytes everywhere, and the text that travels
with a range is the decode of exactly those bytes — `sessions.output` reads and `session.output` frames
alike — after a `replace` decode of invalid UTF-8 split across chunks, and across a gateway restart that
adopts the session from the session host's spool."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from engine.sessions import LocalLauncher, RunSpec, SessionManager
from engine.sessions.host import HOLDERS_DIR, HostLauncher
from engine.sessions.output import SessionOutput
from engine.sessions.outtext import OutputSlice, TextDecoder, output_frame
from tests.helpers.gateway import wait_until

# "a€" split inside the euro sign, two invalid bytes, "é" split across chunks, then a 4-byte emoji cut
# twice, then a lone continuation byte.
CHUNKS = [b"a\xe2\x82", b"\xac\xff\xffb", b"c\xc3", b"\xa9d", b"\xf0\x9f", b"\x98", b"\x80\x80z"]
RAW = b"".join(CHUNKS)
WHOLE = RAW.decode("utf-8", "replace")


def fed(*, end: bool) -> SessionOutput:
    out = SessionOutput(None)
    for piece in CHUNKS:
        out.feed("stdout", piece)
    if end:
        out.finish()
        out.end()
    return out


def octal(piece: bytes) -> str:
    return "".join(f"\\{b:03o}" for b in piece)


def exact(got: OutputSlice) -> None:
    assert got.text == RAW[got.offset : got.next_offset].decode("utf-8", "replace"), got


def read_on(out: SessionOutput, offset: int, limit: int | None = None) -> str:
    """Read from `offset` to the end, `limit` bytes at a time, as a pane polling by nextOffset does."""
    parts = []
    while offset < out.offset:
        got = out.read(offset, limit)
        exact(got)
        assert got.offset == offset and got.next_offset >= offset
        if got.next_offset == offset:  # only an incomplete character is left
            break
        parts.append(got.text)
        offset = got.next_offset
    return "".join(parts)


def test_sessions_output_reads_are_the_exact_decode_of_their_range() -> None:
    out = fed(end=True)
    assert out.offset == len(RAW)
    for start in range(len(RAW) + 1):
        for limit in (None, 4, 5, 7):  # a window of at least one character's bytes
            assert read_on(out, start, limit) == RAW[start:].decode("utf-8", "replace"), (start, limit)
        for limit in (1, 2, 3):  # a smaller one still moves on (each read exact), cut characters aside
            read_on(out, start, limit)
    # A tail read (no offset) starts at a character: a window cutting one leaves its bytes out.
    for limit in range(len(RAW) + 1):
        got = out.read(None, limit)
        exact(got)
        assert got.next_offset == len(RAW) and got.offset >= len(RAW) - limit
        assert WHOLE.endswith(got.text) or got.offset == len(RAW) - limit


def test_a_running_session_leaves_an_incomplete_character_for_the_next_read() -> None:
    out = SessionOutput(None)
    out.feed("stdout", b"x\xe2\x82")
    got = out.read(0)
    assert (got.offset, got.next_offset, got.text) == (0, 1, "x")  # not "x\ufffd": two bytes still wait
    out.feed("stdout", b"\xac")
    got = out.read(got.next_offset)
    assert (got.offset, got.next_offset, got.text) == (1, 4, "€")
    out.feed("stdout", b"\xf0")
    out.finish()
    out.end()
    got = out.read(4)  # nothing more will come: the incomplete byte is shown as what it is
    assert (got.offset, got.next_offset, got.text) == (4, 5, "\ufffd")


def test_frames_from_any_start_offset_name_the_bytes_of_their_text() -> None:
    """A forwarder starts where a viewer subscribed (maybe inside a character): every frame's range is
    the bytes its text decodes from, and a pane that showed a read up to any offset lines them up."""
    for start in range(len(CHUNKS)):
        decoder, offset, frames = TextDecoder(), sum(map(len, CHUNKS[:start])), []
        for piece in CHUNKS[start:]:
            frames.append(output_frame("s1", "stdout", decoder, piece, offset))
            offset += len(piece)
        for frame in frames:
            begin, end = frame["offset"], frame["nextOffset"]
            assert frame["data"] == RAW[begin:end].decode("utf-8", "replace"), frame
        ranges = [(f["offset"], f["nextOffset"]) for f in frames]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # contiguous


def test_the_text_views_decode_what_the_offsets_count() -> None:
    out = fed(end=True)
    assert out.text() == WHOLE.replace("\x00", "")
    assert out.read(0).text == WHOLE


def test_a_settled_session_reads_the_same_bytes_at_the_same_offsets(tmp_path: Path) -> None:
    """Settling (the bytes on disk, memory let go) changes no read: before, a settled session was read
    from its sanitized text, so a terminal's escapes vanished and every offset after them moved."""
    out = SessionOutput(tmp_path / "s.log")
    for piece in CHUNKS:
        out.feed("stdout", piece)
    out.feed("stderr", b"\x1b[31mred\x1b[0m\r\n")
    out.finish()
    out.end()
    raw = RAW + b"\x1b[31mred\x1b[0m\r\n"

    def every_read() -> list[OutputSlice]:
        return [out.read(o) for o in range(len(raw) + 1)] + [out.read(None, n) for n in range(len(raw) + 1)]

    reads = every_read()
    views = (out.aggregated(), out.tail(), out.full_text_sync(), out.total_chars)
    assert out.settle()
    out.compact()
    assert out.settled and not out.raw.replay()  # memory let go: read from disk
    assert every_read() == reads
    assert out.read(0).text == raw.decode("utf-8", "replace")
    assert (out.aggregated(), out.tail(), out.full_text_sync(), out.total_chars) == views
    viewer = out.subscribe()
    assert viewer.get_nowait() is not None and viewer.closed


async def test_offsets_and_text_are_the_same_after_the_session_is_adopted(state_dir: Path) -> None:
    """A gateway restart: the next one adopts the running session from the host's spool (byte 0 onwards).
    Its reads at every offset, and frames replayed to a new viewer, are what the first gateway gave."""
    from engine.sessions.adopt import adopt_held

    holders = state_dir / HOLDERS_DIR
    first = HostLauncher(holders, fallback=LocalLauncher())
    manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=first)
    assert await first.connect() is not None, first.problem
    second: HostLauncher | None = None
    adopted: SessionManager | None = None
    try:
        # One printf per stdin line: each chunk reaches the gateway before the next is written.
        steps = "".join(f"read x; printf '{octal(piece)}'; " for piece in CHUNKS)
        res = await manager.run(RunSpec(command=steps + "read x", background=True, scope_key="s"))
        sid = str(res.details["sessionId"])
        session = manager.registry.get(sid)
        assert session is not None and session.handle is not None
        written = 0
        for piece in CHUNKS:
            await session.handle.write(b"\n")
            written += len(piece)
            await wait_until(lambda n=written: session.output.offset == n)  # type: ignore[misc]
        before = {o: manager.registry.get(sid).output.read(o) for o in range(len(RAW) + 1)}  # type: ignore[union-attr]
        for got in before.values():
            exact(got)
        assert read_on(session.output, 0) == WHOLE  # nothing incomplete is left at the end

        second = HostLauncher(holders, fallback=LocalLauncher())
        assert await second.connect() is not None  # the host serves the newest gateway
        await asyncio.wait_for(session.done.wait(), 30)
        adopted = SessionManager(state_dir, kill_grace_sec=1.0, launcher=second)
        [again] = await adopt_held(adopted, second)
        assert again.id == sid
        await wait_until(lambda: again.output.offset == len(RAW))
        after = {o: again.output.read(o) for o in range(len(RAW) + 1)}
        assert after == before
        viewer = again.output.subscribe(replay=True)
        decoder, offset, text = TextDecoder(), 0, []
        while (chunk := viewer.get_nowait()) is not None:
            frame = output_frame(sid, chunk.stream, decoder, chunk.data, offset)
            assert frame["data"] == RAW[frame["offset"] : frame["nextOffset"]].decode("utf-8", "replace")
            text.append(frame["data"])
            offset += len(chunk.data)
        assert offset == len(RAW) and "".join(text) == RAW.decode("utf-8", "replace")
        assert again.handle is not None
        await again.handle.write(b"\n")  # its last read: it ends
        await asyncio.wait_for(again.done.wait(), 30)
        assert again.output.read(0).text == WHOLE
    finally:
        if adopted is not None:
            await adopted.close()
        await manager.close()
        if second is not None:
            await second.close()
        await first.close()
