"""The streamed log reads give exactly what reading the whole log gave: the same lines, text and bytes."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from engine.sessions import logread
from engine.sessions.logframes import spool_bytes, spool_text
from engine.sessions.logread import cleaned, last_chars, lines_window, log_range, log_text
from engine.sessions.outtext import sanitize


def _whole_lines(text: str, offset: int | None, limit: int | None, tail: int) -> tuple[str, int]:
    """`process log`'s slicing as it was, on the whole text (the reference)."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    total = len(lines)
    if offset is None and limit is None:
        chosen = lines[max(0, total - tail) :]
    elif offset is None:
        chosen = lines[max(0, total - limit) :] if limit and limit > 0 else []  # type: ignore[operator]
    elif limit is None:
        chosen = lines[max(0, offset) :]
    else:
        start = max(0, offset)
        chosen = lines[start : start + max(0, limit)]
    return "\n".join(chosen), total


ALPHABET = [
    "a",
    "b",
    "\n",
    "\r",
    "\r\n",
    "\x1b",
    "\x1b[",
    "\x1b]",
    "\x1b\\",
    "\x07",
    "m",
    "0",
    ";",
    "é",
    "\x01",
]


def _text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(size))


def _pieces(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("seed", range(60))
def test_lines_window_matches_the_whole_text(seed: int) -> None:
    rng = random.Random(seed)
    text = _text(rng, rng.randint(0, 300))
    for offset, limit in [(None, None), (None, 3), (None, 0), (2, None), (1, 4), (0, 0), (500, 2), (3, 1)]:
        assert lines_window(_pieces(rng, text), offset, limit, 5) == _whole_lines(text, offset, limit, 5)


@pytest.mark.parametrize("seed", range(60))
def test_cleaned_pieces_match_sanitize_of_the_whole(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logread, "_PIECE", 7)  # many cuts, each at a different place in the sequences
    rng = random.Random(seed)
    text = _text(rng, rng.randint(0, 400))
    assert "".join(cleaned(_pieces(rng, text))) == sanitize(text)


def _log(path: Path, frames: list[tuple[int, bytes]]) -> None:
    with open(path, "wb") as fh:
        for stream, data in frames:
            fh.write(bytes((stream,)) + len(data).to_bytes(4, "big") + data)
        fh.write(b"\x00\x00\x00")  # a torn last frame: left out


@pytest.mark.parametrize("seed", range(20))
def test_log_reads_match_the_whole_file(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logread, "_READ", 5)  # frames read in several reads, characters split across them
    rng = random.Random(seed)
    raw = "".join(rng.choice(["a", "é", "😀", "\n", "b"]) for _ in range(200)).encode()
    frames, pos = [], 0
    while pos < len(raw):
        step = rng.randint(1, 17)
        frames.append((rng.choice([0, 1, 2]), raw[pos : pos + step]))
        pos += step
    path = tmp_path / "s.log"
    _log(path, frames)
    whole, text = spool_bytes(path), spool_text(path)
    assert "".join(log_text(path)) == text
    assert last_chars(log_text(path), 33) == text[-33:]
    for offset, limit in [(None, 10), (None, None), (0, 7), (5, 50), (400, 3), (3, None), (None, 0)]:
        start, data = log_range(path, offset, limit)
        if offset is None:
            keep = len(whole) if limit is None else min(len(whole), limit)
            assert (start, data) == (len(whole) - keep, whole[len(whole) - keep :])
        else:
            body = whole[offset:]
            assert (start, data) == (offset, body if limit is None else body[:limit])
