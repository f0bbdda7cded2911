"""Directories a host run sees as a read-only copy of their entries at the view's making: no Unix socket
and no hidden file among them, whatever is renamed into the real directory afterwards.

A file bound over a node's key is attached to that file's dentry: the key rotated by a rename (`ssh-keygen`
after `rm`, ansible) puts a new dentry there, unbound, in every running view (fresh round 8 r). And a
read-only bind does not stop connect(2): an ssh ControlMaster socket in ~/.ssh reached through a read-only
home still runs commands on a node as the operator. So the directory holding a node key, and ~/.ssh, are
covered with a tmpfs holding only what was there (regular files bound read-only, directories copied
the same way, links re-made) but sockets, fifos, devices and the hidden files; the tmpfs is then
read-only. A rename in the real directory changes nothing under the cover."""

from __future__ import annotations

import os
import stat

MAX_ENTRIES = 512  # beyond this a directory is left to the per-file binds (a view is one bwrap argv)
MAX_DEPTH = 4  # subdirectories copied as their directory is, this deep; below, bound whole


def shadow_ops(dirs: list[str], hidden: set[str]) -> tuple[list[str], list[str]]:
    """bwrap operations covering each directory in `dirs` (resolved, present, chosen by the caller: never
    the home, a writable root or a shared one) with its entries but the `hidden` paths (resolved) and
    anything that is not a regular file, a directory or a link; and the directories covered. One too large
    or unreadable is not covered: the caller's per-file binds keep it. The operations go last: a later
    bind of a directory above one would show it again."""
    ops: list[str] = []
    covered: list[str] = []
    # Outer directories first: a cover binds its subdirectories from the host as they are, so one made
    # after a cover below it (~/.ssh after ~/.ssh/nodes holding a node's key) would show that directory
    # again, the key in it (fresh round 9 y).
    for d in sorted(dict.fromkeys(dirs), key=lambda p: p.rstrip(os.sep).count(os.sep)):
        if d == os.sep:
            continue
        budget = [MAX_ENTRIES]
        here = _copy(d, hidden, 0, budget)
        if here is None:
            continue
        ops += ["--tmpfs", d, *here, "--remount-ro", d]
        covered.append(d)
    return ops, covered


def _copy(d: str, hidden: set[str], depth: int, budget: list[int]) -> list[str] | None:
    """The operations filling a cover (or a directory made in one) at `d` with `d`'s entries; None when
    `d` cannot be read or the entries would pass the budget. A subdirectory is copied the same way, not
    bound whole: a read-only bind does not stop connect(2), and a ControlMaster socket at the usual
    ControlPath ~/.ssh/sockets/%C was the node's account to every host run (fresh round 9 y). Deeper than
    MAX_DEPTH, or past the budget, a subdirectory is bound whole."""
    try:
        with os.scandir(d) as entries:
            listed = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
    except OSError:
        return None
    if len(listed) > budget[0]:
        return None
    budget[0] -= len(listed)
    ops: list[str] = []
    for name, st in sorted(listed):
        path = os.path.join(d, name)
        if path in hidden:
            continue
        if stat.S_ISDIR(st.st_mode):
            inner = _copy(path, hidden, depth + 1, budget) if depth < MAX_DEPTH else None
            ops += ["--dir", path, *inner] if inner is not None else ["--ro-bind", path, path]
        elif stat.S_ISREG(st.st_mode):
            ops += ["--ro-bind", path, path]
        elif stat.S_ISLNK(st.st_mode):
            try:
                ops += ["--symlink", os.readlink(path), path]
            except OSError:
                continue
    return ops
