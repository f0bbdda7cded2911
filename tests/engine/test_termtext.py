"""What of an agent's output reaches a human's terminal (engine.termtext): only what is named passes, in the
7-bit and the C1 spelling alike, and a sequence split between chunks is read whole (fresh round 14 b)."""

from __future__ import annotations

import re

import pyte
from hypothesis import given
from hypothesis import strategies as st

from engine import termtext
from engine.termtext import TerminalFilter, line_view, plain

# Every ESC that leaves: a named sequence, nothing else (the filter's promise, read back independently).
_ALLOWED_OUT = re.compile(r"\x1b(?:\[[0-?]*(?:[@-HJ-MPST`X-Zabcdefghlmnqrsu]| q|!p)|[78=>DEHMc]|[()*+][0AB])")


def _only_allowed(out: str) -> None:
    rest = _ALLOWED_OUT.sub("", out)
    assert "\x1b" not in rest, repr(out)
    assert all(ch in termtext.TERMINAL_CONTROLS or termtext.drawn(ch) for ch in rest), repr(out)


def test_c1_spellings_are_read_as_their_escape_forms() -> None:
    hostile = "ok \x9b3;1HFAKE \x9d2;PWNED\x9c \x9d52;c;cm0gLXJmIH4K\x9c end"
    assert plain(hostile) == "ok FAKE   end"
    assert line_view(hostile) == "ok FAKE   end"
    assert TerminalFilter().feed(hostile) == "ok \x1b[3;1HFAKE   end"  # a cursor move is a terminal's own


def test_a_terminal_gets_what_a_full_screen_program_needs_and_no_string_or_window_operation() -> None:
    text = (
        "\x1b[?1049h\x1b[2J\x1b[H\x1b[1;31mred\x1b[0m\x1b(0q\x1b(B\x1b7\x1b8\x1b[6n\x1b[ q"  # kept
        "\x1b]0;title\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\x1bP+q544e\x1b\\"  # OSC, DCS: dropped
        "\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\\x1b[21t\x1b[8;1;1t\x1b[5i\x1b[$p\x1bZ\x1b#8"
    )
    out = TerminalFilter().feed(text)
    assert out == "\x1b[?1049h\x1b[2J\x1b[H\x1b[1;31mred\x1b[0m\x1b(0q\x1b(B\x1b7\x1b8\x1b[6n\x1b[ qlink"
    _only_allowed(out)


def test_a_sequence_split_at_every_point_is_read_whole() -> None:
    text = "a\x1b]52;c;cm0=\x07b\x1b[31mc\x9b2Jd\x1b]0;t\x1b\\e\x9d0;x\x9cf"
    whole = TerminalFilter().feed(text)
    assert whole == "ab\x1b[31mc\x1b[2Jdef"
    for cut in range(len(text) + 1):
        screen = TerminalFilter()
        assert screen.feed(text[:cut]) + screen.feed(text[cut:]) == whole, cut


def test_a_control_string_too_long_to_hold_is_dropped_as_it_comes() -> None:
    screen = TerminalFilter()
    parts = [screen.feed("x\x1b]52;c;" + "A" * 10_000), screen.feed("B" * 100), screen.feed("C\x07y")]
    assert "".join(parts) == "xy"
    assert (
        screen.feed("\x1b]0;" + "A" * 10_000) == "" and screen.feed("\x1b[1mz") == "\x1b[1mz"
    )  # ESC cuts it


def test_text_views_keep_text_and_lines_and_nothing_that_does_not_draw() -> None:
    assert (
        plain("a\tb\r\nc\x07d\x00e\x7ff\u202eg\u200bh\u2028i\x85j\u00a0k日本\n")
        == "a\tb\r\ncdefghij\u00a0k日本\n"
    )
    assert line_view("x\x1b[32mgreen\x1b[0m\x1b[1;1H\x1b[38:5:1m!") == "x\x1b[32mgreen\x1b[0m\x1b[38:5:1m!"


def test_what_passes_leaves_a_terminal_model_where_the_text_put_it() -> None:
    """Fed to pyte (a terminal that honours C1): no title, and the cursor only where allowed moves put it."""
    screen = pyte.Screen(40, 5)
    pyte.Stream(screen).feed(line_view("ok \x9b3;1HFAKE \x9d2;PWNED\x9c\x1b]2;X\x07 end"))
    assert (
        screen.title == "" and screen.display[0].startswith("ok FAKE  end") and not screen.display[2].strip()
    )


@given(st.lists(st.sampled_from(["a", "é", "\x1b", "\x9b", "\x9d", "\x9c", "[", "]", "\\", "\x07", "\x18",
                                 "0", ";", "?", "1", "m", "t", "H", "P", "_", "^", " ", "q", "\n", "\u202e",
                                 "\x85", "c", "(", "B", "\r", "\b"]), max_size=40),
       st.integers(min_value=0, max_value=40))  # fmt: skip
def test_whatever_the_agent_writes_only_named_sequences_and_drawn_text_leave(
    parts: list[str], cut: int
) -> None:
    text = "".join(parts)
    screen = TerminalFilter()
    _only_allowed(screen.feed(text[:cut]) + screen.feed(text[cut:]))
    assert all(ch in "\t\n\r" or termtext.drawn(ch) for ch in plain(text)), repr(text)
    view = re.sub(r"\x1b\[[0-9;:]*m", "", line_view(text))
    assert all(ch in "\t\n\r" or termtext.drawn(ch) for ch in view), repr(text)
