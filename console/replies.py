"""The console reads its terminal's replies as replies, never as keys.

A terminal answers some requests with a control string: a title report (`ESC ] l … ESC \\`), an OSC 52 or
XTGETTCAP answer. Textual's input parser types every byte of a string it does not know as a key, so a reply
whose text an agent chose (its output set the title, then asked for it back) pressed the console's keys:
`q` quit it, `a` allowed an ask (fresh round 14 b). A control string that arrives whole in one read is a
terminal's reply — no keyboard sends one — so it is dropped before Textual parses the read; keys, pastes
and the sequences Textual knows (CSI: cursor reports, mouse, focus, bracketed paste) are read as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from textual._xterm_parser import XTermParser

# OSC, DCS, APC, PM and SOS, in 7-bit and C1 spellings, up to the BEL or ST that ends them.
_REPLY = re.compile("(?:\x1b[\\]P_^X]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)")


def without_replies(data: str) -> str:
    """`data` (one read of the console's input) without the control strings it holds whole."""
    return _REPLY.sub("", data) if ("\x1b" in data or not data.isascii()) else data


def install() -> None:
    """Every XTermParser of this process (the terminal's and the web driver's) reads without replies."""
    feed: Callable[[XTermParser, str], Iterable[Any]] = XTermParser.feed
    if getattr(feed, "drops_replies", False):
        return

    def read(self: XTermParser, data: str) -> Iterable[Any]:
        return feed(self, without_replies(data))

    read.drops_replies = True  # type: ignore[attr-defined]
    XTermParser.feed = read  # type: ignore[method-assign]
