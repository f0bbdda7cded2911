"""Which directories a host run sees through an overlay made for it alone, so that no Unix socket in
them is connectable (issue 27 §1, fresh rounds 11 a and 14 c): the home, the directories outside it that
the home's links lead to (~/.cache on another disk), and every other directory tree of the machine but
the run's writable roots (each top-level directory of `/` and every filesystem mounted below one), by
construction rather than by a list of sockets: the operator's PostgreSQL in /run/postgresql or
/var/lib/postgresql, which hands a peer of the gateway's uid the operator's role (SO_PEERCRED), answers no
run.

connect(2) resolves a socket's name to an inode and finds the socket bound on that inode. Through an
overlayfs the name resolves to the overlay's own inode, on which nothing is ever bound, so every socket
there answers ECONNREFUSED whoever bound it, by whatever name (relative, since renamed), in whichever
network namespace, while every file reads as it is. exechost-hostenter (`enter … DIR… --`) makes the
overlays per run, a new superblock each (an overlay caches its lookups: a kept one would show a file the
operator made after a run looked for it as missing), and puts every mount the kept view has below each
directory (hostWritable binds, covers, private dirs) back on top: engine/commands/hostenter/layers.c.

Not layered, and why: the writable roots (`hostWritable`, the agent's private dirs: the agent's own, its
sockets there work), a directory every user may write (/tmp when it is not private: no read-only view keeps
it without taking it from every run; hostPrivate is the construction there), the state dir and what is
covered (nothing to reach), /dev (the view's own, made by bwrap: the host's /dev/log is not in it), a
filesystem no socket can be bound in (proc, sysfs, cgroup, devpts and the other kernel filesystems:
NO_SOCKETS; one whose superblock is read-only, a squashfs snap) and past MOST layers the innermost ones.
The directory of every socket the views hide (the gateway's own ssh-agent in /tmp/ssh-X, /tmp not private:
hostroots.socket_dirs) is a layer of its own wherever no layer shows it, a world-writable tree too (fresh
round 9 y): no socket beside the hidden one connects.
An overlay's lower layer is the directory as the view has it before its layer is made: the layers are made
innermost first, so none is the lower of another (an overlay on an overlay on a Docker host's overlay `/`
would pass the kernel's stacking depth of 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator

from engine.commands import bindsource

# The XDG base directories below the home whose contents are the operator's as the home's are: a link
# there to another disk is followed, as a link among the home's top-level entries is.
XDG_DIRS = (".cache", ".config", ".local/share", ".local/state")
MOST = 60  # directories layered per run (the helper's own cap, MAX_LAYERED, is 64)
MOUNTINFO = "/proc/self/mountinfo"
# Filesystems in which no Unix socket can be bound (no socket inode can be made there: the kernel's own,
# and FAT's, which has no special files), or which are a trigger (autofs: looking under it mounts what it
# names, which is then a mount of its own): never a layer.
NO_SOCKETS = frozenset(
    {
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devpts",
        "efivarfs",
        "exfat",
        "fusectl",
        "iso9660",
        "mqueue",
        "msdos",
        "nfsd",
        "nsfs",
        "proc",
        "pstore",
        "rpc_pipefs",
        "securityfs",
        "selinuxfs",
        "sysfs",
        "tracefs",
        "vfat",
    }
)
# Made by the view itself (bwrap's --dev: device nodes bound one by one), not the host's directory.
VIEWS_OWN = ("/dev",)


def layers(
    home: str,
    skip: Iterable[str] = (),
    writable: Iterable[str] = (),
    mounts: Iterable[str] | None = None,
    *,
    system: bool = False,
    sockets: Iterable[str] = (),
    table: str = MOUNTINFO,
) -> list[str]:
    """The home (resolved), then the real directory outside it of each link among its top-level entries
    and XDG_DIRS, outermost only; none that is `/`, a directory every user may write, one holding the home,
    or one at or under `skip` (the state dir, covered roots, the agent's private dirs: not the operator's
    to show, or shown as the agent's own). Then every filesystem the host has mounted below those
    (`mounts`: the mount points of /proc/self/mountinfo), outer first: an overlay does not reach into a
    mount below its layer, so each is a layer of its own; not one a `writable` root (hostWritable, real
    paths) is: the agent's to write. Nor a linked directory holding or inside a `writable` one (outside
    the home, writable without a bind). With `system`, every other tree of the machine too (each
    top-level directory of `/`, every filesystem mounted below one; `table` when `mounts` is None):
    see the module's docstring for what is left out. `sockets` (resolved): the directory of each socket
    the views hide (the gateway's own ssh-agent, a node's, the Docker engine's), a layer of its own when
    no layer holds it already, in whatever tree it is (a world-writable one too: `/tmp/ssh-X/agent.1`
    with /tmp not private), so no socket beside the hidden one connects either; never `/`, one every
    user may write, the view's own /dev, one at or under `skip` or a writable root, nor one in a
    filesystem no socket can be bound in. Innermost first (each one's lower layer is the directory as
    the view has it, never another layer); past MOST, the innermost are left out, never a `sockets` one."""
    if home == os.sep or not os.path.isdir(home):
        return []
    skipped = [os.path.realpath(s) for s in skip]
    rw = set(writable)
    typed = None if mounts is not None else mount_table(table)
    points = [m[0] for m in typed] if typed is not None else list(mounts or ())
    # a mount no socket can be bound in: never a layer (its mounts below may be)
    inert = {p for p, kind, writable_sb in typed or () if kind in NO_SOCKETS or not writable_sb}
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
    tops: list[str] = []
    if system:
        tops = [t for t in _top_dirs() if t not in kept and t not in inert and _layerable(t, skipped, rw)]
    roots = [*kept, *tops]

    def below_of(tops: list[str]) -> set[str]:  # the mounts below `tops`, each a layer of its own
        under = _Under(tops)
        return {
            p
            for p in points
            if any(k != p for k in under.holders(p))
            and p not in rw
            and p not in inert
            and not any(_inside(p, s) for s in skipped)
            and not any(_inside(p, v) for v in VIEWS_OWN if system)
            and not (system and _shared(p) and not any(_inside(p, k) for k in kept))
            and os.path.isdir(p)
            and not os.path.islink(p)
        }

    below = below_of(roots)
    # a filesystem no socket can be bound in needs no layer: inert counts as one
    shown = {*roots, *below, *inert}
    own = [
        d
        for d in dict.fromkeys(sockets)
        if _own_layer(d, skipped, rw, system) and not _in_layer(d, shown, set(points))
    ]
    below |= below_of(own)
    roots += own
    found = list(dict.fromkeys([*own, *roots, *below]))  # a hidden socket's first: never cut off
    if locked():

        def layerable(sub: str) -> bool:  # a subdirectory in place of the directory holding it
            if sub in VIEWS_OWN or _shared(sub) or any(_inside(sub, w) for w in rw):
                return False
            return not any(_inside(sub, s) for s in skipped)

        # A directory this account cannot search (/root, /var/lib/docker: 0700, 0710 root) holds nothing
        # a run of it reaches by name: no layer needed, nor any below it (a run's uid is the gateway's).
        found = [d for d in found if os.access(d, os.X_OK)]
        found = _unlocked(found, [p for p in points if p != os.sep], layerable)
    # the hidden sockets' directories (or, around a locked mount, their subdirectories) are kept whatever
    # else passes MOST: they are the layers a view counts on (hostroots.shadowed_dirs copies none of them)
    first = [d for d in dict.fromkeys(found) if any(_inside(d, o) for o in own)][:MOST]
    rest = sorted((d for d in dict.fromkeys(found) if d not in first), key=lambda p: (p.count(os.sep), p))
    chosen = [*first, *rest[: MOST - len(first)]]
    return sorted(chosen, key=lambda p: (-p.count(os.sep), p))


def locked() -> bool:
    """Whether the host's mounts are locked where the layers are made: a gateway that is not root makes
    them in a user namespace of its own, where every mount it inherited is MNT_LOCKED, and the kernel
    makes no overlay (nor any bind) of a directory holding one, since that would show what the mount
    covers (clone_private_mount: EINVAL)."""
    return os.geteuid() != 0


def whole(path: str, points: Iterable[str]) -> bool:
    """Whether `path` can be one layer: no host mount below it, or a root gateway (nothing is locked)."""
    return not locked() or not any(p != path and _inside(p, path) for p in points)


def _unlocked(dirs: list[str], points: list[str], layerable: Callable[[str], bool]) -> list[str]:
    """`dirs` with each one that holds a host mount (locked: `locked`) replaced by its subdirectories,
    down to those that hold none (the mounts themselves are layers of their own already). What lies
    directly in such a directory and is not a directory (a socket in /run itself) is in no layer: the
    view covers the hidden ones (hostroots.shadowed_dirs). Links are left: their targets are layers."""
    out: list[str] = []
    todo = list(dirs)
    while todo and len(out) < MOST:
        d = todo.pop(0)
        if whole(d, points):
            out.append(d)
            continue
        try:
            with os.scandir(d) as entries:
                subs = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        todo += [
            s for s in subs if s not in points and s not in dirs and layerable(s) and os.access(s, os.X_OK)
        ]
    return out


def _own_layer(path: str, skipped: list[str], rw: set[str], system: bool) -> bool:
    """Whether a hidden socket's directory may be a layer of its own: a directory (not a link), not `/`,
    the view's own /dev, one every user may write (a read-only view of it would take it from every run:
    the socket keeps only its own empty file), nor one at or under what is skipped (covered, or the
    agent's own copy: the host's socket is not in the view at all) or a writable root (the agent's)."""
    if not system or path == os.sep or not os.path.isdir(path) or os.path.islink(path):
        return False
    if any(_inside(path, v) for v in VIEWS_OWN) or _shared(path):
        return False
    return not any(_inside(path, s) for s in skipped) and not any(_inside(path, w) for w in rw)


def _in_layer(path: str, layered: set[str], points: set[str]) -> bool:
    """Whether `path` is shown through one of the `layered` directories already (or in a filesystem
    that needs none): the nearest of them and of the mount `points` at or above it is one of them. A
    mount between (/tmp's own tmpfs, a writable root's bind) is not in the layer above it: an overlay
    reaches no mount below its directory."""
    here = path
    while here not in layered:
        if here in points or here == os.sep:
            return False
        here = os.path.dirname(here)
    return True


def _top_dirs() -> list[str]:
    """Each directory directly in `/` (not a link to one: its target is one of these)."""
    try:
        with os.scandir(os.sep) as entries:
            return sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _layerable(path: str, skipped: list[str], rw: set[str]) -> bool:
    """A top-level directory shown through a layer: not the view's own /dev, not one every user may write,
    nor one at or under what is skipped or a writable root (a root holding it is then writable whole)."""
    if path in VIEWS_OWN or _shared(path) or os.path.islink(path):
        return False
    return not any(_inside(path, s) for s in skipped) and not any(_inside(path, w) for w in rw)


def mount_table(table: str = MOUNTINFO) -> list[tuple[str, str, bool]]:
    """Every mount of this mount namespace as (mount point, filesystem type, whether its superblock is
    writable: a read-only one can have no socket bound in it, whatever its mounts say)."""
    try:
        with open(table, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[tuple[str, str, bool]] = []
    for line in lines:
        head, sep, tail = line.partition(b" - ")
        fields = head.split(b" ")
        rest = tail.split(b" ")
        if not sep or len(fields) < 5 or len(rest) < 3:
            continue
        point = os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m[1], 8)]), fields[4]))
        found.append((point, os.fsdecode(rest[0]), b"ro" not in rest[2].split(b",")))
    return found


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


class _Under:
    """Which of `roots` hold a path (`_inside(path, root)`), found by the path's own prefixes, a dict
    lookup each (as many as its depth), rather than by trying every root in turn: `roots` is every host
    mount point (~150), asked for each mount point and each fixed dir, per view, per run."""

    def __init__(self, roots: Iterable[str]) -> None:
        self._exact = set(roots)
        self._by: dict[str, list[str]] = {}
        for root in self._exact:
            self._by.setdefault(root.rstrip(os.sep), []).append(root)

    def holders(self, path: str) -> Iterator[str]:
        """Every root `path` is inside (once or twice: a root ending in a separator may match both ways)."""
        if path in self._exact:
            yield path
        # path.startswith(root.rstrip(sep) + sep) <=> root.rstrip(sep) is path[:i] with path[i] a separator
        i = path.find(os.sep)
        while i != -1:
            yield from self._by.get(path[:i], ())
            i = path.find(os.sep, i + 1)


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


def unbound(ops: list[str], layers: list[str]) -> list[str]:
    """`ops` without a bind of a layer over itself (a directory above a protected path fixed in place, a
    read-only dir): own-pts made the layer a read-only mountpoint there already, which no rename moves,
    and bwrap's bind, from the host, would cover it with the host's directory, its sockets and all."""
    out: list[str] = []
    i = 0
    while i < len(ops):
        if ops[i] in ("--bind", "--ro-bind") and i + 2 < len(ops) and ops[i + 1] == ops[i + 2] in layers:
            i += 3
            continue
        out.append(ops[i])
        i += 1
    return out


def outside_layers(dirs: Iterable[str], layers: Iterable[str], holders: Iterable[str]) -> list[str]:
    """`dirs` (directories a view would bind over themselves, fixed in place) but those a run's read-only
    layer holds (fresh round 16 a): in a layer no run renames anything, and a bind of one from the host,
    put back over the layer as every mount below it is (layers.c; own-pts carries it for bwrap), would make
    its whole tree the host's again, writable, its sockets connecting. Not one inside a `holders` path
    (a writable root, a private dir, a cover, any host mount) strictly below its innermost layer: that is
    put back over the layer as it is, possibly writable, so the bind stays."""
    layered = sorted(set(layers), key=lambda p: -p.count(os.sep))
    held = _Under(holders)
    out: list[str] = []
    for d in dirs:
        layer = next((lay for lay in layered if _inside(d, lay)), None)
        if layer is None or any(h != layer and _inside(h, layer) for h in held.holders(d)):
            out.append(d)
    return out
