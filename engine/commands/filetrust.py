"""Who can change a file: only root (its digest may be cached), or the agent (it runs from a sealed copy)."""

from __future__ import annotations

import os
import stat

from engine.pathtrust import only_root_changes


def system_stat(real: str) -> os.stat_result | None:
    """The file's lstat when only root can change the file at this path: it is a regular file, and it and
    every directory above it are owned by root and writable by neither group nor others. None otherwise:
    it counts as writable by the agent (its account, or another one), so its content is verified at the
    spawn and run from a sealed copy."""
    try:
        st = os.lstat(real)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return st if only_root_changes(os.path.dirname(real)) else None


def system_owned(real: str) -> bool:
    """Only root can change the regular file at `real` (see system_stat)."""
    return system_stat(real) is not None


def links_fixed(path: str, depth: int = 0) -> bool:
    """Whether every link met resolving the absolute `path` sits in a directory only root can change: a
    link in an agent-writable directory is the agent's to re-point, whoever owns its target."""
    if depth > 40:
        return False
    current = "/"
    for part in path.split("/"):
        if not part or part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        if not os.path.islink(step):
            current = step
            continue
        if not only_root_changes(current):
            return False
        try:
            target = os.readlink(step)
        except OSError:
            return False
        target = os.path.join(current, target)
        if not links_fixed(target, depth + 1):
            return False
        current = os.path.realpath(target)
    return True


def writable_pattern_warning(pattern: str) -> str | None:
    """A warning when an allowlist pattern names one file the agent can write (a `./tool`): the entry
    then allows whatever bytes that file holds at each run."""
    path = os.path.expanduser(pattern)
    if not path.startswith("/") or any(c in path for c in "*?["):
        return None
    real = os.path.realpath(path)
    if not os.path.isfile(real) or system_owned(real):
        return None
    return (
        f"Warning: allowlist entry {pattern} names a file the agent can write ({real}); every run executes "
        "whatever it holds at that moment. Prefer a root-owned copy, or approve it per run."
    )
