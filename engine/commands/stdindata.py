"""Programs known to read their input as data: the inverse of a list of command readers. Input from the
agent to any other program (a heredoc, a pipe from another segment, `process write`/keys into a session it
runs) may be commands to it — `ed`'s `!cmd`, sqlite3's `.shell`, `more`'s `!`, gdb, psql, an interpreter —
so a run that no human approved takes no such input: the segment asks, or the session refuses the write.

A program is here only when its input, whatever it holds, is read as text to filter, count, compare, page
or copy, never as a command: the coreutils readers and writers of engine.commands.treesafe, grep, diff,
jq, and awk and sed (their program comes from the argv, which the allowlist decided; their input is data).
`less` pages its input and takes keys from its terminal with LESSSECURE=1 (hostenv), which turns off
every key that runs or opens something. `git` reads from stdin only messages, patches, object and path
lists (`commit -F -`, `apply`, `hash-object --stdin`); what it runs comes from its config, vetted apart
(engine.commands.gitvet), never from its input. Nothing else is, however harmless it looks: `xargs`
reads commands' arguments, a pager without a secure mode (`more`) runs `!cmd`, a shell or an interpreter
reads code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from engine.commands.safebins import DEFAULT_SAFE_BINS
from engine.commands.treesafe import TREE_SAFE

__all__ = ["INPUT_AS_DATA", "command_readers", "input_refusal", "reads_input_as_data"]

INPUT_AS_DATA: frozenset[str] = frozenset(
    {*TREE_SAFE, *DEFAULT_SAFE_BINS, "jq", "awk", "gawk", "mawk", "nawk", "sed", "gsed", "sort", "git"}
)


def reads_input_as_data(argv: Sequence[str], real: str | None) -> bool:
    """Whether this command reads its stdin (and its terminal) as data: its executable, by the name of the
    file that runs and the name typed, is on INPUT_AS_DATA."""
    names = {os.path.basename(p) for p in (real, argv[0] if argv else None) if p}
    return bool(names) and all(n in INPUT_AS_DATA for n in names)


def command_readers(pairs: Sequence[tuple[Sequence[str], str | None]]) -> Iterator[str]:
    """The names of the programs among (argv, resolved path) pairs that may read input as commands."""
    for argv, real in pairs:
        if argv and not reads_input_as_data(argv, real):
            yield os.path.basename(real or argv[0])


def input_refusal(segments: Sequence[Mapping[str, Any]]) -> str:
    """Why the agent may not type into a session no human approved (a decision's segments: argv and
    resolvedPath), "" when every program in it reads its input as data."""
    pairs = [(s.get("argv") or (), s.get("resolvedPath")) for s in segments]
    readers = list(dict.fromkeys(command_readers(pairs)))
    if not readers:
        return ""
    return (
        f"it started unasked (an allowlist match) and {', '.join(readers[:3])} may read its input as "
        "commands, which no entry allows; run it again to be asked, and an approved run takes input"
    )
