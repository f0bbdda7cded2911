"""The console reads a terminal's reply as a reply, never as keys (console/replies.py, fresh round 14 b)."""

from __future__ import annotations

from console.replies import without_replies


def test_the_consoles_input_reads_a_terminals_reply_as_a_reply_and_keys_as_keys() -> None:
    """console.replies: a control string whole in one read is dropped before Textual parses it; a key,
    an arrow, a mouse report and an alt+] typed alone read as before."""
    assert without_replies("6\x1b]lq\x1b\\") == "6"
    assert without_replies("\x9dl q\x9cx\x1bP1+r544e\x1b\\y\x1b]52;c;cQ==\x07") == "xy"
    for keys in ("q", "a", "\x1b[A", "\x1b[<0;3;4M", "\x1b]", "\x1b", "é"):
        assert without_replies(keys) == keys
