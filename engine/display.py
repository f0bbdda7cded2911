"""Agent-supplied text made safe to show a human: every control, bidi and invisible character visible.

A command is approved by what the operator reads. `touch x #\\x1b[30Dls -la` draws as `ls -la` on a
terminal, a bidi override reorders what follows it, a zero-width space hides a difference, an OSC sequence
retitles the window. Every surface that shows agent text (console, `events`, `process`, the CLI) goes
through `visible`, and `warnings` says loudly when a command holds anything that would not show as itself.
"""

from __future__ import annotations

import re
import unicodedata

LINE_MARK = "⏎"

# C0 (newline handled apart), DEL, C1, and the Unicode format/separator characters that reorder or hide
# text: bidi embeddings/overrides/isolates, zero-width joiners, BOM, line/paragraph separators, soft hyphen.
_HIDDEN = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f\ud800-\udfff]"
)
_HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp", "Co")
_NAMED = {"\t": "\\t", "\r": "\\r", "\x1b": "\\x1b", "\x00": "\\0"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    """Also every space but ' ': `rm\\xa0-rf` looks like two words and is one."""
    category = unicodedata.category(ch)
    return bool(_HIDDEN.match(ch)) or category in _HIDDEN_CATEGORIES or (category == "Zs" and ch != " ")


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
    s = _HIDDEN.sub(lambda m: m.group() if tabs and m.group() == "\t" else _escape(m.group()), s)
    if not s.replace("\n", "").isprintable():  # categories the table above misses (newer Unicode)
        s = "".join(_escape(ch) if ch not in "\n\t" and _hidden(ch) else ch for ch in s)
    return s.replace("\n", newline)


def warnings(command: str) -> list[str]:
    """What about `command` would mislead a reader of it, worst first; empty when it shows as itself."""
    found: list[str] = []
    if "\x1b" in command:
        found.append("holds terminal escape sequences (shown as \\x1b): a terminal would draw something else")
    others = {ch for ch in command if ch not in "\n\x1b" and _hidden(ch)}
    if any(unicodedata.category(ch)[0] in "CZ" and unicodedata.category(ch) != "Cc" for ch in others):
        found.append("holds invisible, bidi-reordering or look-alike space characters (shown as \\uXXXX)")
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
