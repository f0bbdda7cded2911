"""Agent output made safe for a human's terminal: one reading of escape sequences, and what may pass.

Session output is the agent's bytes, and a terminal executes some of them: a cursor move draws over an
ask, OSC 52 writes the operator's clipboard, OSC 8 hides a link, a title changes, a report types into the
console. A list of bad sequences misses the next spelling (fresh round 14 b: the UTF-8 C1 forms U+009B
CSI and U+009D OSC passed every ESC-shaped filter). So what passes is chosen from what is allowed —
printable characters, the few C0 controls text needs, escape sequences by name — in their 7-bit and C1
spellings alike, read as a terminal reads them; everything else is dropped whole.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

# A terminal reads a C1 control as its 7-bit ESC form (U+009B is ESC [), so both are read as one.
_SEVEN_BIT = {
    0x90: "\x1bP",
    0x98: "\x1bX",
    0x9B: "\x1b[",
    0x9C: "\x1b\\",
    0x9D: "\x1b]",
    0x9E: "\x1b^",
    0x9F: "\x1b_",
}
# A terminal's reading (ECMA-48, as xterm and VTE parse it): CSI with its parameters, intermediates and
# final; a control string (OSC, DCS, SOS, PM, APC) up to BEL or ST, or to the CAN, SUB or ESC that cuts
# it short; any other ESC sequence; a lone ESC.
_SEQ = re.compile(
    r"\x1b(?:\[(?P<params>[0-?]*)(?P<mid>[ -/]*)(?P<final>[@-~])"
    r"|[\]P_^X][^\x07\x18\x1a\x1b]*(?:\x07|\x1b\\)?"
    r"|(?P<esc>[ -/]*[0-~]))?"
)
# The start of a sequence still arriving at the end of a chunk (a stream keeps it for the next one).
_UNFINISHED = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|[\]P_^X][^\x07\x18\x1a\x1b]*|[ -/]*)\Z")
_ENDS_STRING = "\x07\x18\x1a\x1b"
_STRING_END = re.compile(r"\x07|\x1b\\|[\x18\x1a\x1b]")
_HELD_MAX = 4096  # a control string longer than this is dropped as it comes, not held

TEXT_CONTROLS = "\t\n\r"  # what text keeps of C0
TERMINAL_CONTROLS = "\t\n\r\b\x07"  # and what a terminal gets besides: newline, backspace, bell

# CSI finals a full-screen program needs (cursor, erase, insert/delete, scroll region, modes, SGR, device
# status and attributes, whose answers go to the program): not `t` (window operations: resize, iconify,
# report the title), `i` (media copy to a printer), or anything unnamed.
_CSI_FINALS = frozenset("@ABCDEFGHIJKLMPSTXZ`abcdefghlmnqrsu")
_CSI_WITH_MID = frozenset({(" ", "q"), ("!", "p")})  # cursor style; soft reset
# Two-character ESC sequences: save/restore cursor, keypad modes, index, reverse index, next line, tab set,
# full reset, and the G0-G3 character sets (line drawing).
_ESC_ALLOWED = frozenset(
    ["7", "8", "=", ">", "D", "E", "H", "M", "c"] + [f"{g}{s}" for g in "()*+" for s in "0AB"]
)
# What a terminal model (pyte, the console's session pane) puts back on the console's screen from the
# same reading: the SGR of a line view.
_SGR = re.compile(r"[0-9;:]*")


def drawn(text: str) -> bool:
    """Whether every character draws (Unicode printable, or a space of another width): no control, format
    character (bidi, zero-width), line or paragraph separator, surrogate or unassigned code point."""
    return text.isprintable() or all(ch.isprintable() or unicodedata.category(ch) == "Zs" for ch in text)


def printable(text: str, controls: str = TEXT_CONTROLS) -> str:
    """`text` with only what draws, and of the controls only `controls`."""
    if text.isascii():
        return text.translate(_deleted(controls))
    inline = controls.replace("\n", "")
    probe = text
    for control in controls:
        probe = probe.replace(control, "")
    if probe.isprintable():  # most output: a few passes in C over the whole text
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.isprintable():  # most lines: one pass in C
            continue
        probe = line
        for control in inline:
            probe = probe.replace(control, "")
        if not probe.isprintable():
            lines[i] = "".join(ch for ch in line if ch in inline or drawn(ch))
    return "\n".join(lines) if "\n" in controls else "".join(lines)


@functools.lru_cache(maxsize=8)
def _deleted(controls: str) -> dict[int, None]:
    return {c: None for c in (*range(0x20), 0x7F) if chr(c) not in controls}


def finished(text: str) -> str:
    """`text` without the start of a sequence still arriving at its end."""
    text = _seven_bit(text)
    tail = _UNFINISHED.search(text)
    return text if tail is None else text[: tail.start()]


def plain(text: str) -> str:
    """Every escape sequence dropped whole, and only what draws: what an agent or a text view reads."""
    return _rebuilt(text, "", TEXT_CONTROLS)


def line_view(text: str) -> str:
    """A line of output for a line view: printable text, tabs and `\\r`, and SGR colour (in its 7-bit
    form); every other sequence dropped whole."""

    def kept(m: re.Match[str]) -> str:
        if m.group("final") == "m" and not m.group("mid") and _SGR.fullmatch(m.group("params") or ""):
            return f"\x1b[{m.group('params')}m"
        return ""

    return _rebuilt(text, kept, TEXT_CONTROLS)


def _for_terminal(m: re.Match[str]) -> str:
    final = m.group("final")
    if final is not None:
        mid = m.group("mid")
        if (not mid and final in _CSI_FINALS) or (mid, final) in _CSI_WITH_MID:
            return f"\x1b[{m.group('params')}{mid}{final}"
        return ""
    esc = m.group("esc")
    return f"\x1b{esc}" if esc in _ESC_ALLOWED else ""


def _seven_bit(text: str) -> str:
    if text.isascii() or not any(chr(c1) in text for c1 in _SEVEN_BIT):
        return text
    return text.translate(_SEVEN_BIT)


def _rebuilt(text: str, kept: Callable[[re.Match[str]], str] | str, controls: str) -> str:
    """`text` read as a terminal reads it: only what draws and `controls` kept of the text, and each
    sequence replaced by what `kept` makes of it (an ESC in the result is always one `kept` wrote)."""
    # BEL, CAN and SUB end a control string: kept until the sequences are read, then only if allowed
    text = printable(_seven_bit(text), controls + _ENDS_STRING)
    if "\x1b" in text:
        text = _SEQ.sub(kept, text)
    if any(end in text for end in _ENDS_STRING[:-1] if end not in controls):
        text = text.translate(_deleted(controls + "\x1b"))  # an ESC here is one `kept` wrote
    return text


class TerminalFilter:
    """The bytes of a session an operator attached to, as text, for the operator's own terminal: what a
    full-screen program needs passes (`_CSI_FINALS`, `_ESC_ALLOWED`, text and TERMINAL_CONTROLS); control
    strings (OSC titles, clipboard and links, DCS, APC, PM, SOS), window operations, printer passthrough,
    C1 controls and every unnamed sequence are dropped whole. A sequence split between chunks is read
    whole: its start is held for the next chunk."""

    def __init__(self) -> None:
        self._held = ""
        self._in_string = False  # inside a control string too long to hold: dropped up to its end

    def feed(self, text: str) -> str:
        text = _seven_bit(text)
        if self._in_string:
            end = _STRING_END.search(text)
            if end is None:
                return ""
            self._in_string = False
            text = text[end.end() if end.group() not in ("\x18", "\x1a", "\x1b") else end.start() :]
        text = self._held + text
        self._held = ""
        tail = _UNFINISHED.search(text)
        if tail is not None:
            held = text[tail.start() :]
            text = text[: tail.start()]
            if len(held) <= _HELD_MAX:
                self._held = held
            else:  # only a control string grows this long: drop it as it comes
                self._in_string = True
        return _rebuilt(text, _for_terminal, TERMINAL_CONTROLS)
