"""Capture fast paths (issue 19): ASCII chunks skip the decoder, reads reuse one buffer, chunks go straight
to a consumer, and the flood pause never outruns the pipe. Each must change nothing anyone can see."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sessions import fdreader
from engine.sessions.fdreader import FdReader, pause_fits
from engine.sessions.output import SessionOutput
from engine.sessions.outtext import TextDecoder
from engine.sessions.textviews import OutputBuffer

# Pieces a flood is made of: plain ASCII, text split mid-character, bytes that are not UTF-8, escapes.
PIECES = st.sampled_from(
    [b"x" * 7, b"line\n", "é".encode(), "日本".encode(), b"\xe6", b"\x97\xa5", b"\xff", b"\x1b[31m", b"\r\n"]
)


class Decoded(SessionOutput):
    """Every chunk through the decoder: what the ASCII path must be indistinguishable from."""

    def append_bytes(self, stream: str, data: bytes, decoder: TextDecoder) -> None:
        self.append(stream, decoder.feed(data))


def _feed(buffer: SessionOutput, chunks: list[tuple[str, bytes]]) -> None:
    for stream, data in chunks:
        buffer.feed(stream, data)
    buffer.finish()


def _views(buffer: SessionOutput) -> tuple[object, ...]:
    log = buffer.log_path.read_bytes() if buffer.log_path is not None and buffer.log_path.exists() else None
    return (
        buffer.total_chars,
        buffer.dropped,
        buffer.text(),
        buffer.aggregated(),
        buffer.tail(),
        buffer.streams(),
        buffer.full_text_sync(),
        buffer.log_bytes,
        buffer.log_chars,
        buffer.log_capped,
        log,
        buffer.drain(),
    )


@settings(max_examples=150, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(
            st.sampled_from(["stdout", "stderr"]),
            st.lists(PIECES, min_size=1, max_size=12).map(b"".join),
        ),
        max_size=25,
    ),
    log_cap=st.sampled_from([40, 200, 1 << 20]),
)
def test_append_bytes_keeps_every_view_of_decoding_each_chunk(
    tmp_path_factory: pytest.TempPathFactory, chunks: list[tuple[str, bytes]], log_cap: int
) -> None:
    """The ASCII path (log written as the bytes, only the kept tail decoded) against the decoder's, with
    caps small enough that rings drop, logs spill and cap, and chunks outgrow every view."""
    views = []
    for fast in (False, True):
        directory = tmp_path_factory.mktemp("log")
        kind = SessionOutput if fast else Decoded
        buffer = kind(directory / "s.log", log_cap=log_cap, ring_chars=30, pending_chars=11, split_chars=17)
        _feed(buffer, chunks)
        views.append(_views(buffer))
        buffer.close()
    assert views[0] == views[1]


def test_a_long_ascii_chunk_counts_what_the_views_never_decoded(tmp_path: Path) -> None:
    buffer = SessionOutput(tmp_path / "s.log", ring_chars=10, pending_chars=4)
    buffer.feed("stdout", b"a" * 95 + b"0123456789")
    assert (buffer.total_chars, buffer.dropped, buffer.text()) == (105, 95, "0123456789")
    assert buffer.drain() == ("6789", "", 101)
    # The log holds the raw bytes, framed as the session host's spool: stream 0, length 105.
    framed = b"\x00" + (105).to_bytes(4, "big") + b"a" * 95 + b"0123456789"
    assert (tmp_path / "s.log").read_bytes() == framed


def test_a_split_character_takes_the_decoder_path_even_when_the_rest_is_ascii() -> None:
    buffer = OutputBuffer()
    decoder = TextDecoder()
    buffer.append_bytes("stdout", "é".encode()[:1], decoder)
    assert decoder.holds_partial()
    buffer.append_bytes("stdout", b"\xa9 ok", decoder)
    assert buffer.text() == "é ok" and not decoder.holds_partial()


def test_the_pause_only_fits_writers_that_cannot_fill_the_pipe_in_one() -> None:
    pipe = 1024 * 1024
    assert pause_fits(64 * 1024, 0.001, pipe)  # 64 MB/s: a pause fills a tenth of the pipe
    assert not pause_fits(pipe, 0.0011, pipe)  # the pipe filled during the last pause
    assert not pause_fits(50 * 1024, 0.00005, pipe)  # ~1 GB/s between two reads
    assert not pause_fits(10, 0.0, pipe)  # no gap measured yet
    assert pause_fits(pipe, 0.0, 0)  # not a pipe (size unknown): pause as before


async def _reader_on_pipe() -> tuple[FdReader, int, asyncio.Future[None]]:
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    eof: asyncio.Future[None] = loop.create_future()
    reader = FdReader(loop, coalesce=True, on_eof=lambda: eof.done() or eof.set_result(None))
    reader.add(r, "stdout")
    return reader, w, eof


async def _until(predicate: object, turns: int = 2000) -> None:
    for _ in range(turns):
        if callable(predicate) and predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


async def test_stream_to_hands_queued_chunks_first_then_live_ones_and_ends_at_eof() -> None:
    reader, w, _ = await _reader_on_pipe()
    os.write(w, b"queued")
    await _until(lambda: reader._chunks)  # read into the queue before anyone consumes
    got: list[tuple[str, bytes]] = []
    done = reader.stream_to(lambda stream, data: got.append((stream, data)))
    assert got == [("stdout", b"queued")]
    os.write(w, b"live")
    await _until(lambda: len(got) == 2)
    os.close(w)
    await asyncio.wait_for(done, 10)
    assert got == [("stdout", b"queued"), ("stdout", b"live")]


async def test_chunks_from_the_reused_read_buffer_stay_as_they_were_read() -> None:
    """The read buffer is reused by every read: what a consumer kept must not change with the next."""
    reader, w, _ = await _reader_on_pipe()
    got: list[bytes] = []
    done = reader.stream_to(lambda stream, data: got.append(data))
    for count, piece in enumerate((b"A" * 5000, b"B" * 3000, b"C" * 10), 1):
        os.write(w, piece)
        await _until(lambda count=count: len(got) == count)  # type: ignore[misc]
    os.close(w)
    await asyncio.wait_for(done, 10)
    assert got == [b"A" * 5000, b"B" * 3000, b"C" * 10]
    assert all(type(chunk) is bytes for chunk in got)


async def test_a_failing_consumer_stops_the_reads_and_its_error_reaches_the_waiter() -> None:
    reader, w, _ = await _reader_on_pipe()
    calls: list[bytes] = []

    def sink(stream: str, data: bytes) -> None:
        calls.append(data)
        raise ValueError("consumer broke")

    done = reader.stream_to(sink)
    os.write(w, b"first")
    with pytest.raises(ValueError, match="consumer broke"):
        await asyncio.wait_for(done, 10)
    os.write(w, b"second")
    await asyncio.sleep(0.05)
    assert calls == [b"first"]
    reader.close()
    os.close(w)


async def test_close_ends_a_stream_to_wait() -> None:
    reader, w, eof = await _reader_on_pipe()
    done = reader.stream_to(lambda stream, data: None)
    reader.close()
    await asyncio.wait_for(done, 10)
    assert eof.done()
    os.close(w)


async def test_a_flood_through_stream_to_arrives_whole_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past FLOOD_BYTES the pause rule decides per read; whatever it decides, no byte is lost or moved."""
    monkeypatch.setattr(fdreader, "FLOOD_BYTES", 0)
    loop = asyncio.get_running_loop()
    fd, w = os.pipe()
    script = "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"
    proc = subprocess.Popen(["/bin/sh", "-c", script], stdout=w)
    os.close(w)
    reader = FdReader(loop, coalesce=True)
    reader.add(fd, "stdout")
    parts: list[bytes] = []
    await asyncio.wait_for(reader.stream_to(lambda stream, data: parts.append(data)), 30)
    assert proc.wait() == 0
    assert b"".join(parts) == b"".join(f"line-{i}\n".encode() for i in range(3000))
