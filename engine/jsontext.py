"""JSON from peers and files we do not trust, read one way: a `[[[[…` line is a clear ValueError, never a
RecursionError, and a wire admits only what its own encoder could send back.

Python's decoder recurses per nesting level, and so does every later walk over what it returned (our
validation, `json.dumps` of an echo). One nesting limit, checked here, keeps all of them safe.

`loads_wire` is the one reader of the three wires (control socket, node link, exec-approvals.sock). Python's
`json.loads` accepts what no encoder of ours can write back: a lone UTF-16 surrogate (`"\\ud800"`, which no
UTF-8 frame can carry, so every frame echoing it failed to encode), `NaN`/`Infinity` and `1e400` (not JSON
to any other peer; `int(Infinity)` raises OverflowError), and integers of any length (`int(10**400)` as a
float overflows). Each is a ValueError (`BadJSON`) here, before any handler sees the value.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 64  # our deepest legitimate shape (exec params, the approvals file) is under 8
INT_MAX = (1 << 63) - 1  # what every peer's int64 holds; sizes, offsets, ids and times in ms fit
_INT_DIGITS = 19  # len(str(INT_MAX)): a longer literal is refused before int() spends time on it
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadJSON(ValueError):
    """Text a wire does not admit: not UTF-8, not JSON, or a value its encoder could not send back."""


class TooDeep(BadJSON):
    """The JSON nests deeper than MAX_DEPTH."""


def loads(data: str | bytes, **kwargs: Any) -> Any:
    """`json.loads` that refuses nesting deeper than MAX_DEPTH with a ValueError (TooDeep)."""
    try:
        value = json.loads(data, **kwargs)
    except RecursionError:
        raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    _walk(value, strings=False)
    return value


def loads_wire(data: str | bytes, *, max_bytes: int | None = None) -> Any:
    """One wire frame's JSON: UTF-8 only, no lone surrogates, finite numbers in int64 range, at most
    MAX_DEPTH deep and `max_bytes` long; anything else is BadJSON with a short reason."""
    if max_bytes is not None and len(data) > max_bytes:
        raise BadJSON(f"frame exceeds the {max_bytes}-byte cap")
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")  # json.loads would guess UTF-16/32 from the first bytes
        except UnicodeDecodeError as exc:
            raise BadJSON(f"not UTF-8 at byte {exc.start}") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    except BadJSON:
        raise
    except ValueError as exc:
        raise BadJSON(f"invalid JSON: {exc}") from None
    # A lone surrogate can only arrive as a `\ud8xx`-style escape: text without one needs no string walk.
    _walk(value, strings="\\ud" in text or "\\uD" in text)
    return value


def peek(data: str | bytes) -> dict[str, Any] | None:
    """The top-level object of a line loads_wire refused, read leniently, only so that the refusal can be
    addressed to its sender (its id, its frame type); None when it is not an object at all. Nothing read
    here may reach a handler, and callers check the fields they take (see clean_text)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def dumps_wire(value: Any) -> bytes:
    """One compact UTF-8 JSON line for a wire. Lone surrogates from elsewhere (a file name read with
    surrogateescape) become U+FFFD rather than failing the frame; NaN and Infinity raise ValueError."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode("utf-8") + b"\n"


def clean_text(text: str) -> str:
    """`text` with any lone surrogate replaced by U+FFFD (what dumps_wire would send)."""
    return _SURROGATE.sub("\ufffd", text) if not text.isascii() else text


def _constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number")


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > _INT_DIGITS:
        raise BadJSON("integer out of range")
    value = int(literal)
    if not -INT_MAX <= value <= INT_MAX:
        raise BadJSON("integer out of range")
    return value


def _float(literal: str) -> float:
    value = float(literal)
    if not -INT_MAX <= value <= INT_MAX:  # also false for inf (1e400 reads as inf)
        raise BadJSON("number out of range")
    return value


def _walk(value: Any, *, strings: bool) -> None:
    # Iterative: the point is to never recurse on attacker-chosen depth.
    stack: list[tuple[Any, int]] = [(value, 1)]
    if strings and isinstance(value, str):
        _check_text(value)
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if strings:
                for key in node:
                    _check_text(key)
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_DEPTH:
                    raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep")
                stack.append((child, depth + 1))
            elif strings and isinstance(child, str):
                _check_text(child)


def held_bytes(value: Any) -> int:
    """What a decoded JSON value holds in Python (sys.getsizeof of every object in it), not what its text
    was: `[{},{},…]` is 3 bytes of JSON and 72 of Python a `{}`. Shared objects (a small int, a key the
    decoder memoised) count once per place, so this is an upper bound. A string or a list of strings, what
    almost every request carries, is summed without a Python-level walk."""
    size = sys.getsizeof
    if isinstance(value, str):
        return size(value)
    total = 0
    stack = [value]
    while stack:
        node = stack.pop()
        total += size(node)
        if isinstance(node, list):
            if all(type(item) is str for item in node):
                total += sum(map(size, node))
            else:
                stack.extend(node)
        elif isinstance(node, dict):
            total += sum(map(size, node))  # keys are strings
            stack.extend(node.values())
    return total


def _check_text(text: str) -> None:
    if not text.isascii() and _SURROGATE.search(text):
        raise BadJSON("text holds a lone UTF-16 surrogate (not encodable as UTF-8)")
