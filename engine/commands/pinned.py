"""Host tools read exactly the bytes that were vetted: the run starts in a private mount namespace
(bubblewrap) where each vetted file is a read-only copy of the bytes checked, and git is pointed at the
repository that was vetted instead of finding one itself (issue 27 §4, §5).

Not a sandbox (engine.sandbox is): the command sees the whole host as before, writable as before; only the
files it takes code from are replaced, in its own view, by the copies that were decided on.

Git's repository config is not bound over its path: Linux detaches a bind mount whose mountpoint is
renamed over in another namespace, so an agent renaming a new `.git/config` into place would reach git
again. Instead GIT_COMMON_DIR names a directory that exists only inside the namespace (a tmpfs) holding
the vetted config and links to the repository's objects, refs and logs; no path the agent can rename
leads to a config there. make is handed its makefiles the same way, by a name no rename reaches
(`-f /proc/self/fd/N`), and so is every make it starts (a recipe's `$(MAKE)`: engine.commands.submake);
a script is handed its copy in its mirror, a tmpfs of the namespace (verified.Mirror), so "$0" re-reads
the copy too. Files bound at their own path (a submodule's config, a file a script names by a literal
path, an `include`d makefile) keep that one limit: a rename over them after the spawn reaches a later
re-read.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from engine.commands import homeprivate, hostkeeper, hostoutside, hostprivate, hostview, otherroots, submake
from engine.commands.gitvet import Record, Repo, parse_argv
from engine.commands.interpreters import name_of
from engine.commands.makefiles import DEFAULTS, MakeRead, parse_make, reads
from engine.commands.rendering import render_bound
from engine.commands.treecode import TreeChanged, TreeVet, agent_writable
from engine.commands.verified import Mirror, StaleContent, VerifiedRun, sealed_copy, view_root
from engine.statefs import state_dir

# Entries of a repository's common dir (git's path.c common_list): linked from the view, so reads and
# writes of objects, refs, packed-refs and logs go to the repository; only `config` is the vetted copy.
# Linked even when absent, so a file git creates (packed-refs, shallow) lands in the repository too.
# Not `remotes/` and `branches/`: git reads remotes from their files, which no vet reads (gitvet asks
# while they hold any), so the view has none and one made after the vet is not seen either.
COMMON_ENTRIES = (
    "objects", "refs", "packed-refs", "logs", "info", "hooks", "rr-cache", "svn",
    "shallow", "worktrees", "modules", "lost-found", "lfs", "common", "gc.pid", "gc.log", "description",
)  # fmt: skip
# Subcommands that make a repository where GIT_DIR would point: not pointed at "no repository". Every other
# git that was vetted with none is (`git help` and `git --help` find one themselves and read its config:
# help.format, man.viewer, man.<tool>.cmd; with GIT_DIR naming nothing they work as outside any repository).
_NO_REPO = frozenset({"init", "clone"})
NO_REPOSITORY = "no-repository"
MIRROR_MAX = 1024  # entries of each directory above a script linked in its mirror (Mirror)
# links of all a view's mirrors together: bwrap refuses more than 9,000 arguments in all (three a link), so
# the levels nearest each script are linked first and a crowded far one (/tmp) keeps what is left
MIRROR_BUDGET = 2000


class PinError(Exception):
    """The run cannot be pinned to what was vetted: it is refused."""


bwrap_path = hostview.bwrap_path


@dataclass
class PinnedView:
    """What wraps the run: the bwrap words before the command, env for git, the copies' fds."""

    prefix: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    fds: tuple[int, ...] = ()

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()

    def check_cwd(self, fd: int) -> bool:
        """Have the view check that the command's working directory is the one `fd` holds, and close `fd`
        before the command runs (exechost-hostenter's CWD word); False when the view cannot (no helper,
        or no view): the caller checks in the shell (in_checked_cwd). A directory fd of the host's mount
        namespace left open in the view is a way out of it: /proc/self/fd/N/.. walks the host's mounts."""
        for i, word in enumerate(self.prefix):
            slot = {"enter": i + 3, "check-cwd": i + 1}.get(word)
            helper = i > 0 and self.prefix[i - 1] == hostkeeper.helper_path()
            if slot is not None and helper and self.prefix[slot] == hostkeeper.NO_CWD:
                self.prefix = (*self.prefix[:slot], str(fd), *self.prefix[slot + 1 :])
                return True
        return False

    def terminal(self) -> bool:
        """Have the view make the run's terminal in its own /dev/pts and hand its master to the session
        host (RunSpec.pty_in_view); False when it cannot (no helper, or no view): the run's terminal is
        then made outside, as without the view."""
        for i, word in enumerate(self.prefix):
            slot = {"enter": i + 4, "own-pts": i + 1}.get(word)
            helper = i > 0 and self.prefix[i - 1] == hostkeeper.helper_path()
            if slot is not None and helper and self.prefix[slot] == hostkeeper.NO_PTY:
                self.prefix = (*self.prefix[:slot], hostkeeper.TERMINAL_SOCKET, *self.prefix[slot + 1 :])
                return True
        return False

    def argv(self, shell: str, command: str) -> list[str] | None:
        """The argv that runs `command` in the view; None when there is nothing to pin."""
        return [*self.prefix, shell, "-c", command] if self.prefix else None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]


def view_for(
    tree: TreeVet | None,
    run: VerifiedRun | None = None,
    anchor: str | None = None,
    *,
    host: bool = False,
    outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE,
) -> PinnedView:
    """The view a decided run starts in: `tree` vetted again keeping its bytes (refused as StaleContent
    when they are not what was decided on), plus the verified scripts that re-read themselves. `anchor`:
    the cwd's files are re-read through the spawn's fd of the cwd (TreeVet.pin). A make in `run` is
    handed its vetted makefiles as sealed copies (`run.command` is rendered again with them). `host`: the
    host view too (engine.commands.hostview), in the same bwrap, hiding `outside`."""
    try:
        record = tree.pin(anchor) if tree is not None and tree.commands else None
        programs = _submake_programs(tree, record) if tree is not None and record is not None else {}
        view = pinned_view(
            record,
            run.rereads if run is not None else (),
            host=host,
            outside=outside,
            mirrors=run.mirrors if run is not None else (),
            programs=programs,
        )
    except (TreeChanged, PinError) as exc:
        raise StaleContent(str(exc)) from None
    if tree is None or record is None or run is None:
        return view
    try:
        _argv_swaps(tree, record, run, view)
    except BaseException as exc:
        view.close()
        if isinstance(exc, PinError):
            raise StaleContent(str(exc)) from None
        raise
    return view


# A name MAKEFILE_LIST can be given back without quoting (patsubst's commas, parentheses, `$`, spaces
# and `%` would need escaping; such a name keeps the copy's /proc/self/fd/N in MAKEFILE_LIST).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._+/-]+")


# git subcommands that look inside submodules' work trees unless told not to on their command line: a
# submodule's own `ignore = none` in `.gitmodules` (the work tree's, read after the spawn) overrides the
# forced `diff.ignoreSubmodules=dirty` (hostenv.GIT_FORCED_CONFIG); the command-line option overrides both.
_SUBMODULE_LOOKERS = frozenset({"status", "diff"})
IGNORE_SUBMODULES = "--ignore-submodules=dirty"


def _argv_swaps(tree: TreeVet, record: Record, run: VerifiedRun, view: PinnedView) -> None:
    """Words the spawn puts into the command: a make's sealed makefiles (below), and a git status or diff
    told on its command line never to run git inside a submodule (a gitlink added after the re-vet names
    a repository nobody vetted). The command is rendered again with them. When the raw text runs instead
    of a rendering (security=full, or approved text that could not be rendered: shown or allowed whole),
    it runs as it is, reading by path in the view."""
    words: dict[tuple[tuple[int, ...], int], list[str]] = {}
    for (argv, paths), where in zip(tree.commands, tree.wheres, strict=False):
        if {name_of(argv[0]), *(name_of(p) for p in paths if p)} & {"git"}:
            sub = parse_argv(argv, "/")
            if sub.subcommand in _SUBMODULE_LOOKERS:
                index = len(argv) - len(sub.rest) - 1
                words[(where, index)] = [argv[index], IGNORE_SUBMODULES]
    _make_reads_copies(tree, record, run, view, words)
    if not words:
        return
    analysis, result = tree.analysis, tree.result
    if analysis is not None and result is not None and render_bound(analysis, result, {}) == run.source:
        rendered = render_bound(analysis, result, {**run.words, **words})
        if rendered is not None:
            run.command = rendered


def _make_reads_copies(
    tree: TreeVet,
    record: Record,
    run: VerifiedRun,
    view: PinnedView,
    words: dict[tuple[tuple[int, ...], int], list[str]],
) -> None:
    """Every make of the command reads its makefiles from sealed copies of the vetted bytes, by a name
    no rename reaches: `-f /proc/self/fd/N` (the fd is the child's own), and a makefile that was absent
    stays absent (`-f /dev/null` for the default lookup). A bind at the makefile's path is not enough:
    Linux detaches it when a file is renamed over that path outside the namespace, and make's first read
    comes after the spawn. The copy starts with one line that gives MAKEFILE_LIST back the makefile's own
    name, so `$(lastword $(MAKEFILE_LIST))` still finds the project (error messages name the fd, one line
    on)."""
    fds: list[int] = []
    try:
        for where, paths, swaps in _make_swaps(tree, record):
            for swap in swaps:
                target = swap.target
                if swap.data is not None:
                    fd = sealed_copy(swap.data, swap.name, _makefile_list(swap.name))
                    fds.append(fd)
                    target = f"/proc/self/fd/{fd}"
                if swap.slot is None:
                    words[(where, 0)] = [*_exe_words(run, where, paths), "-f", target]
                else:
                    index, prefix = swap.slot
                    words[(where, index)] = [prefix + target]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    view.fds = (*view.fds, *fds)


def _make_swaps(
    tree: TreeVet, record: Record
) -> list[tuple[tuple[int, ...], tuple[str | None, ...], list[_Swap]]]:
    """For each make of the command: where it sits, its paths, and what it reads instead of each
    makefile (_make_targets). A make whose argv asked, naming an option, runs as shown."""
    out = []
    asked = {f.path for f in tree.found}
    for (argv, paths), where in zip(tree.commands, tree.wheres, strict=False):
        if not {name_of(argv[0]), *(name_of(p) for p in paths if p)} & {"make", "gmake"}:
            continue
        args = parse_make(argv)
        if args.problem is None:
            out.append((where, paths, _make_targets(reads(args, tree.real_cwd), record, tree.roots, asked)))
    return out


def _submake_programs(tree: TreeVet, record: Record) -> list[tuple[str, str, bytes]]:
    """For each make program of the command: its real path, the directory of the view that holds the
    real make and the program bound over its path (engine.commands.submake), and that program. Every
    make the run starts (a recipe's `$(MAKE)`, a bare `make`, one a script runs) then reads the vetted
    makefiles by their directory's identity, not by a path a rename over it (outside the run's
    namespace) detaches a bind from."""
    held: dict[str, list[submake.Held]] = {}
    for _where, paths, swaps in _make_swaps(tree, record):
        make = paths[0] if paths and paths[0] else None
        if make is None:
            continue
        mine = held.setdefault(make, [])
        for swap in swaps:
            if swap.data is not None and swap.path:
                h = submake.held_in(swap.path, os.path.basename(swap.path), swap.data, swap.slot is None)
                if h is not None:
                    mine.append(h)
    out: list[tuple[str, str, bytes]] = []
    by_real: dict[str, list[submake.Held]] = {}
    for make, items in held.items():
        by_real.setdefault(os.path.realpath(make), []).extend(items)
    for real, items in sorted(by_real.items()):
        where = os.path.join(view_root(), f"mk{len(out)}")
        text = submake.program(real, items, os.path.join(where, "real")) if items else None
        if text is not None:
            out.append((real, where, text))
    return out


def _makefile_list(name: str) -> Callable[[int], bytes]:
    def head(fd: int) -> bytes:
        if not _PLAIN_NAME.fullmatch(name):
            return b""
        return f"MAKEFILE_LIST := $(patsubst /proc/self/fd/{fd},{name},$(MAKEFILE_LIST))\n".encode()

    return head


def _make_targets(
    found: list[MakeRead], record: Record, roots: Sequence[str], asked: set[str]
) -> list[_Swap]:
    """What make is given instead of each makefile a racer could swap: the vetted bytes (a makefile read
    at the re-vet), or a name that stays absent (a makefile that was absent, in a directory the agent can
    write). A makefile only root or the operator can change is read where it is."""
    out: list[_Swap] = []
    for read in found:
        where = os.path.dirname(read.path)
        if read.slot is None:  # the default lookup: the first of DEFAULTS that was there when vetted
            held = [os.path.join(where, n) for n in DEFAULTS if os.path.join(where, n) in record.data]
            if held:
                out.append(_Swap(None, os.path.basename(held[0]), "", record.data[held[0]], held[0]))
            elif agent_writable(where, roots):
                if any(_regular(os.path.join(where, n)) for n in DEFAULTS):
                    raise PinError(f"a makefile appeared in {where} since the tree was vetted")
                out.append(_Swap(None, read.name, "/dev/null", None))
            continue
        data = record.data.get(read.path)
        if data is not None:
            out.append(_Swap(read.slot, read.name, "", data, read.path))
        elif agent_writable(where, roots):
            if os.path.lexists(read.path) and (_regular(read.path) or read.path not in asked):
                # absent when vetted (a regular one would be held; another kind was asked about)
                raise PinError(f"{read.path} appeared since the tree was vetted")
            if not os.path.lexists(read.path):
                out.append(_Swap(read.slot, read.name, "/dev/null/" + os.path.basename(read.path), None))
    return out


@dataclass(frozen=True)
class _Swap:
    slot: tuple[int, str] | None  # MakeRead.slot
    name: str  # the makefile's name as make knows it (MAKEFILE_LIST)
    target: str  # what make reads instead ("" for a sealed copy of `data`)
    data: bytes | None
    path: str = ""  # the vetted makefile's path (for a copy of `data`)


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode) or os.path.isfile(path)
    except OSError:
        return False


def _exe_words(run: VerifiedRun, where: tuple[int, ...], paths: Sequence[str | None]) -> list[str]:
    """The words that run a segment's executable, as the rendering has them: a sealed copy's words
    when content binding replaced it, else its pinned path (rendering.pin_path)."""
    held = run.words.get((where, 0))
    if held is not None:
        return list(held)
    real, named = [*paths, None, None][:2]
    if named is not None and real is not None and os.path.basename(named) != os.path.basename(real):
        return [named]
    return [real or named or "make"]


@dataclass
class _Builder:
    root: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    bound: set[str] = field(default_factory=set)
    # a host path as the run's view names it: a file the decision read in the agent's private copy of a
    # dir (engine.commands.hostprivate) is at the private dir's own name there, never the state dir's
    place: Callable[[str], str] = str
    mirror_links: int = MIRROR_BUDGET  # left for this view's mirrors
    sources: list[str] = field(default_factory=list)  # the mirrored scripts' own paths

    def data(self, data: bytes, dest: str) -> None:
        """A read-only copy of `data` at `dest` (bwrap reads the fd once, at setup)."""
        if dest in self.bound:
            return
        fd = sealed_copy(data, os.path.basename(dest))
        os.lseek(fd, 0, os.SEEK_SET)  # bwrap reads from the current offset
        os.set_inheritable(fd, True)
        self.fds.append(fd)
        self.bound.add(dest)
        # The copy keeps whether the file could be run (a bound `SHELL=./s.sh`, a tool script): bwrap
        # makes it 0600 otherwise, and an approved run would fail where the file itself works.
        try:
            runnable = os.stat(dest).st_mode & 0o111
        except OSError:
            runnable = 0
        self.args += ["--perms", "0500" if runnable else "0400", "--ro-bind-data", str(fd), self.place(dest)]

    def over(self, real: str, where: str, text: bytes) -> None:
        """The root-owned program at `real` replaced, in the view, by `text` (bound over `real`: root's
        path, where the agent renames nothing), the real one bound at `where`/real, in a read-only tmpfs
        of its own (nothing can be renamed over it there, even through /proc/PID/root from outside)."""
        fd = sealed_copy(text, os.path.basename(real))
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        self.fds.append(fd)
        self.args += ["--tmpfs", where, "--ro-bind", real, os.path.join(where, "real"), "--remount-ro", where]
        self.args += ["--perms", "0555", "--ro-bind-data", str(fd), real]

    def mirror(self, mirror: Mirror) -> None:
        """The copy at `mirror.path` in a read-only tmpfs of its own that mirrors every directory from /
        down to the script's: each level's other entries (at most MIRROR_MAX, read now) are links."""
        self.sources.append(os.path.join(mirror.real_dir, mirror.name))
        args = ["--tmpfs", mirror.base]
        parts = [p for p in mirror.real_dir.split("/") if p]
        levels: dict[int, list[str]] = {}
        # the script's own dir whole (its siblings: `./lib`); the levels above it, nearest first, take at
        # most a quarter of what this view has left, so a later script's own dir still has room
        above = max(min(self.mirror_links, MIRROR_BUDGET // 4), 0)
        for depth in range(len(parts), -1, -1):
            real = "/" + "/".join(parts[:depth])
            below = parts[depth] if depth < len(parts) else mirror.name
            try:
                entries = [e for e in sorted(os.listdir(real))[:MIRROR_MAX] if e != below]
            except OSError:
                entries = []
            if depth < len(parts):
                entries = entries[:above]
                above -= len(entries)
            levels[depth] = entries
            self.mirror_links -= len(entries)
        for depth in range(len(parts) + 1):
            real = "/" + "/".join(parts[:depth])
            view = mirror.base + real.rstrip("/")
            args += [
                op
                for entry in levels[depth]
                for op in ("--symlink", os.path.join(real, entry), os.path.join(view, entry))
            ]
            if depth < len(parts):
                args += ["--dir", os.path.join(view, parts[depth])]
        fd = sealed_copy(mirror.data, mirror.name)
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        self.fds.append(fd)
        perms = "0500" if mirror.runnable else "0400"
        self.args += [*args, "--perms", perms, "--ro-bind-data", str(fd), mirror.path]
        self.args += ["--remount-ro", mirror.base]

    def build(
        self, host: bool = False, outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE
    ) -> PinnedView:
        pins = bool(self.args or self.env)
        if not pins and not host:
            return PinnedView()
        bwrap = bwrap_path()
        if bwrap is None:  # (pinned_view closes the copies' fds: closed here too, a number another
            # thread had opened meanwhile was closed under it, and that run's bwrap missed its fd)
            if host:
                raise hostoutside.HostViewError(hostview.INSTALL_HINT)
            raise PinError("bubblewrap (bwrap) is needed to run host tools over the vetted files; install it")
        if not pins:  # the host view alone: entered, kept (engine.commands.hostkeeper), when it can be
            kept = hostview.kept_prefix(str(state_dir()), bwrap, outside=outside)
            if kept is not None:
                return PinnedView(tuple(hostview.joined(kept[0], outside)), kept[2], fds=kept[1])
        # One bwrap: the host view's operations first (the state dir a tmpfs, a PID namespace and /proc
        # of its own), then the pinned view's tmpfs (inside the state dir's, made by bwrap in it) and its
        # copies.
        ops = ["--dev-bind", "/", "/"]
        net: list[str] = []
        layers: list[str] = []
        if host:
            # the home (and where its links lead) an overlay of the run's own, made before bwrap: no
            # socket there connects (engine.commands.homelayer)
            layers = hostview.run_layers(str(state_dir()), outside, kept=False)
            view, view_fds, layers = hostview.own_view_by_fd(str(state_dir()), outside, layers)
            # (fds: pinned_view's)
            self.fds += view_fds
            net, net_fds, net_env = hostview.net_prefix(str(state_dir()), outside)
            ops = [*view, *hostview.pid_ops(), *hostview.net_ops(outside, net)]
            self.fds += net_fds
            self.env.update(net_env)
            # a vetted file the view hides as the operator's private (engine.commands.homeprivate) is not
            # copied back over its cover: the run finds it as the view shows it, empty or absent
            # (nor one in another agent's hostWritable dir: engine.commands.otherroots)
            self.args = homeprivate.unhidden(self.args, otherroots.hides)
            hidden = [src for src in self.sources if homeprivate.hides(src)]
            if hidden:  # its copy is the file itself, at another path: refused, not run empty
                raise hostoutside.HostViewError(
                    f"{hidden[0]} is private to the operator (no permission for other accounts), which host "
                    "runs do not read; nothing ran"
                )
            theirs = [src for src in self.sources if otherroots.hides(src)]
            if theirs:
                raise hostoutside.HostViewError(
                    f"{theirs[0]} is in another agent's [tools.exec] hostWritable dir, which this agent's "
                    "host runs do not read; nothing ran"
                )
        pinned = ["--tmpfs", self.root, *self.args] if pins else []
        prefix = (*hostview.head(bwrap, net, layers), *ops, *pinned, "--", *hostview.tail())
        if host:
            prefix = tuple(hostview.joined(prefix, outside))
        return PinnedView(prefix, dict(self.env), tuple(self.fds))


def _git_view(b: _Builder, record: Record) -> None:
    """Point every git in the command at the repository it was vetted against, its config the copy."""
    tops = {repo for _argv, repo in record.repos}
    if not record.repos:
        return
    if len(tops) > 1:
        raise PinError("its git commands use different repositories; run them as separate commands")
    (repo,) = tops
    if repo is None:
        wants_repo = [argv for argv, _ in record.repos if parse_argv(argv, "/").subcommand not in _NO_REPO]
        if wants_repo:
            # None was vetted, so git must use none: not one git finds (or an agent creates) after the vet.
            b.env["GIT_DIR"] = os.path.join(b.root, NO_REPOSITORY)
        return
    _repo_view(b, repo, record)
    for nested in record.nested:  # submodules: their own git finds them; bound at their paths
        for name in ("config", "config.worktree"):
            path = os.path.join(nested.common_dir if name == "config" else nested.git_dir, name)
            if path in record.data:
                b.data(record.data[path], path)


# Ends the view's config: git then reads no repository config but the view's own copy (below).
_NO_WORKTREE_CONFIG = b"\n\n[extensions]\n\tworktreeConfig = false\n"


def folded_config(common: bytes, per_worktree: bytes | None) -> bytes:
    """The one config file git reads for the repository in the view: the vetted common config, then the
    vetted config.worktree when the common config turns worktreeConfig on (git's order: later wins), then
    worktreeConfig turned off. git reads config.worktree by its path under $GIT_DIR, the real directory
    (per-worktree writes must land there), so a config.worktree absent at the vet could be planted
    after it; with the extension off in the only config git reads for the repository format, git never
    opens that path, whatever appears there. Blank lines end a `\\`-continued last value; a section
    header of exechost's own keeps a config.worktree key written before any section out of the common
    config's last section (git would fail on such a file; here the key is inert)."""
    folded = common
    if per_worktree is not None:
        folded += b"\n\n[exechost-worktree-config]\n" + per_worktree
    return folded + _NO_WORKTREE_CONFIG


def _repo_view(b: _Builder, repo: Repo, record: Record) -> None:
    common = os.path.join(b.root, "git")
    config = os.path.join(repo.common_dir, "config")
    per_worktree = os.path.join(repo.git_dir, "config.worktree")
    worktree = record.data.get(per_worktree) if config in record.worktree_config else None
    b.data(folded_config(record.data.get(config, b""), worktree), os.path.join(common, "config"))
    for name in COMMON_ENTRIES:
        b.args += ["--symlink", b.place(os.path.join(repo.common_dir, name)), os.path.join(common, name)]
    b.env["GIT_DIR"] = b.place(repo.git_dir)
    b.env["GIT_COMMON_DIR"] = common
    if repo.work_tree is not None:
        b.env["GIT_WORK_TREE"] = b.place(repo.work_tree)
        b.env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(b.place(repo.work_tree))
    # Absorbed submodules' configs under modules/: read through the link by their own git.
    for path, data in record.data.items():
        if path.startswith(os.path.join(repo.common_dir, "modules") + os.sep):
            b.data(data, path)


def pinned_view(
    record: Record | None,
    files: Iterable[tuple[str, bytes]] = (),
    *,
    host: bool = False,
    outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE,
    mirrors: Iterable[Mirror] = (),
    programs: Iterable[tuple[str, str, bytes]] = (),
) -> PinnedView:
    """The view a run needs: git pointed at its vetted repository (from `record`), and every other
    vetted file (`files`: a Makefile, a script that re-reads itself) a read-only copy at its path; a
    script its reader is handed by path, in a directory of its own (`mirrors`, Mirror).
    `host`: the host view as well. An empty view (no prefix) when nothing needs pinning and no host
    view is asked for: the run starts as before, at no cost."""
    b = _Builder(view_root())
    if host and outside.private:
        b.place = lambda path: hostprivate.view_of(outside.private, path) or path
    try:
        if record is not None:
            _git_view(b, record)
            git_files = {p for p in record.data if os.path.basename(p) in ("config", "config.worktree")}
            for path, data in record.data.items():
                if path not in git_files and os.path.basename(path) != ".gitmodules":
                    b.data(data, path)
        for path, data in files:
            b.data(data, path)
        for mirror in mirrors:
            b.mirror(mirror)
        for real, where, text in programs:  # make reading vetted makefiles (_submake_programs)
            b.over(real, where, text)
        view = b.build(host, outside)
        if record is not None:  # env that needs no view of its own (a kept host view, or none, will do)
            view.env.update({k: v for k, v in record.env.items() if v})
        return view
    except BaseException:
        for fd in b.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise


def kept_host_view(outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE) -> PinnedView | None:
    """The host view alone, when its keeper is ready (no blocking: the event loop may call this); None
    when it must be made first (pinned_view(None, host=True), in a thread) or bwrap is missing."""
    bwrap = bwrap_path()
    kept = hostview.kept_prefix(str(state_dir()), bwrap, make=False, outside=outside) if bwrap else None
    if kept is None:
        return None
    return PinnedView(tuple(hostview.joined(kept[0], outside)), kept[2], fds=kept[1])


def is_git(argv: Sequence[str]) -> bool:
    return bool(argv) and name_of(argv[0]) == "git"


def open_checked_dir(cwd: str, identity: Sequence[tuple[str, str, int, int]]) -> int:
    """An fd of `cwd`, refused (StaleContent) unless it is the directory the decision recorded for it
    (the identity's entry for the cwd: device and inode). The fd, not the path, is what the run is then
    held to."""
    fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    st = os.fstat(fd)
    # identity() records the cwd last; by the same string when the decision was given this one
    wanted = [(dev, ino) for path, _real, dev, ino in identity if path == cwd] or [identity[-1][2:]]
    if wanted[-1] != (st.st_dev, st.st_ino):
        os.close(fd)
        raise StaleContent(f"{cwd} changed since it was approved")
    return fd


def in_checked_cwd(fd: int, command: str) -> str:
    """`command`, run only when the shell's working directory is the directory `fd` holds (the child and
    bubblewrap change into the cwd by its path; `-ef` compares device and inode, and once the shell is in
    a directory, no rename changes which one)."""
    return (
        f"[ /proc/self/fd/{fd} -ef . ] || {{ echo 'exechost: approval-stale: the working directory "
        f"changed since it was approved' >&2; exit 126; }}; {command}"
    )
