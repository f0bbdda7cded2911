"""Host tools read exactly the bytes that were vetted: the run starts in a private mount namespace
(bubblewrap) where each vetted file is a read-only copy of the bytes checked, and git is pointed at the
repository that was vetted instead of finding one itself (issue 27 §4, §5).

Not a sandbox (engine.sandbox is): the command sees the whole host as before, writable as before; only the
files it takes code from are replaced, in its own view, by the copies that were decided on.

Git's repository config is not bound over its path: Linux detaches a bind mount whose mountpoint is
renamed over in another namespace, so an agent renaming a new `.git/config` into place would reach git
again. Instead GIT_COMMON_DIR names a directory that exists only inside the namespace (a tmpfs) holding
the vetted config and links to the repository's objects, refs and logs; no path the agent can rename
leads to a config there. Files bound at their own path (a Makefile, a script re-reading "$0", a
submodule's config) keep that one limit: a rename over them after the spawn reaches a later re-read
(their first read, and every run of them, is the copy: engine.commands.verified).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.commands import hostview
from engine.commands.gitvet import Record, Repo, parse_argv
from engine.commands.interpreters import name_of
from engine.commands.treecode import TreeChanged, TreeVet
from engine.commands.verified import StaleContent, sealed_copy
from engine.statefs import state_dir

# Entries of a repository's common dir (git's path.c common_list): linked from the view, so reads and
# writes of objects, refs, packed-refs and logs go to the repository; only `config` is the vetted copy.
# Linked even when absent, so a file git creates (packed-refs, shallow) lands in the repository too.
COMMON_ENTRIES = (
    "objects", "refs", "packed-refs", "logs", "info", "hooks", "branches", "remotes", "rr-cache", "svn",
    "shallow", "worktrees", "modules", "lost-found", "lfs", "common", "gc.pid", "gc.log", "description",
)  # fmt: skip
# Subcommands that work without a repository (or make one): not pointed at "no repository".
_NO_REPO = frozenset({"init", "clone", "version", "help"})
NO_REPOSITORY = "no-repository"


class PinError(Exception):
    """The run cannot be pinned to what was vetted: it is refused."""


bwrap_path = hostview.bwrap_path


def view_root() -> str:
    """An empty directory the view's tmpfs is mounted over, inside the namespace only (0700, ours)."""
    path = os.path.join(str(state_dir()), "pinned")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return path


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

    def argv(self, shell: str, command: str) -> list[str] | None:
        """The argv that runs `command` in the view; None when there is nothing to pin."""
        return [*self.prefix, shell, "-c", command] if self.prefix else None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]


def view_for(
    tree: TreeVet | None,
    rereads: Iterable[tuple[str, bytes]] = (),
    anchor: str | None = None,
    *,
    host: bool = False,
) -> PinnedView:
    """The view a decided run starts in: `tree` vetted again keeping its bytes (refused as StaleContent
    when they are not what was decided on), plus the verified scripts that re-read themselves. `anchor`:
    the cwd's files are re-read through the spawn's fd of the cwd (TreeVet.pin). `host`: the host view
    too (engine.commands.hostview), in the same bwrap."""
    try:
        record = tree.pin(anchor) if tree is not None and tree.commands else None
        return pinned_view(record, rereads, host=host)
    except (TreeChanged, PinError) as exc:
        raise StaleContent(str(exc)) from None


@dataclass
class _Builder:
    root: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    bound: set[str] = field(default_factory=set)

    def data(self, data: bytes, dest: str) -> None:
        """A read-only copy of `data` at `dest` (bwrap reads the fd once, at setup)."""
        if dest in self.bound:
            return
        fd = sealed_copy(data, os.path.basename(dest))
        os.lseek(fd, 0, os.SEEK_SET)  # bwrap reads from the current offset
        os.set_inheritable(fd, True)
        self.fds.append(fd)
        self.bound.add(dest)
        self.args += ["--ro-bind-data", str(fd), dest]

    def build(self, host: bool = False) -> PinnedView:
        pins = bool(self.args or self.env)
        if not pins and not host:
            return PinnedView()
        bwrap = bwrap_path()
        if bwrap is None:
            for fd in self.fds:
                os.close(fd)
            if host:
                raise hostview.HostViewError(hostview.INSTALL_HINT)
            raise PinError("bubblewrap (bwrap) is needed to run host tools over the vetted files; install it")
        # One bwrap: the host view's operations first (the state dir a tmpfs), then the pinned view's
        # tmpfs (inside the state dir's, made by bwrap in it) and its copies.
        ops = hostview.view_args(str(state_dir())) if host else ["--dev-bind", "/", "/"]
        pinned = ["--tmpfs", self.root, *self.args] if pins else []
        prefix = (*hostview.head(bwrap), *ops, *pinned, "--", *hostview.tail())
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
        wants_repo = [
            argv for argv, _ in record.repos if parse_argv(argv, "/").subcommand not in _NO_REPO | {None}
        ]
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


def _repo_view(b: _Builder, repo: Repo, record: Record) -> None:
    common = os.path.join(b.root, "git")
    config = os.path.join(repo.common_dir, "config")
    b.data(record.data.get(config, b""), os.path.join(common, "config"))
    for name in COMMON_ENTRIES:
        b.args += ["--symlink", os.path.join(repo.common_dir, name), os.path.join(common, name)]
    b.env["GIT_DIR"] = repo.git_dir
    b.env["GIT_COMMON_DIR"] = common
    if repo.work_tree is not None:
        b.env["GIT_WORK_TREE"] = repo.work_tree
        b.env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(repo.work_tree)
    per_worktree = os.path.join(repo.git_dir, "config.worktree")
    if per_worktree in record.data:
        b.data(record.data[per_worktree], per_worktree)
    # Absorbed submodules' configs under modules/: read through the link by their own git.
    for path, data in record.data.items():
        if path.startswith(os.path.join(repo.common_dir, "modules") + os.sep):
            b.data(data, path)


def pinned_view(
    record: Record | None, files: Iterable[tuple[str, bytes]] = (), *, host: bool = False
) -> PinnedView:
    """The view a run needs: git pointed at its vetted repository (from `record`), and every other
    vetted file (`files`: a Makefile, a script that re-reads itself) a read-only copy at its path.
    `host`: the host view as well. An empty view (no prefix) when nothing needs pinning and no host
    view is asked for: the run starts as before, at no cost."""
    b = _Builder(view_root())
    try:
        if record is not None:
            _git_view(b, record)
            git_files = {p for p in record.data if os.path.basename(p) in ("config", "config.worktree")}
            for path, data in record.data.items():
                if path not in git_files and os.path.basename(path) != ".gitmodules":
                    b.data(data, path)
        for path, data in files:
            b.data(data, path)
        return b.build(host)
    except BaseException:
        for fd in b.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise


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
