"""What the operator keeps from other accounts in the home is kept from gateway-host runs too: the agent is
another principal (issue 27 §1, fresh round 11 a: the browser profile's Cookies DB, decrypted with the
constant Linux key, was every host run's; before it ~/.ssh's keys, ~/.netrc, a git credential cache).

The rule is about a property, never a list of applications: a directory of the home another account may
not both list and enter (no `r` or no `x` for "other": 0700 ~/.ssh, ~/.gnupg, ~/.config/chromium,
~/.mozilla, ~/.cache/git/credential) is shown to host runs as an empty read-only directory, and a regular
file another account may not read (0600 ~/.netrc, ~/.git-credentials, a token's ~/.npmrc, Cookies) as the
empty file. What the view keeps readable on purpose is named by the caller (`keep_files`, `keep_dirs`:
the operator's git config and its includes, the ssh config, its includes and known_hosts, the PATH and
import dirs, the hostWritable dirs); a private directory on the way to one is shown, its other entries
hidden whatever their own mode. A link in the home to a private file or directory of this account outside
it hides the target at its real path; a link to a public one of this account is walked as the home is.

Found without a full walk per run: the home is walked once, pruned at each hidden directory (nothing
below one is read), and each directory's listing (names and modes) is kept keyed by its (device, inode,
mtime, ctime); a later view stats each walked directory and reads again only those that changed. A
directory's own mode is read from that stat, so a directory made private later is hidden at the next
view. A file's mode is its listing's: `chmod 600` of a file in a directory not changed since is seen when
the cache is read afresh (REREAD_AFTER), or when its directory next changes (a credential saved by
create or rename changes it). Past WALK_BUDGET entries the walk stops and every directory not read is
hidden whole (not shown); the directories outside the home that the home's links lead to have a
budget each of their own (LINKED_BUDGET: a root gateway's link to /usr/share must not use up the
home's), past which they are left as the host has them; past MAX_MOUNTS hidden paths (one mount each,
and a file one fd) the directories holding them are hidden whole instead.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.commands import privatefs

WALK_BUDGET = 200_000  # entries listed per view (read or cached) before the rest is hidden whole
# hidden paths, one mount each (bwrap reads the mount table per mount: n² in all; a file's bind takes an
# fd too); past it the directories holding them are hidden whole
MAX_MOUNTS = 256
LINKED_BUDGET = 20_000  # entries listed below each directory outside the home a link of the home names
REREAD_AFTER = 600.0  # seconds a listing is trusted by its directory's stat alone
# directories a view may stat on an event loop (~5 us each); a home walked with more is checked in a thread
LOOP_DIRS = 2_000


@dataclass(frozen=True)
class Listing:
    """One directory's entries as read: (name, lstat mode, real path of a link's target or ""), and what
    a view needs of them when no kept path is below (most directories): read per view as it is."""

    key: tuple[int, int, int, int]
    entries: tuple[tuple[str, int, str], ...]
    subdirs: tuple[str, ...]
    private_files: tuple[str, ...]
    targets: tuple[str, ...]  # every link's


@dataclass
class Found:
    """What a view hides: directories covered with an empty read-only tmpfs, files with the empty file."""

    dirs: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    past_budget: bool = False
    walked: int = 0  # directories stat'ed


_cache: dict[str, Listing] = {}
_lock = threading.Lock()
_read_at = [0.0]
_walked: dict[str, int] = {}  # directories stat'ed by the last view of each home
_here = threading.local()  # this thread's last answer: what the view it is building hides (hides())
reads = [0]  # directories listed (not answered from the cache): the cache's test counts them


def private_mode(mode: int) -> bool:
    """Whether another account is kept from it: a directory it may not both list and enter, a regular
    file it may not read. Anything else (a link, a socket, a device) is not judged by its own mode."""
    if stat.S_ISDIR(mode):
        return mode & (stat.S_IROTH | stat.S_IXOTH) != (stat.S_IROTH | stat.S_IXOTH)
    if stat.S_ISREG(mode):
        return not mode & stat.S_IROTH
    return False


def known(home: str) -> bool:
    """Whether a view of the home can be found without blocking an event loop: walked already (a view
    then re-reads only what changed) and small enough that its directories' stats take a few ms."""
    return home in _cache and _walked.get(home, LOOP_DIRS + 1) <= LOOP_DIRS


def clear() -> None:
    with _lock:
        _cache.clear()


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _listing(d: str, st: os.stat_result) -> Listing | None:
    """d's entries, from the cache when its stat is the one they were read under."""
    key = _key(st)
    cached = _cache.get(d)
    if cached is not None and cached.key == key:
        return cached
    try:
        with os.scandir(d) as it:
            raw = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in it]
    except OSError:
        return None  # unreadable by this account: by its runs too
    entries = []
    for name, mode in raw:
        target = ""
        if stat.S_ISLNK(mode):
            try:
                target = os.path.realpath(os.path.join(d, name), strict=False)
            except (OSError, ValueError):
                target = ""
        entries.append((name, mode, target))
    entries.sort()
    listing = Listing(
        key,
        tuple(entries),
        tuple(os.path.join(d, n) for n, m, _t in entries if stat.S_ISDIR(m)),
        tuple(os.path.join(d, n) for n, m, _t in entries if stat.S_ISREG(m) and private_mode(m)),
        tuple(t for _n, _m, t in entries if t),
    )
    reads[0] += 1
    _cache[d] = listing
    return listing


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def find(
    home: str,
    keep_files: list[str],
    keep_dirs: list[str],
    never: tuple[str, ...] = (),
    budget: int = WALK_BUDGET,
) -> Found:
    """What to hide of `home` (a real path) and of what its links lead to. `keep_files`/`keep_dirs` (real
    paths: what the gateway or a program it trusts reads) are reached through the private directories
    above them and judged by their own mode, never shown whole (privacy wins, fresh round 14 c): a kept
    file another account could not read is hidden; a kept dir is walked as any directory is, shown
    itself, but with every entry hidden when its own mode is private. `never` (real paths: the home, the
    state dir, the hostWritable dirs) is shown as it is, not walked."""
    with _lock:
        if time.monotonic() - _read_at[0] > REREAD_AFTER:
            _cache.clear()
            _read_at[0] = time.monotonic()
        found = _find(home, set(keep_files), set(keep_dirs), set(never), budget)
        _walked[home] = found.walked
        _here.found = found
        return found


def hides(path: str) -> bool:
    """Whether the view this thread built last (its find()) hides `path` (absolute, as the view names it):
    a copy a run's view binds over it later (a vetted file pinned at its path) would show it again."""
    found: Found | None = getattr(_here, "found", None)
    if found is None:
        return False
    return path in set(found.files) or below(os.path.dirname(path), set(found.dirs))


def owner_only_mounts(table: str = "/proc/self/mountinfo") -> set[str]:
    """Mount points of filesystems only the account that mounted them may enter, whatever their files'
    modes say: FUSE without `allow_other` (a decrypted gocryptfs or cryfs vault, an sshfs; fresh round
    15 b), which the kernel keeps from every other account, root included. Private as a whole."""
    points: set[str] = set()
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" - ", 1)
                if len(fields) != 2:
                    continue
                tail = fields[1].split()
                if len(tail) < 3 or not (tail[0] in ("fuse", "fuseblk") or tail[0].startswith("fuse.")):
                    continue
                if "allow_other" not in tail[2].split(","):
                    words = fields[0].split()
                    if len(words) > 4:
                        points.add(privatefs.unescape(words[4]))
    except OSError:
        pass
    return points


def _find(home: str, files: set[str], kept: set[str], dirs: set[str], budget: int) -> Found:
    found = Found()
    owner_only = owner_only_mounts()
    way: set[str] = set()  # every directory above a kept or shown path, up to its walk root
    for path in files | kept | dirs:
        here = os.path.dirname(path)
        while here not in way and len(here) > 1:
            way.add(here)
            here = os.path.dirname(here)
    skip = dirs | kept  # what _outside_target leaves as it is (a kept file it judges)
    kept = kept | files  # a "file" that is a directory (core.hooksPath) is walked as a kept dir
    way |= kept  # a kept dir is walked as one on the way is: shown, its entries judged
    left = budget
    linked_left: dict[str, int] = {}  # each linked root's own budget
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[str, bool, str]] = [(home, False, "")]  # (dir, below a private one, linked root)
    roots = {home}
    while stack:
        d, below, linked = stack.pop()
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        found.walked += 1
        on_way = d in way
        if d in owner_only and d not in roots:  # no mode inside it means anything: hidden whole, kept
            found.dirs.append(d)  # paths in it too (privacy wins)
            continue
        private = d not in roots and (below or private_mode(st.st_mode))
        if private and not on_way:
            found.dirs.append(d)
            continue
        if linked and linked_left.setdefault(linked, LINKED_BUDGET) <= 0:
            continue  # outside the home, past its bound: left as the host has it (not the home's rule)
        if left <= 0 and not on_way and not linked:
            found.dirs.append(d)  # past the bound: hidden whole, never shown unread
            found.past_budget = True
            continue
        listing = _listing(d, st)
        if listing is None:
            continue
        if linked:
            linked_left[linked] -= len(listing.entries)
        else:
            left -= len(listing.entries)
        if not on_way:  # no kept path below: the listing's own answer (and d is not private here)
            stack.extend((p, False, linked) for p in listing.subdirs)
            found.files.extend(listing.private_files)
            for target in listing.targets:
                if not _inside(target, home):
                    _outside_target(target, found, stack, roots, skip)
            continue
        for name, mode, target in listing.entries:
            path = os.path.join(d, name)
            if path in dirs:
                continue  # shown as it is
            if path in files and not stat.S_ISDIR(mode):  # trusted, judged by its own mode all the same
                if stat.S_ISREG(mode) and private_mode(mode):
                    found.files.append(path)
                continue
            if path in kept or path in files:  # a kept dir (a git include naming one: core.hooksPath)
                stack.append((path, False, linked))  # its own mode decides (its entries' if private)
            elif stat.S_ISDIR(mode):
                stack.append((path, private, linked))
            elif stat.S_ISREG(mode):
                if private or private_mode(mode):
                    found.files.append(path)
            elif stat.S_ISLNK(mode) and target and not _inside(target, home):
                _outside_target(target, found, stack, roots, skip)
    # one outside the home (or below a directory the walk did not reach) is covered where it is mounted:
    # never the home itself or a directory holding it
    for point in sorted(owner_only):
        if not _inside(home, point) and point not in dirs:
            found.dirs.append(point)
    _bound_mounts(found, way, home)
    return found


def _outside_target(
    target: str,
    found: Found,
    stack: list[tuple[str, bool, str]],
    roots: set[str],
    dirs: set[str],
) -> None:
    """A link from the home to `target` (real, outside it): a private file or directory there is hidden
    at its real path (a kept file too: privacy wins); a public directory is walked as a root of its own.
    Not one that holds or is inside a kept or shown dir (`/`, the state dir, a PATH dir)."""
    if any(_inside(k, target) or _inside(target, k) for k in dirs):
        return
    try:
        st = os.stat(target)
    except OSError:
        return
    if st.st_uid != os.geteuid():
        return  # outside the home only this account's own is judged (not /usr/share behind a link)
    if stat.S_ISDIR(st.st_mode):
        if private_mode(st.st_mode):
            found.dirs.append(target)
        elif target not in roots:
            roots.add(target)
            stack.append((target, False, target))
    elif stat.S_ISREG(st.st_mode) and private_mode(st.st_mode):
        found.files.append(target)


def _bound_mounts(found: Found, way: set[str], home: str) -> None:
    """Past MAX_MOUNTS hidden paths (each one mount; a file one fd too), the directories holding the most
    are hidden whole instead (never the home, nor one on the way to a kept path), climbing a level at a
    time when none holds two: fewer, larger covers, and never a path shown."""
    found.dirs = list(dict.fromkeys(found.dirs))
    found.files = list(dict.fromkeys(found.files))
    items = set(found.dirs) | set(found.files)
    files = set(found.files)
    while len(items) > MAX_MOUNTS:
        by_parent: dict[str, list[str]] = {}
        for p in items:
            parent = os.path.dirname(p)
            if parent not in way and parent != home and len(parent) > 1:
                by_parent.setdefault(parent, []).append(p)
        if not by_parent:
            break
        merging = sorted(by_parent.items(), key=lambda item: -len(item[1]))
        if len(merging[0][1]) < 2:  # none holds two: every one a level up
            chosen = merging
        else:
            chosen, over = [], len(items) - MAX_MOUNTS
            for parent, children in merging:
                if over <= 0 or len(children) < 2:
                    break
                chosen.append((parent, children))
                over -= len(children) - 1
        for parent, children in chosen:
            items.difference_update(children)
            files.difference_update(children)
            items.add(parent)
        found.past_budget = True
    found.files = sorted(items & files)
    found.dirs = sorted(items - files)


def unhidden(args: list[str], also: Callable[[str], bool] | None = None) -> list[str]:
    """`args` (a pinned view's) without the copies (`--perms m --ro-bind-data fd dest`) at a path the host
    view this thread just built hides (or `also` says is covered: another agent's dir): a vetted file
    copied back over its cover would show it again."""
    out: list[str] = []
    i = 0
    while i < len(args):
        copy = args[i] == "--perms" and i + 4 < len(args) and args[i + 2] == "--ro-bind-data"
        if copy and (hides(args[i + 4]) or (also is not None and also(args[i + 4]))):
            i += 5
            continue
        out.append(args[i])
        i += 1
    return out


def view_ops(empty: str, found: Found) -> list[str]:
    """The bwrap operations: each hidden directory an empty read-only tmpfs (no fd, no source), outermost
    first, none below another; each hidden file bound over with the empty file `empty`."""
    ops: list[str] = []
    covered: set[str] = set()
    for d in sorted(found.dirs, key=lambda p: (p.count(os.sep), p)):
        if not below(d, covered):
            covered.add(d)
            ops += ["--tmpfs", d, "--remount-ro", d]
    for f in found.files:
        if not below(f, covered):
            ops += ["--ro-bind", empty, f]
    return ops


def below(path: str, covered: set[str]) -> bool:
    """Whether `path` is one of `covered` or below one (one set lookup per level)."""
    while len(path) > 1:
        if path in covered:
            return True
        path = os.path.dirname(path)
    return False
