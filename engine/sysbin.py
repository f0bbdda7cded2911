"""What only root can change: the gateway's own helper programs (bwrap, prlimit, a C compiler, busybox) are
found only there, since the inherited PATH may lead through a directory an agent's command can write
(~/.local/bin), and a helper found there would run outside every view, with the state dir in reach."""

from __future__ import annotations

import os

from engine.pathtrust import only_root_changes

# The system's own directories first: a helper is the distribution's unless the admin installed another.
SYSTEM_PATH = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")


def which(name: str) -> str | None:
    """`name` in the system dirs, resolved, when only root can change it and every directory above it."""
    for directory in SYSTEM_PATH:
        candidate = os.path.join(directory, name)
        if not os.access(candidate, os.X_OK):
            continue
        real = os.path.realpath(candidate)
        if os.path.isfile(real) and only_root_changes(real):
            return real
    return None
