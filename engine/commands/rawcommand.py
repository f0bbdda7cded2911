"""Whether an argv's display text (`rawCommand`) is that argv: what a human was shown must be what runs."""

from __future__ import annotations

import os
from collections.abc import Sequence

SHELL_NAMES = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})
SHELL_FLAGS = frozenset({"-c", "-lc"})


def format_exec_command(argv: Sequence[str]) -> str:
    """OpenClaw's `formatExecCommand`: arguments holding whitespace or `"` (or empty) are double-quoted."""
    out = []
    for arg in argv:
        if arg == "" or any(c.isspace() or c == '"' for c in arg):
            out.append('"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(arg)
    return " ".join(out)


def shell_payload(argv: Sequence[str]) -> str | None:
    """The script of a plain shell wrapper (`sh -c SCRIPT`, `/bin/bash -lc SCRIPT`) with nothing after it;
    None for anything else (trailing words become $0, $1 … and would run unseen)."""
    if len(argv) == 3 and os.path.basename(argv[0]) in SHELL_NAMES and argv[1] in SHELL_FLAGS:
        return argv[2]
    return None


def raw_command_matches(argv: Sequence[str], raw: str | None) -> bool:
    """OpenClaw's rule (validateSystemRunCommandConsistency): a rawCommand, trimmed, must equal the
    canonical display of argv, or the trimmed script of a plain shell wrapper. Absent or blank: no claim."""
    if raw is None or not raw.strip():
        return True
    text = raw.strip()
    if text == format_exec_command(argv):
        return True
    payload = shell_payload(argv)
    return payload is not None and text == payload.strip()
