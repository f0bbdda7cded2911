"""Where each key of a config.toml is defined: tomllib gives values but no positions, errors need lines."""

from __future__ import annotations

import json
import re
import tomllib

PathParts = list[str | int]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def render_key(parts: PathParts) -> str:
    """A key path as errors spell it: `agents.list[0].tools.exec.ask`, odd names JSON-quoted."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if _BARE_KEY.fullmatch(part) else json.dumps(part)
            out += f".{name}" if out else name
    return out


def key_lines(source: str) -> dict[str, int]:
    """Map each dotted key path (as render_key spells it) to the line that defines it.

    tomllib gives values but no positions; this light scan of headers and `key =` lines
    supplies them. Anything it cannot place falls back to the nearest enclosing table's line.
    """
    lines: dict[str, int] = {}
    prefix: PathParts = []
    aot: dict[tuple[str | int, ...], int] = {}
    state: tuple[str | None, int] = (None, 0)  # (open multi-line quote, bracket depth)
    for lineno, line in enumerate(source.splitlines(), 1):
        if state != (None, 0):
            state = _scan_value(line, 0, state)
            continue
        stripped = line.lstrip()
        start = len(line) - len(stripped)
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            is_aot = stripped.startswith("[[")
            parsed = split_key(line, start + (2 if is_aot else 1))
            if parsed is None:
                continue
            resolved: PathParts = []
            for i, part in enumerate(parsed[0]):
                resolved.append(part)
                key = tuple(resolved)
                if is_aot and i == len(parsed[0]) - 1:
                    aot[key] = aot.get(key, -1) + 1
                    resolved.append(aot[key])
                elif key in aot:
                    resolved.append(aot[key])
            prefix = resolved
            for k in range(1, len(prefix) + 1):
                lines.setdefault(render_key(prefix[:k]), lineno)
            continue
        parsed = split_key(line, start)
        if parsed is None:
            continue
        parts, end = parsed
        if end >= len(line) or line[end] != "=":
            continue
        for k in range(1, len(parts) + 1):
            lines.setdefault(render_key([*prefix, *parts[:k]]), lineno)
        state = _scan_value(line, end + 1, (None, 0))
    return lines


def split_key(text: str, i: int) -> tuple[list[str], int] | None:
    """The dotted key starting at text[i] (bare or quoted parts) and where it ends; None if there is none."""
    parts: list[str] = []
    n = len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            return None
        ch = text[i]
        if ch in "\"'":
            close = i + 1
            while close < n and text[close] != ch:
                close += 2 if ch == '"' and text[close] == "\\" else 1
            if close >= n:
                return None
            raw = text[i : close + 1]
            try:
                parts.append(tomllib.loads(f"k = {raw}")["k"])
            except tomllib.TOMLDecodeError:
                return None
            i = close + 1
        else:
            m = _BARE_KEY.match(text, i)
            if m is None:
                return None
            parts.append(m.group(0))
            i = m.end()
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == ".":
            i += 1
            continue
        return parts, i


def _scan_value(line: str, i: int, state: tuple[str | None, int]) -> tuple[str | None, int]:
    """Track multi-line strings and bracket depth so continuation lines are not read as keys."""
    quote, depth = state
    n = len(line)
    while i < n:
        if quote is not None:
            end = line.find(quote, i)
            while end != -1 and quote == '"""' and _escaped(line, end):
                end = line.find(quote, end + 1)
            if end == -1:
                return quote, depth
            i, quote = end + 3, None
            continue
        ch = line[i]
        if ch == "#":
            break
        if ch in "\"'":
            if line.startswith(ch * 3, i):
                quote, i = ch * 3, i + 3
                continue
            i += 1
            while i < n and line[i] != ch:
                i += 2 if ch == '"' and line[i] == "\\" else 1
            i += 1
            continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        i += 1
    return quote, depth


def _escaped(line: str, pos: int) -> bool:
    count = 0
    while pos - count - 1 >= 0 and line[pos - count - 1] == "\\":
        count += 1
    return count % 2 == 1
