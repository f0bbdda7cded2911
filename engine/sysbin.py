"""What only root can change: the gateway's own helper programs (bwrap, prlimit, a C compiler, busybox) are
found only there, since the inherited PATH may lead through a directory an agent's command can write
(~/.local/bin), and a helper found there would run outside every view, with the state dir in reach."""

from __future__ import annotations

import os
import stat

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


def only_root_changes(path: str) -> bool:
    """Whether only root can change `path` (already resolved) and every directory above it: each owned by
    root and writable by neither its group nor others. Ownership and mode, not os.access, so a root gateway
    (which may write anything) still tells a system file from an agent's."""
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def foreign_hold(chain: list[tuple[str, os.stat_result]], own: int, *, holder: bool = False) -> str | None:
    """Why a directory cannot be trusted as this account's (`own`), from the stats of every directory from
    `/` down to it (by path with lstat, or by the fds a bind walks: engine.commands.bindsource); None when
    it can. The pathPrepend judgement (only_root_changes) with the gateway's own account beside root: the
    directory must be `own`'s, and each one above it root's or `own`'s and writable by no group or other
    account unless sticky (/tmp: no one renames what is not theirs there). Else another account made it
    or may exchange it, and reads and renames what the runs write in it (fresh round 16 a). `holder`: the
    directory only holds dirs of ours checked one by one (a sandbox workspace root), judged as the ones
    above it are (root's too, or sticky)."""
    if not chain:
        return "not found"
    *above, (path, st) = chain
    if holder:
        above.append((path, st))
    elif st.st_uid != own:
        return f"{path} is owned by uid {st.st_uid}, not this gateway's uid {own}"
    for name, up in above:
        if up.st_uid not in (0, own):
            return f"{name} is owned by uid {up.st_uid} (neither root nor uid {own})"
        if up.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not up.st_mode & stat.S_ISVTX:
            mode = stat.filemode(up.st_mode)
            return f"{name} is writable by other accounts ({mode}, not sticky)"
    return None


def foreign_hold_at(path: str, own: int, *, holder: bool = False) -> str | None:
    """foreign_hold of `path` (resolved) as found now, by name: the decision of what a view binds; the
    bind itself is judged again on its fds (engine.commands.bindsource.open_owned)."""
    chain: list[tuple[str, os.stat_result]] = []
    here = path
    while True:
        try:
            chain.append((here, os.lstat(here)))
        except OSError as exc:
            return f"{here}: {exc.strerror}"
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return foreign_hold(chain[::-1], own, holder=holder)
