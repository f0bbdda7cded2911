"""Which directories a kept-view run sees through an overlay made for it alone, so that no Unix socket in
them is connectable (issue 27 §1, fresh round 11 a): the home, and the directories outside it that the
home's links lead to (~/.cache on another disk), by construction rather than by a list of sockets.

connect(2) resolves a socket's name to an inode and finds the socket bound on that inode. Through an
overlayfs the name resolves to the overlay's own inode, on which nothing is ever bound, so every socket
there answers ECONNREFUSED whoever bound it, by whatever name (relative, since renamed), in whichever
network namespace, while every file reads as it is. exechost-hostenter (`enter … DIR… --`) makes the
overlays per run, a new superblock each (an overlay caches its lookups: a kept one would show a file the
operator made after a run looked for it as missing), and puts every mount the kept view has below each
directory (hostWritable binds, covers, private dirs) back on top: engine/commands/hostenter/layers.c.

A link deeper in the home to a directory outside it (~/src/x/run -> /srv/x) is not followed here: a socket
reached through one is as connectable as any outside the home (docs/SECURITY.md says so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from engine.commands import bindsource

# The XDG base directories below the home whose contents are the operator's as the home's are: a link
# there to another disk is followed, as a link among the home's top-level entries is.
XDG_DIRS = (".cache", ".config", ".local/share", ".local/state")
MOST = 32  # directories layered per run (the helper's own cap is above this)


def layers(
    home: str,
    skip: Iterable[str] = (),
    writable: Iterable[str] = (),
    mounts: Iterable[str] | None = None,
) -> list[str]:
    """The home (resolved), then the real directory outside it of each link among its top-level entries
    and XDG_DIRS, outermost only; none that is `/`, a directory every user may write, one holding the home,
    or one at or under `skip` (the state dir, covered roots, the agent's private dirs: not the operator's
    to show, or shown as the agent's own). Then every filesystem the host has mounted below those
    (`mounts`: the mount points of /proc/self/mountinfo), outer first: an overlay does not reach into a
    mount below its layer, so each is a layer of its own; not one a `writable` root (hostWritable, real
    paths) is: the agent's to write. Nor a linked directory holding or inside a `writable` one (outside
    the home, writable without a bind)."""
    if home == os.sep or not os.path.isdir(home):
        return []
    skipped = [os.path.realpath(s) for s in skip]
    rw = set(writable)
    found: list[str] = []
    for name in _linked(home):
        if any(_inside(os.path.realpath(os.path.dirname(name)), w) for w in rw):
            continue  # a link a run may plant (~/.local hostWritable): never the agent's to point
        real = os.path.realpath(name)
        if real == os.sep or _inside(home, real) or _inside(real, home) or not os.path.isdir(real):
            continue
        if any(_inside(real, s) for s in skipped) or _shared(real):
            continue
        if any(_inside(w, real) or _inside(real, w) for w in rw):
            continue  # hostWritable names it, or a dir in it, through the link: writable, as before
        found.append(real)
    outer = sorted(set(found), key=lambda p: (p.count(os.sep), p))
    kept: list[str] = [home]
    for path in outer:
        if not any(_inside(path, k) for k in kept):
            kept.append(path)
    points = mount_points() if mounts is None else mounts
    below = {
        p
        for p in points
        if any(_inside(p, k) and p != k for k in kept)
        and p not in rw
        and not any(_inside(p, s) for s in skipped)
        and os.path.isdir(p)
        and not os.path.islink(p)
    }
    return [*kept, *sorted(below, key=lambda p: (p.count(os.sep), p))][:MOST]


def mount_points(table: str = "/proc/self/mountinfo") -> list[str]:
    """Every mount point of this mount namespace, its octal escapes (`\\040`) decoded."""
    try:
        with open(table, "rb") as f:
            fields = [line.split(b" ", 5)[4] for line in f if line.count(b" ") >= 5]
    except OSError:
        return []
    return [os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m[1], 8)]), f)) for f in fields]


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _linked(home: str) -> list[str]:
    """The home's top-level entries and XDG_DIRS that are links or lead through one."""
    found: list[str] = []
    try:
        with os.scandir(home) as entries:
            found = [e.path for e in entries if e.is_symlink()]
    except OSError:
        return []
    for name in XDG_DIRS:
        path = os.path.join(home, name)
        if path not in found and os.path.realpath(path) != path:
            found.append(path)
    return found


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _shared(path: str) -> bool:
    """World-writable (/tmp, a shared drop dir): no view keeps it read-only without taking it from every
    run."""
    try:
        return bool(os.stat(path).st_mode & 0o002)
    except OSError:
        return True


def own_words(ops: list[str], layers: list[str]) -> tuple[list[str], list[str]]:
    """For a run's own bwrap after own-pts made `layers`: (the layers kept, the sources carried over them).
    bwrap binds a source by its path and checks it is the file its fd is: one inside a layer would be the
    overlay's, so own-pts puts each back over the layer as it is (bwrap then binds it at that same place,
    over the copy, or covers it with a tmpfs: the state dir's empty file and private copies). A layer
    holding a source bound elsewhere and left uncovered, or bound itself, is left out (its copy would show
    where nothing covers it): the home is then bound from the host, its sockets covered one by one
    (engine.commands.homesockets)."""
    pairs = bindsource.bind_pairs(ops)
    tmpfs = [os.path.realpath(ops[i + 1]) for i, op in enumerate(ops[:-1]) if op == "--tmpfs"]
    bad = {
        layer
        for src, dest in pairs
        for layer in layers
        if _inside(src, layer)
        and (src == layer or (os.path.realpath(dest) != src and not any(_inside(src, t) for t in tmpfs)))
    }
    kept = [layer for layer in layers if layer not in bad]
    carried = {src for src, _dest in pairs if any(_inside(src, layer) for layer in kept)}
    return kept, sorted(carried, key=lambda p: (p.count(os.sep), p))
