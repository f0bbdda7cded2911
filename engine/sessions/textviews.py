"""The text views of a session's output: the ring, the poll buffers, stdout and stderr apart, the tail."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path

from engine.sessions.logframes import spool_text
from engine.sessions.logread import last_chars, log_text
from engine.sessions.outtext import TextDecoder, sanitize, truncation_marker

RING_CHARS = 200_000
PENDING_CHARS = 30_000
TAIL_CHARS = 2_000


class _Chunks:
    """A deque of strings capped at `cap` chars that drops its oldest chars and counts them."""

    __slots__ = ("cap", "chunks", "dropped", "length")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: deque[str] = deque()
        self.length = 0
        self.dropped = 0

    def append(self, text: str, skipped: int = 0) -> None:
        """Add `text`; `skipped` chars came before it that were never decoded (only when `text` alone
        fills the cap, so they would be dropped at once anyway)."""
        if len(text) >= self.cap:
            self.dropped += self.length + skipped + len(text) - self.cap
            self.chunks.clear()
            text = text[-self.cap :]
            self.chunks.append(text)
            self.length = len(text)
            return
        self.chunks.append(text)
        self.length += len(text)
        excess = self.length - self.cap
        while excess > 0:
            first = self.chunks[0]
            if len(first) <= excess:
                self.chunks.popleft()
                cut = len(first)
            else:
                self.chunks[0] = first[excess:]
                cut = excess
            self.length -= cut
            self.dropped += cut
            excess -= cut

    def text(self) -> str:
        if len(self.chunks) > 1:
            joined = "".join(self.chunks)
            self.chunks = deque((joined,))
        return self.chunks[0] if self.chunks else ""

    def last(self, n: int) -> str:
        parts: list[str] = []
        size = 0
        for chunk in reversed(self.chunks):
            parts.append(chunk)
            size += len(chunk)
            if size >= n:
                break
        return "".join(reversed(parts))[-n:]

    def clear(self) -> None:
        self.chunks.clear()
        self.length = 0
        self.dropped = 0


# A settled buffer's (empty) poll buffers: one pair for all of them (nothing is appended after the end).
_NO_PENDING = {"stdout": _Chunks(0), "stderr": _Chunks(0)}
_NO_RING = _Chunks(0)


class OutputBuffer:
    """Text views of a session's output: a 200k-char ring, per-stream poll buffers, stdout and stderr apart
    (when asked), and once settled a tail. The bytes they are made of, and the disk log, are the
    `SessionOutput`'s (below); a settled view reads its text back from there."""

    def __init__(
        self,
        *,
        ring_chars: int = RING_CHARS,
        pending_chars: int = PENDING_CHARS,
        session_id: str | None = None,
        terminal: bool = False,
        split_chars: int = 0,
    ) -> None:
        self.session_id = session_id
        self.terminal = terminal
        self.ring = _Chunks(ring_chars)
        self._ring_cap = ring_chars
        # Whole stdout and stderr apart (the last `split_chars` of each), for callers whose answer keeps
        # them apart (a node's system.run); off by default: the ring keeps them merged, in order.
        self.split = {"stdout": _Chunks(split_chars), "stderr": _Chunks(split_chars)} if split_chars else None
        self.pending = {"stdout": _Chunks(pending_chars), "stderr": _Chunks(pending_chars)}
        self._total_chars = 0
        # Settled: the session ended and its text is on disk; memory keeps only its tail.
        self.settled = False
        self._settled_dropped = 0
        self._tail = ""
        # Settled from a session host's spool (`settle_spool`): the text is decoded from it when first
        # needed, and only its length and tail are kept.
        self._spool: Path | None = None
        self._unread_spool = False
        # The most chars any view keeps: the text of a longer ASCII chunk is decoded from its tail only.
        self._keep = max(ring_chars, pending_chars, split_chars)

    @property
    def total_chars(self) -> int:
        if self._unread_spool:
            self._read_spool_summary()
        return self._total_chars

    @total_chars.setter
    def total_chars(self, value: int) -> None:
        self._total_chars = value

    def settle_spool(self, spool: Path) -> None:
        """A session that ended and was reported before this gateway started (adopted): settled as it
        comes, its text in the session host's spool; nothing is read until a view needs it."""
        self._spool = spool
        self._unread_spool = True
        self._let_go()

    def _read_spool_summary(self) -> None:
        self._unread_spool = False
        total = 0

        def counted() -> Iterator[str]:
            nonlocal total
            for piece in self._settled_pieces():
                total += len(piece)
                yield piece

        self._tail = last_chars(counted(), TAIL_CHARS)
        self._total_chars = total
        self._settled_dropped = max(0, total - self._ring_cap)

    @property
    def dropped(self) -> int:
        if self._unread_spool:
            self._read_spool_summary()
        return self._settled_dropped if self.settled else self.ring.dropped

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def _let_go(self) -> None:
        """Settled: the views' buffers go (the unread poll buffers stay, if anything is unread)."""
        self.ring = _NO_RING
        self.split = None
        if not self.has_pending():
            self.pending = _NO_PENDING
        self.settled = True

    def _settled_text(self) -> str:
        """A settled buffer's whole text, from its spool ("" when it has none)."""
        return spool_text(self._spool) if self._spool is not None else ""

    def _settled_pieces(self) -> Iterator[str]:
        """A settled buffer's text in pieces, read from disk as they are used (bounded memory)."""
        return log_text(self._spool) if self._spool is not None else iter(())

    def append(self, stream: str, text: str) -> None:
        if not text:
            return
        self._total_chars += len(text)
        self.ring.append(text)
        self.pending["stderr" if stream == "stderr" else "stdout"].append(text)
        if self.split is not None:
            self.split["stderr" if stream == "stderr" else "stdout"].append(text)

    def append_bytes(self, stream: str, data: bytes, decoder: TextDecoder) -> None:
        """`append(stream, decoder.feed(data))`, without decoding what no view keeps.

        A flood is mostly ASCII, where text and UTF-8 are the same bytes: only the last chars the views
        keep are decoded (the rest would be dropped at once). Anything else (or a character split across
        chunks) goes through the decoder.
        """
        size = len(data)
        if not size:
            return
        if not data.isascii() or decoder.holds_partial():
            self.append(stream, decoder.feed(data))
            return
        self._total_chars += size
        skipped = max(0, size - self._keep)
        text = (data[skipped:] if skipped else data).decode("ascii")
        self.ring.append(text, skipped)
        self.pending["stderr" if stream == "stderr" else "stdout"].append(text, skipped)
        if self.split is not None:
            self.split["stderr" if stream == "stderr" else "stdout"].append(text, skipped)

    def has_pending(self) -> bool:
        return self.pending["stdout"].length > 0 or self.pending["stderr"].length > 0

    def drain(self) -> tuple[str, str, int]:
        """Undelivered stdout, stderr and how many chars overflowed the poll buffers since the last drain."""
        out, err = self.pending["stdout"], self.pending["stderr"]
        result = (self._clean(out.text()), self._clean(err.text()), out.dropped + err.dropped)
        out.clear()
        err.clear()
        return result

    def _clean(self, text: str) -> str:
        return sanitize(text, terminal=self.terminal)

    def text(self) -> str:
        if self.settled:
            return self._clean(last_chars(self._settled_pieces(), self._ring_cap))
        return self._clean(self.ring.text())

    def aggregated(self) -> str:
        body = self.text()
        return truncation_marker(self.dropped, self.session_id) + body if self.dropped else body

    def streams(self) -> tuple[str, str, bool] | None:
        """(stdout, stderr, truncated) kept apart, when this buffer was asked to (`split_chars`)."""
        if self.split is None:
            return None
        out, err = self.split["stdout"], self.split["stderr"]
        return self._clean(out.text()), self._clean(err.text()), bool(out.dropped or err.dropped)

    def tail(self, n: int = TAIL_CHARS) -> str:
        if self._unread_spool:
            self._read_spool_summary()
        if self.settled:
            held = n <= len(self._tail) or len(self._tail) >= self._total_chars  # (or it is all there is)
            return self._clean(self._tail[-n:] if held else last_chars(self._settled_pieces(), n))
        return self._clean(self.ring.last(n))

    def full_text_sync(self) -> str:
        if self.settled:
            return self._clean(self._settled_text())
        return self.aggregated()
