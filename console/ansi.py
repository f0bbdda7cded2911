"""Untrusted session output made safe to show: `\\r` overwrite, SGR colour kept, nothing else but text."""

from __future__ import annotations

import re
from functools import lru_cache

from rich.style import Style
from rich.text import Text

from engine import termtext

_C0 = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def sanitize(text: str) -> str:
    """Keep printable text, tabs, `\r` and SGR colour; drop every other sequence, in its 7-bit and its
    C1 spelling, and every character that does not draw (engine.termtext: what is kept is named)."""
    return termtext.line_view(text)


def plain(text: str) -> str:
    return _SGR.sub("", text)


class LineAssembler:
    """Turns a stream of raw chunks into complete sanitised lines; `\\r` restarts the current line.

    The unfinished tail stays raw so an escape sequence split across two reads is parsed whole.
    """

    def __init__(self) -> None:
        self._partial = ""

    @property
    def partial(self) -> str:
        return _overwrite(sanitize(termtext.finished(self._partial)))

    def feed(self, chunk: str) -> list[str]:
        text = self._partial + chunk
        parts = text.split("\n")
        self._partial = parts.pop()
        if len(self._partial) > 65_536:  # a never-ending line: show it in pieces
            parts.append(self._partial)
            self._partial = ""
        if text.isascii() and "\x1b" not in text and not _C0.search(text):
            # Plain output (the common case): nothing to strip, so no regex runs per line.
            return [_overwrite(p) for p in parts] if "\r" in text else parts
        return [_overwrite(sanitize(p)) for p in parts]


def _overwrite(line: str) -> str:
    """`10%\\r100%` shows `100%`: the last carriage-return segment wins (a trailing `\\r` is CRLF)."""
    if "\r" not in line:
        return line
    segments = [s for s in line.split("\r") if s]
    return segments[-1] if segments else ""


@lru_cache(maxsize=4096)
def to_text(line: str) -> Text:
    """Lazy ANSI: only lines on screen are parsed (≈60 µs each), and the result is cached."""
    if "\x1b" not in line:
        return Text(line.expandtabs(8))
    text = Text.from_ansi(line)
    text.expand_tabs(8)  # after parsing: escape bytes must not count towards tab stops
    return text


# pyte colour names → Rich; pyte says "brown" for yellow and "bright<name>" for the aixterm range.
def pyte_color(name: str) -> str | None:
    if name == "default":
        return None
    if len(name) == 6 and all(c in "0123456789abcdefABCDEF" for c in name):
        return "#" + name
    name = name.replace("brown", "yellow")
    if name.startswith("bright"):
        return "bright_" + name[len("bright") :]
    return name


@lru_cache(maxsize=1024)
def pyte_style(
    fg: str, bg: str, bold: bool, italics: bool, underscore: bool, strikethrough: bool, reverse: bool
) -> Style:
    return Style(
        color=pyte_color(fg),
        bgcolor=pyte_color(bg),
        bold=bold or None,
        italic=italics or None,
        underline=underscore or None,
        strike=strikethrough or None,
        reverse=reverse or None,
    )
