"""Text read from the OS that is not UTF-8 (a path decoded with surrogateescape) in one exact, showable form.

Python reads a file name that is not UTF-8 (`mkdir $'\\xff'`, which any run of an agent can make) as a str
holding lone surrogates (U+DC80..U+DCFF, one per byte). No UTF-8 file, log line or wire frame can carry
one, so a record holding it fails every encoder that meets it (the operator's inbox, the pending journal,
the decision log). `shown` is the one form such text takes once it enters a record: the bytes as bash's
ANSI-C quoting writes them, `$'/w/\\xff/p'` (a byte that is not UTF-8 as `\\xNN`, a backslash as `\\\\`, a
quote as `\\'`). It is valid UTF-8, shows as itself, names the real bytes exactly (paste it into a shell),
and `exact` reads it back. Text with no lone surrogate is left as it is: a path the OS gave us begins with
`/`, never `$'`, so the two forms never meet.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_QUOTED = re.compile(r"\$'((?:[^'\\]|\\(?:\\|'|x[0-9a-f]{2}|u[0-9a-f]{4}))*)'")
_ESCAPE = re.compile(r"\\(\\|'|x[0-9a-f]{2}|u[0-9a-f]{4})")


def holds_surrogate(text: str) -> bool:
    """Whether `text` holds a lone surrogate (no UTF-8 encoder accepts it)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def shown(text: str) -> str:
    """`text` as every record, file and frame carries it: itself when it is valid Unicode, else its
    bytes in `$'…'` quoting (each byte that is not UTF-8 as `\\xNN`, any other lone surrogate as
    `\\udNNN`)."""
    if not holds_surrogate(text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\" or ch == "'":
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte code - 0xDC00
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def exact(text: str) -> str:
    """The text `shown` was given (the OS's str, surrogates and all); other text as it is."""
    match = _QUOTED.fullmatch(text) if text.startswith("$'") else None
    if match is None:
        return text

    def one(m: re.Match[str]) -> str:
        body = m[1]
        if body in ("\\", "'"):
            return body
        code = int(body[1:], 16)
        return chr(0xDC00 + code) if body[0] == "x" else chr(code)

    return _ESCAPE.sub(one, match[1])


def shown_json(value: Any) -> Any:
    """`value` (JSON-shaped: dicts, lists, strings, numbers) with every string, keys too, made `shown`;
    the very same object when nothing needed it. The common case is one `repr` (in C, ~20x faster than a
    walk in Python, bench/bench_ask_text.py): it writes each lone surrogate as `\\udXXX`, so text whose
    repr has no `\\ud` holds none (a literal backslash-u-d in a string only costs the walk)."""
    if isinstance(value, str):
        return shown(value)
    if "\\ud" not in repr(value):
        return value
    return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        out_d: dict[Any, Any] | None = None
        for n, (key, item) in enumerate(value.items()):
            new_key = shown(key) if isinstance(key, str) else key
            new_item = _walk(item) if isinstance(item, str | dict | list | tuple) else item
            if out_d is None and (new_key is not key or new_item is not item):
                out_d = dict(list(value.items())[:n])
            if out_d is not None:
                out_d[new_key] = new_item
        return value if out_d is None else out_d
    if isinstance(value, list | tuple):
        items = [_walk(item) if isinstance(item, str | dict | list | tuple) else item for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value
