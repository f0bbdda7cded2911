"""Agent-supplied text made safe to show a human: every control, bidi and invisible character visible.

A command is approved by what the operator reads. `touch x #\\x1b[30Dls -la` draws as `ls -la` on a
terminal, a bidi override reorders what follows it, a zero-width space hides a difference, an OSC sequence
retitles the window. Every surface that shows agent text (console, `events`, `process`, the CLI) goes
through `visible`, and `warnings` says loudly when a command holds anything that would not show as itself.
"""

from __future__ import annotations

import functools
import unicodedata

LINE_MARK = "⏎"

# What draws as itself, an allow-list: printable ASCII, and beyond it only characters of these blocks
# (common scripts, punctuation, symbols, CJK, emoji) whose category says they take a glyph of their own.
# Everything else is escaped, whatever Unicode adds next: combining and variation marks (U+034F, U+180B,
# U+E0100), format and default-ignorable characters, every space but ' ', fillers that draw as a blank
# (U+3164, U+FFA0, braille blank U+2800 sits outside every range below), right-to-left letters (they
# reorder what surrounds them), controls.
_DRAWN_BLOCKS = (
    (0x00A1, 0x024F),  # Latin-1 Supplement, Latin Extended-A/B
    (0x0370, 0x052F),  # Greek, Cyrillic
    (0x1E00, 0x1FFF),  # Latin Extended Additional, Greek Extended
    (0x2010, 0x205E),  # dashes, quotes, bullets, ellipsis
    (0x20A0, 0x20C0),  # currency
    (0x2100, 0x27BF),  # letterlike, number forms, arrows, maths, technical, box drawing, shapes, dingbats
    (0x27C0, 0x27FF),  # maths
    (0x2900, 0x2BFF),  # arrows, maths, symbols (not braille 2800-28FF)
    (0x3001, 0x30FF),  # CJK punctuation, hiragana, katakana (not the ideographic space U+3000)
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables (not the jamo fillers)
    (0xFF01, 0xFF60),  # fullwidth forms (not the halfwidth filler U+FFA0)
    (0x1F300, 0x1FAFF),  # emoji and pictographs
)
_DRAWN_CATEGORIES = frozenset(
    (
        "Lu",
        "Ll",
        "Lt",
        "Lm",
        "Lo",
        "Nd",
        "Nl",
        "No",
        "Pc",
        "Pd",
        "Ps",
        "Pe",
        "Pi",
        "Pf",
        "Po",
        "Sm",
        "Sc",
        "Sk",
        "So",
    )
)
_NAMED = {"\t": "\\t", "\r": "\\r", "\x1b": "\\x1b", "\x00": "\\0"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@functools.lru_cache(maxsize=4096)
def _hidden(ch: str) -> bool:
    """Whether `ch` may not draw as itself: anything outside the allow-list above."""
    if " " <= ch <= "~":
        return False
    code = ord(ch)
    return not (
        any(low <= code <= high for low, high in _DRAWN_BLOCKS)
        and unicodedata.category(ch) in _DRAWN_CATEGORIES
        and unicodedata.bidirectional(ch) not in ("R", "AL", "AN", "RLE", "RLO", "RLI", "NSM")
    )


ONE_LINE = f" {LINE_MARK} "
MARKED_LINES = f"{LINE_MARK}\n"
REPORT = "\n"


def visible(text: object, *, newline: str = ONE_LINE, tabs: bool = False) -> str:
    """`text` with every character that would not draw as itself written as an escape (`\\x1b`, `\\u202e`).

    Newlines become `newline`: ` ⏎ ` in a one-line cell, `⏎` and a real break in a command's detail (a
    second line never passes for part of the first), a plain break in a report we assembled ourselves.
    `tabs` keeps tabs (command output in a report: a tab only moves the cursor right)."""
    s = str(text)
    if s.isascii() and s.isprintable():
        return s
    bad = {ch for ch in set(s) if _hidden(ch)} - ({"\n", "\t"} if tabs else {"\n"})
    if bad:
        s = "".join(_escape(ch) if ch in bad else ch for ch in s)
    return s.replace("\n", newline)


def warnings(command: str) -> list[str]:
    """What about `command` would mislead a reader of it, worst first; empty when it shows as itself."""
    found: list[str] = []
    if "\x1b" in command:
        found.append("holds terminal escape sequences (shown as \\x1b): a terminal would draw something else")
    others = {ch for ch in command if ch not in "\n\x1b" and _hidden(ch)}
    if any(unicodedata.category(ch) != "Cc" for ch in others):
        found.append(
            "holds characters that may not draw as themselves (invisible, combining, bidi-reordering, blank"
            " or look-alike space; shown as \\uXXXX)"
        )
    if any(not ch.isascii() and not _hidden(ch) for ch in command):
        found.append(
            "holds non-ASCII letters or symbols: a look-alike (Cyrillic а for Latin a) names another file"
        )
    if any(unicodedata.category(ch) == "Cc" for ch in others):
        found.append("holds control characters (shown as \\xNN)")
    breaks = command.count("\n")
    if breaks:
        found.append(f"spans {breaks + 1} lines (⏎ marks each break): every line runs")
    return found


def node_label(name: object, node_id: object, *, detail: bool = True) -> str:
    """A node as the operator knows it: its configured name, with the id it proved on its link in the
    detail (`build (7b721d06-…)`); the id alone only when no name is known (an ask from before names)."""
    shown = visible(name) if name else ""
    ident = visible(node_id) if node_id else ""
    if not shown:
        return ident or "?"
    return f"{shown} ({ident})" if detail and ident else shown
