"""engine.display.visible escapes by an allow-list: a character is shown as itself only when it is known
to draw as itself; anything Unicode has or adds that hides, combines, reorders or draws blank is escaped."""

from __future__ import annotations

import unicodedata

import pytest

from engine.display import visible, warnings

# Each draws as nothing, as a blank, or reorders its neighbours; none is in categories C/Z.
_HIDING = [
    "\u034f",  # combining grapheme joiner
    "\u0301",  # combining acute: `s.sh\u0301` draws as s.sh with an accent on h, or nothing
    "\u17b4",  # Khmer inherent vowel (default-ignorable)
    "\u17b5",
    "\u180b",  # Mongolian free variation selector
    "\U000e0100",  # variation selector supplement
    "\u2800",  # braille blank
    "\uffa0",  # halfwidth Hangul filler
    "\u3164",  # Hangul filler
    "\u115f",
    "\u05d0",  # Hebrew alef: right-to-left, reorders what follows on a bidi terminal
    "\u0627",  # Arabic alef
    "\u0660",  # Arabic-Indic digit zero (bidi AN)
    "\U0001d173",  # musical symbol begin beam (format, default-ignorable)
    "\u3000",  # ideographic space
]


@pytest.mark.parametrize("char", _HIDING, ids=[f"U+{ord(c):04X}" for c in _HIDING])
def test_a_character_that_may_not_draw_as_itself_is_escaped(char: str) -> None:
    shown = visible(f"sh s.sh{char}")
    assert char not in shown
    assert shown.startswith("sh s.sh\\")
    assert warnings(f"sh s.sh{char}"), unicodedata.name(char, "?")


def test_an_unassigned_code_point_is_escaped_whatever_unicode_gives_it_later() -> None:
    unassigned = next(chr(c) for c in range(0x0870, 0x10FFFF) if unicodedata.category(chr(c)) == "Cn")
    assert unassigned not in visible(f"x{unassigned}")


@pytest.mark.parametrize("text", ["café", "naïve λ", "Привет", "日本語", "한국어", "→ ≤ €", "🙂"])
def test_common_scripts_and_symbols_show_as_themselves(text: str) -> None:
    assert visible(text) == text


def test_a_look_alike_letter_draws_as_itself_but_is_warned_about() -> None:
    command = "sh \u0455.sh"  # Cyrillic dze: looks like `sh s.sh`
    assert visible(command) == command
    assert any("look-alike" in w for w in warnings(command))
    assert warnings("sh s.sh") == []
