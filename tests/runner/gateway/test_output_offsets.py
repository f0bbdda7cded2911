"""`session.output` frames carry byte offsets; they must describe the text they travel with, including after a
`replace` decode (issue 33 §4): a character split across chunks, an invalid byte, a replay that ended inside
a frame. The gateway's real frame builder and the console's real router."""

from __future__ import annotations

from console.gateway import OutputRouter
from engine.sessions.outtext import TextDecoder, output_frame

# "a€" split inside the euro sign, then two invalid bytes, then "é" split across the last two chunks.
CHUNKS = [b"a\xe2\x82", b"\xac\xff\xffb", b"c\xc3", b"\xa9d"]
RAW = b"".join(CHUNKS)


def frames() -> list[dict[str, object]]:
    decoder, offset, out = TextDecoder(), 0, []
    for piece in CHUNKS:
        out.append(output_frame("s1", "stdout", decoder, piece, offset))
        offset += len(piece)
    return out


def test_every_frame_is_the_decode_of_the_bytes_its_offsets_name() -> None:
    got = frames()
    for frame in got:
        start, end = frame["offset"], frame["nextOffset"]
        assert isinstance(start, int) and isinstance(end, int)
        assert frame["data"] == RAW[start:end].decode("utf-8", "replace"), frame
    assert [(f["offset"], f["nextOffset"]) for f in got] == [(0, 1), (1, 7), (7, 8), (8, 11)]
    assert "".join(str(f["data"]) for f in got) == RAW.decode("utf-8", "replace")


def test_a_replay_that_ended_inside_a_frame_shows_each_byte_once() -> None:
    """The console lines frames up with what a replay showed (`since`, a raw byte offset). Re-encoding a
    replacement character gives 3 bytes for the 1 it stands for: the pane showed garbage or lost text."""
    for since in range(len(RAW) + 1):
        router = OutputRouter()
        router.show("s1")
        router.replayed("s1", since)
        for frame in frames():
            start, end = frame["offset"], frame["nextOffset"]
            assert isinstance(start, int) and isinstance(end, int)
            router.feed("s1", str(frame["data"]), start, end)
        text, reread = router.drain()
        if reread:
            continue  # the pane re-reads the log from `since`: exact by construction
        assert text == RAW[since:].decode("utf-8", "replace"), since


def old_client_rule(pieces: list[tuple[int, str]], since: int) -> str:
    """What frames and the console did before: a frame carried its piece's start offset only, and the
    client found the end by re-encoding the text, cutting the overlap with a replay by those bytes."""
    parts = []
    for offset, text in pieces:
        raw = text.encode("utf-8", "surrogatepass")
        if offset + len(raw) <= since:
            continue
        parts.append(raw[max(0, since - offset) :].decode("utf-8", "replace"))
    return "".join(parts)


def test_the_old_frames_stopped_matching_after_a_replace_decode() -> None:
    """The old rule shows bytes twice, or garbage, wherever the replay ended after the first split
    character (this is why frames carry the range of their text). The router today, handed such frames
    (a peer older than nextOffset), re-reads instead of guessing: never wrong."""
    wrong = []
    for since in range(len(RAW) + 1):
        decoder, offset, pieces = TextDecoder(), 0, []
        for piece in CHUNKS:
            pieces.append((offset, decoder.feed(piece)))
            offset += len(piece)
        if old_client_rule(pieces, since) != RAW[since:].decode("utf-8", "replace"):
            wrong.append(since)
        router = OutputRouter()
        router.show("s1")
        router.replayed("s1", since)
        for start, text in pieces:
            router.feed("s1", text, start)
        shown, reread = router.drain()
        assert reread or shown == RAW[since:].decode("utf-8", "replace"), since
    assert wrong == list(range(2, len(RAW) + 1))
