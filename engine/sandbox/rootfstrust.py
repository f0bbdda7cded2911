"""Whether a bwrap `rootfs` tree is ours alone where it decides what runs: its top and the PATH dirs in it."""

from __future__ import annotations

import os
import stat

from engine import pathtrust

# The dirs a sandboxed command's PATH searches inside the tree (engine.sandbox.bwrap's PATH), and the dirs
# above them in the tree: another account that may write one plants `make` there (fresh round 18 c).
PATH_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")


def _in_tree(tree: str, rel: str) -> tuple[str, os.stat_result]:
    """(path, lstat) of `rel` in the tree, a link among its components read as the sandbox reads it (from
    the tree's top); OSError when one cannot be read."""
    here = tree
    todo = [c for c in rel.split("/") if c][::-1]
    hops = 0
    while True:
        st = os.lstat(here)
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise OSError(40, "too many links", here)
            target = os.readlink(here)
            base = tree if target.startswith("/") else os.path.dirname(here)
            here = os.path.normpath(os.path.join(base, target.lstrip("/")))
            if here != tree and not here.startswith(tree + "/"):
                raise OSError(1, "a link out of the tree", here)
            continue
        if not todo:
            return here, st
        here = os.path.join(here, todo.pop())


def refusal(tree: str, own: int) -> str:
    """Why another account may change what runs in the sandbox of `tree` ("" when none may): the tree's top
    judged as named, link by link (engine.pathtrust.named_hold: the config's own rule), and every dir on the
    way to each PATH dir in it, each root's or `own`'s and writable by no group or other account (no sticky
    forgiven). Not the whole tree: a few lstats per start, against a walk of every dir (docs/SECURITY.md);
    a program outside PATH that a command names by path is the operator's tree to keep."""
    why = pathtrust.named_hold(tree, own)
    if why:
        return why
    top = os.path.realpath(tree)
    for rel in PATH_DIRS:
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            try:
                path, st = _in_tree(top, "/".join(parts[:depth]))
            except FileNotFoundError:
                break
            except OSError as exc:
                return f"{exc.filename} cannot be judged ({exc.strerror})"
            if not stat.S_ISDIR(st.st_mode):
                break
            if st.st_uid not in (0, own):
                return f"{path} is owned by uid {st.st_uid}"
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return f"{path} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""
