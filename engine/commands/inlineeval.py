"""Strict inline eval (reference §3.9): `python -c`-style code in argv, named as the reference names it."""

from __future__ import annotations

import re

from engine.commands.wrappers import basename

__all__ = ["inline_eval"]

_VERSIONED = re.compile(r"^([a-z]+?)[\d.]*$")
_INLINE_EVAL: dict[str, tuple[str, ...]] = {
    "python": ("-c",),
    "pypy": ("-c",),
    "node": ("-e", "--eval", "-p", "--print"),
    "nodejs": ("-e", "--eval", "-p", "--print"),
    "bun": ("-e", "--eval", "-p", "--print"),
    "deno": ("eval",),
    "ruby": ("-e",),
    "perl": ("-e", "-E"),
    "php": ("-r",),
    "lua": ("-e",),
    "osascript": ("-e",),
    "awk": ("-e", "--source"),
    "gawk": ("-e", "--source"),
    "find": ("-exec", "-execdir", "-ok", "-okdir"),
    "make": ("-f", "--file", "--makefile", "--eval", "-E"),
    "sed": ("-e",),
}


def inline_eval(argv: tuple[str, ...]) -> str | None:
    """`python -c`-style inline code in argv, named as the reference's strict-inline-eval texts name it."""
    if not argv:
        return None
    name = basename(argv[0])
    match = _VERSIONED.match(name)
    base = match.group(1) if match else name
    flags = _INLINE_EVAL.get(base) or _INLINE_EVAL.get(name)
    if not flags:
        return None
    for word in argv[1:]:
        for flag in flags:
            if word == flag or (
                len(flag) == 2
                and word.startswith("-")
                and not word.startswith("--")
                and flag[1] in word[1:]
                and base not in ("find", "make")
            ):
                return f"{name} {flag}"
    return None
