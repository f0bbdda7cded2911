"""Who besides this account may change a path: the one walk up a path's directories judging each one's owner
and mode (group/other write, sticky dirs, links judged as links), which every "is this ours alone?" check
uses: the PATH helpers (root's alone), hostWritable and workspace roots, state dirs and a node's state dir.

Ownership and mode, never os.access: a root gateway (which may write anything) must still tell a system
file from an agent's, and another account's dir from its own."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from typing import Literal

Chain = list[tuple[str, os.stat_result]]  # (path, lstat) of every component, from `/` down
Fault = Literal["owner", "mode"]

_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def fault(st: os.stat_result, owners: tuple[int, ...], *, sticky: bool = True) -> Fault | None:
    """What lets an account outside `owners` change what `st` describes: "owner" when another account owns
    it, "mode" when its group or others may write it; None when neither. With `sticky` a sticky dir's
    group/other write is forgiven: there only an entry's owner renames or removes it (/tmp)."""
    if st.st_uid not in owners:
        return "owner"
    if st.st_mode & _GROUP_OTHER_WRITE and not (sticky and st.st_mode & stat.S_ISVTX):
        return "mode"
    return None


def _upward(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of `path` and of every directory above it, up to `/`; OSError when one cannot be read."""
    here = path
    while True:
        yield here, os.lstat(here)
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def chain_to(path: str) -> Chain | str:
    """The lstat of every component of `path` (resolved: a link on the way is judged as the link, never
    followed), from `/` down; or why one cannot be read ("<path>: <strerror>", the deepest first)."""
    try:
        return list(_upward(path))[::-1]
    except OSError as exc:
        return f"{exc.filename}: {exc.strerror}"


def only_root_changes(path: str) -> bool:
    """Whether only root can change `path` (already resolved) and every directory above it: each owned by
    root and writable by neither its group nor others (no sticky dir forgiven: a PATH dir is root's alone).
    Walked up lazily: the first component that fails ends it (a hot path: engine.commands.filetrust)."""
    try:
        return all(fault(st, (0,), sticky=False) is None for _, st in _upward(path))
    except OSError:
        return False


def foreign_hold(chain: Chain, own: int, *, holder: bool = False) -> str | None:
    """Why a directory cannot be trusted as this account's (`own`), from the stats of every directory from
    `/` down to it (by path with lstat, or by the fds a bind walks: engine.commands.bindsource); None when
    it can. The pathPrepend judgement (only_root_changes) with the gateway's own account beside root: the
    directory must be `own`'s, and each one above it root's or `own`'s and writable by no group or other
    account unless sticky (/tmp: no one renames what is not theirs there). Else another account made it
    or may exchange it, and reads and renames what the runs write in it (fresh round 16 a). `holder`: the
    directory only holds dirs of ours checked one by one (a sandbox workspace root), judged as the ones
    above it are (root's too, or sticky). The directory's own mode is not judged otherwise: a root of ours
    that is 0777 is the operator's choice to share (docs/SECURITY.md)."""
    if not chain:
        return "not found"
    *above, (path, st) = chain
    if holder:
        above.append((path, st))
    elif st.st_uid != own:
        return f"{path} is owned by uid {st.st_uid}, not this gateway's uid {own}"
    for name, up in above:
        why = fault(up, (0, own))
        if why == "owner":
            return f"{name} is owned by uid {up.st_uid} (neither root nor uid {own})"
        if why == "mode":
            return f"{name} is writable by other accounts ({stat.filemode(up.st_mode)}, not sticky)"
    return None


def foreign_hold_at(path: str, own: int, *, holder: bool = False) -> str | None:
    """foreign_hold of `path` (resolved) as found now, by name: the decision of what a view binds; the
    bind itself is judged again on its fds (engine.commands.bindsource.open_owned)."""
    chain = chain_to(path)
    return chain if isinstance(chain, str) else foreign_hold(chain, own, holder=holder)


def _strict_why(path: str, st: os.stat_result, own: int) -> str:
    """Why another account may change `path` ("" when none may): as ssh's StrictModes judges."""
    why = fault(st, (0, own), sticky=False)
    if why == "owner":
        return f"{path} is owned by uid {st.st_uid}"
    if why == "mode":
        return f"{path} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def strict_hold(path: str, own: int) -> str:
    """Why `path` (resolved; present or to be made) cannot be `own`'s alone, as ssh's StrictModes judges a
    key file: "" when no other account may write it or any dir above it. The dir itself (when present) is
    a directory owned by `own` with no group/other write; every dir above (the missing ones skipped) is
    owned by root or `own` and not group/other writable, except a sticky one whose entry on the way is
    missing, or owned by root or `own` and not group/other writable (the sticky bit keeps every other
    account from renaming or replacing that entry). Stricter than foreign_hold below a sticky dir: the
    entry there may not be another sticky shared dir."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"{path} cannot be judged ({exc.strerror})"
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a directory"
        if st.st_uid != own:
            return f"{path} is owned by uid {st.st_uid}, not this account's ({own})"
        if st.st_mode & _GROUP_OTHER_WRITE:
            return f"{path} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    here = path
    while here != os.sep:
        parent = os.path.dirname(here)
        try:
            pst = os.lstat(parent)
        except FileNotFoundError:
            here = parent
            continue
        except OSError as exc:
            return f"{parent} cannot be judged ({exc.strerror})"
        why = _strict_why(parent, pst, own)
        if why and fault(pst, (0, own)) is None:
            # sticky: only the entry's owner renames it; the entry on the way must be ours (or root's)
            try:
                est: os.stat_result | None = os.lstat(here)
            except FileNotFoundError:
                est = None
            why = "" if est is None or not _strict_why(here, est, own) else why
        if why:
            return why
        here = parent
    return ""


def _named_walk(path: str) -> tuple[list[str], str]:
    """The dirs holding each link met on the way to `path` (as named, link by link: a link's target is
    walked from the dir holding the link, or from `/`) and the resolved path it names at the end; every dir
    in the answer is resolved. OSError when a component cannot be read or the links loop."""
    todo = [c for c in os.path.abspath(path).split("/") if c][::-1]  # a stack: the next name last
    here, held, hops = "/", [], 0
    while todo:
        name = todo.pop()
        if name == ".":
            continue
        if name == "..":
            here = os.path.dirname(here)
            continue
        step = os.path.join(here, name)
        if stat.S_ISLNK(os.lstat(step).st_mode):
            hops += 1
            if hops > 40:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            held.append(here)  # whoever may write this dir may re-point the link
            target = os.readlink(step)
            here = "/" if target.startswith("/") else here
            todo.extend([c for c in target.split("/") if c][::-1])
            continue
        here = step
    held.append(os.path.dirname(here) or "/")
    return list(dict.fromkeys(held)), here


def named_hold(path: str, own: int, opened: os.stat_result | None = None) -> str:
    """Why another account may change what `path` names (a file or dir the config names: the config itself,
    a node's knownHosts, identityFile and identityAgent socket, a seccomp profile, a bwrap rootfs), "" when
    none may. Judged as named, link by link: the dir holding every link on the way and the one holding what
    it resolves to, each with every dir above it, by foreign_hold's rule for a holder (root's or `own`'s, no
    group/other write unless sticky); and what it names by StrictModes' rule (root's or `own`'s, no
    group/other write; a socket by its owner alone: its mode grants connecting, and only its dir may let
    another account replace it). `opened`: the fstat of the fd the caller opened by that name, which must be
    what was judged (else it changed in between)."""
    try:
        holders, final = _named_walk(path)
        st = os.lstat(final)
    except OSError as exc:
        return f"{exc.filename or path} cannot be judged ({exc.strerror})"
    for holder in holders:
        why = foreign_hold_at(holder, own, holder=True)
        if why:
            return why
    if opened is not None and (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        return f"{path} changed while it was judged"
    if stat.S_ISSOCK(st.st_mode):  # a socket's write bit says who may connect, not who may replace it
        return "" if st.st_uid in (0, own) else f"{final} is owned by uid {st.st_uid}"
    return _strict_why(final, st, own)
