"""Command wrappers: which ones are transparent (unwrapped), which ones block a segment for good."""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_WRAPPER_DEPTH = 4  # transparent wrappers unwrapped per segment


def names(text: str) -> frozenset[str]:
    """A set of names written as one space-separated string (keeps long lists readable)."""
    return frozenset(text.split())


# Never satisfy: they change identity, scheduling or session in ways an allowlist entry cannot describe.
BLOCKED_WRAPPERS = names(
    "sudo doas su pkexec runuser setpriv sg newgrp setsid chrt ionice taskset chroot unshare nsenter "
    "capsh systemd-run flock script firejail bwrap sandbox-exec caffeinate arch xcrun numactl cgexec "
    "prlimit faketime proxychains proxychains4 torsocks tsocks ltrace strace gdb valgrind busybox toybox "
    # nohup writes (or appends to) nohup.out in the cwd or $HOME: a write no allowlist entry describes.
    "nohup "
)


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1].lower()


_INT = re.compile(r"[+-]?\d+")
_DURATION = re.compile(r"\d+(\.\d+)?[smhd]?")
_SIGNAL = re.compile(r"[A-Za-z0-9+-]+")
_BUF_MODE = re.compile(r"L|\d+[KMGkmg]?B?")
WrapperParser = Callable[[list[str], int], "int | None"]


def _env(words: list[str], at: int) -> int | None:
    # Only bare `env [--] cmd` is transparent; -i -u -S -C, assignments, `-` all change what runs.
    start = at + 2 if at + 1 < len(words) and words[at + 1] == "--" else at + 1
    nxt = words[start] if start < len(words) else None
    if nxt is not None and ((nxt.startswith("-") and start == at + 1) or "=" in nxt):
        return None  # GNU env still reads NAME=VALUE after `--`
    return start


def _nice(words: list[str], at: int) -> int | None:
    i = at + 1
    while i < len(words):
        word = words[i]
        if word == "--":
            return i + 1
        if word in ("-n", "--adjustment") and i + 1 < len(words) and _INT.fullmatch(words[i + 1]):
            i += 2
        elif (
            (word.startswith("-n") and _INT.fullmatch(word[2:]))
            or (word.startswith("--adjustment=") and _INT.fullmatch(word[13:]))
            or (word.startswith("-") and _INT.fullmatch(word[1:]))
        ):
            i += 1
        elif word.startswith("-"):
            return None
        else:
            return i
    return i


def _time(words: list[str], at: int) -> int | None:
    i = at + 1
    while i < len(words) and words[i].startswith("-"):
        if words[i] == "--":
            return i + 1
        if words[i] not in ("-p", "--portability"):
            return None  # -o/-a write files, -f formats: not transparent
        i += 1
    return i


def _timeout(words: list[str], at: int) -> int | None:
    i = at + 1
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word in ("--preserve-status", "--foreground", "-v", "--verbose"):
            i += 1
        elif word in ("-s", "--signal", "-k", "--kill-after") and i + 1 < len(words):
            i += 2
        elif word.startswith(("--signal=", "--kill-after=")) or (word[:2] in ("-s", "-k") and len(word) > 2):
            value = word.split("=", 1)[1] if word.startswith("--") else word[2:]
            if not _SIGNAL.fullmatch(value):
                return None
            i += 1
        else:
            return None
    if i >= len(words) or not _DURATION.fullmatch(words[i]):
        return None
    return i + 1


def _stdbuf(words: list[str], at: int) -> int | None:
    i = at + 1
    seen = False
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word in ("-i", "-o", "-e") and i + 1 < len(words) and _BUF_MODE.fullmatch(words[i + 1]):
            i += 2
        elif (word[:2] in ("-i", "-o", "-e") and _BUF_MODE.fullmatch(word[2:])) or (
            word.startswith(("--input=", "--output=", "--error="))
            and _BUF_MODE.fullmatch(word.split("=", 1)[1])
        ):
            i += 1
        else:
            return None
        seen = True
    return i if seen else None


TRANSPARENT_WRAPPERS: dict[str, WrapperParser] = {
    "env": _env,
    "nice": _nice,
    "time": _time,
    "timeout": _timeout,
    "stdbuf": _stdbuf,
}


def unwrap(words: list[str]) -> tuple[list[list[str]], list[str], str | None]:
    """(wrapper groups, effective argv, blocked wrapper name or None)."""
    groups: list[list[str]] = []
    at = 0
    while True:
        name = basename(words[at])
        if name in BLOCKED_WRAPPERS:
            return groups, words[at:], name
        parser = TRANSPARENT_WRAPPERS.get(name)
        if parser is None:
            return groups, words[at:], None
        start = parser(words, at)
        if start is None:
            return groups, words[at:], name  # a wrapper with modifiers (`env -S`, `time -o`) is semantic
        if start >= len(words):
            return groups, words[at:], None  # `env` / `nice` alone is itself the command
        if len(groups) >= MAX_WRAPPER_DEPTH:
            return groups, words[at:], "wrapper depth"
        groups.append(words[at:start])
        at = start
