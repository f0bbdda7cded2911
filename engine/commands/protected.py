"""Paths no allowlisted command may touch without a human: exechost's own state (tokens, approvals)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from engine import statefs


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def protected_root() -> str:
    """The state dir, resolved: socket tokens, the approvals file and sandbox workspaces live there."""
    return os.path.realpath(statefs.state_dir())


def protected_operand(argv: Sequence[str], cwd: str, root: str | None = None) -> str | None:
    """The first word of `argv` (or the cwd) that names something inside the state dir, else None.

    Every word counts, options' `=value` parts too: `cat gateway.json` run in the state dir reads a
    token as surely as `cat ~/.openclaw/gateway.json` does. Reading them would let an allowlisted reader
    (`cat`, `head`, `grep`) hand the agent the tokens that approve and broaden its own commands."""
    root = root or protected_root()
    base = os.path.realpath(cwd) if cwd else os.getcwd()
    if _inside(base, root):
        return cwd
    for word in argv[1:]:
        for candidate in (word, word.partition("=")[2]):
            if not candidate or candidate.startswith("-"):
                continue
            path = os.path.realpath(os.path.join(base, os.path.expanduser(candidate)))
            if _inside(path, root):
                return candidate
    return None
