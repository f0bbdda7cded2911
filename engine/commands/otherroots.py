"""Every other agent's `hostWritable` dirs are covered in an agent's host view, so an agent's per-agent
project dir is its own: the home is read-only in each view but was never hidden, and every agent's host runs
read what another's wrote there (fresh round 12 a). Kept apart by place, as the private /tmp dirs are.

The rule is the innermost root's: a path of the home below some agent's `hostWritable` root belongs to the
innermost root holding it. In this agent's view a path whose innermost root is another agent's (and not
also this agent's) is an empty read-only tmpfs; one whose innermost root is this agent's is bound back
writable on top of the cover that holds it. Where another agent's root lies below one of this agent's, each
directory between the two is bound over itself first, so it is a mountpoint in this agent's view: no run of
it renames the other agent's dir (or a directory on the way) out from under the cover (EBUSY), and the next
view's cover, found by name, lands where the last one did. A root missing now is made (0700, one directory
at a time by fd, no link followed), as a sandbox workspace root is: a view kept from before would otherwise
show it once something made it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from engine.commands import hostprivate

_here = threading.local()  # this thread's last view: (own roots, other roots covered), for hides()


def resolve(given: str) -> str:
    """A `hostWritable` entry as every view resolves it (the owner's bind and every other's cover)."""
    return os.path.realpath(os.path.abspath(os.path.expanduser(given)))


def others(
    writable: Iterable[str],
    anywhere: Iterable[str],
    home: str,
    skip: Iterable[str] = (),
    needed: Callable[[], Iterable[str]] | None = None,
) -> list[str]:
    """Every other agent's root (resolved), not one of `writable`'s (this agent's: a root both name is both
    agents'), not at or under `skip` (the state dir and covered roots, covered whole already; the agent's
    private dirs, its own copies), never `/` nor one holding the home; outside the home, not one holding
    a path of `needed()` (what every run needs: the state dir, the trusted and PATH dirs, the install),
    which no view can hide (asked only when there is such a root); outermost first."""
    own = {resolve(w) for w in writable}
    skipped = [os.path.realpath(s) for s in skip]
    found = {resolve(w) for w in anywhere} - own
    kept = [r for r in found if not _inside(home, r) and not any(_inside(r, s) for s in skipped)]
    outer = [r for r in kept if not _inside(r, home)]
    if outer and needed is not None:
        must = [os.path.realpath(n) for n in needed()]
        kept = [r for r in kept if _inside(r, home) or not any(_inside(n, r) for n in must)]
    return sorted(kept, key=_depth_key)


def hidden_at(path: str, own: Iterable[str], other: Iterable[str]) -> str | None:
    """The other agent's root whose cover hides `path` (resolved) in this agent's view: the innermost root
    holding it, when that is not one of `own`; None when it shows."""
    owner = _innermost(path, [*own, *other], strict=False)
    return owner if owner is not None and owner not in set(own) else None


def hides(path: str) -> bool:
    """Whether the view this thread built last (its ops()) covers `path` (absolute, as the view names it,
    or where it leads): a copy a run's view binds over it later (a vetted file pinned at its path, a
    sealed copy of a script) would show another agent's file again."""
    own, other = getattr(_here, "view", ([], []))
    if not other:
        return False
    named = os.path.abspath(path)
    return any(hidden_at(p, own, other) is not None for p in {named, os.path.realpath(named)})


def make_missing(own: list[str], other: list[str], home: str, named: Iterable[str]) -> None:
    """Each missing root of `other` that its config names with no link on the way (`named`: the lexical
    names; through a link a run may re-point, never) made (0700) from the innermost existing root of this
    agent's holding it, or from the home, or outside it from the nearest existing directory (itself no
    link), one directory at a time by fd with no link followed: a run may have planted one on the way.
    Not one below another agent's root (hidden with it)."""
    plain = set(named)
    for root in other:
        if os.path.lexists(root) or root not in plain:
            continue
        holder = _innermost(root, [*own, *other], strict=True)
        if holder is not None and holder not in own:
            continue
        start = holder if holder is not None else home
        if not _inside(root, home):
            start = os.path.dirname(root)
            while start != os.sep and not os.path.lexists(start):
                start = os.path.dirname(start)
            if start == os.sep or os.path.realpath(start) != start:
                continue  # `/` (never made in), or reached through a link
        _make_from(start, root)


def ops(own: list[str], other: list[str]) -> list[str]:
    """The bwrap operations, after every other operation on the home but the private dirs: by depth, each
    directory between a root of this agent's and another agent's root below it bound over itself, each
    other root whose innermost holder is not another's covered, each of this agent's roots inside a cover
    bound back; then each cover made read-only (bwrap made the mountpoints of the roots bound back in it).
    `own`: this agent's roots as bound (present, resolved); `other`: others(), present ones only kept."""
    present = [r for r in other if os.path.isdir(r) and not os.path.islink(r)]
    roots = [*own, *present]
    _here.view = (list(own), present)
    steps: list[tuple[tuple[int, str], list[str]]] = []
    covers: list[str] = []
    fixed: set[str] = set()
    for root in present:
        holder = _innermost(root, roots, strict=True)
        if holder is not None and holder not in own:
            continue  # inside another agent's cover already
        if holder is not None:
            here = os.path.dirname(root)
            while here != holder and _inside(here, holder) and here not in fixed:
                fixed.add(here)
                steps.append((_depth_key(here), ["--bind", here, here]))
                here = os.path.dirname(here)
        steps.append((_depth_key(root), ["--tmpfs", root]))
        covers.append(root)
    for root in own:
        holder = _innermost(root, roots, strict=True)
        if holder is not None and holder not in own:
            steps.append((_depth_key(root), ["--bind", root, root]))
    steps.sort(key=lambda step: step[0])
    out = [word for _key, words in steps for word in words]
    for root in covers:
        out += ["--remount-ro", root]
    return out


def _innermost(path: str, roots: list[str], *, strict: bool) -> str | None:
    holding = [r for r in roots if _inside(path, r) and (r != path or not strict)]
    return max(holding, key=len, default=None)


def _make_from(start: str, path: str) -> None:
    """`path` made below `start` (an existing directory), each missing directory 0700, by fd; a link or a
    file on the way: nothing more is made."""
    if not _inside(path, start) or path == start:
        return
    hostprivate.make_below(start, path)


def _depth_key(path: str) -> tuple[int, str]:
    return path.count(os.sep), path


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
