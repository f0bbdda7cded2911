"""Every command run on the gateway host starts in a private mount namespace where the state dir is an
empty tmpfs and the operator's trusted config files are read-only (issue 27, fresh round 4 group A/B).

A check of the words a command names can always be walked around (a link, /proc/self/cwd, a response
file, a URL, a recursive walk, a file the program reads naming another); a path that is not in the
command's namespace cannot be named, walked, followed or raced into. The pinned view (engine.commands.
pinned) adds its own bwrap arguments after these: one bubblewrap per run. A run with nothing pinned
enters a view prepared once instead (engine.commands.hostkeeper: the same operations, kept).

Every run has a PID namespace of its own with its own /proc (issue 31): the gateway's and the session
hosts' /proc/<pid>/root, cwd and fd lead into the host's mount namespace, where the state dir is not
covered; in the run's /proc they do not exist. Every run has a /dev/pts of its own too (a devpts
instance, made by exechost-hostenter): another agent's terminal session and the operator's terminal are
in the host's, which no run can name; a terminal session's own terminal is made in the run's.

bwrap stays the parent of the command (it always forks and waits), in the command's process group: it is
started with ^C, ^\\ and ^Z ignored, so the terminal's and the session host's SIGINT/SIGQUIT/SIGTSTP reach
the command and leave bwrap waiting, and the command gets them back at their default (`env
--default-signal`). bwrap reports a command killed by signal n as exit 128+n, as a command's own `exit 130`
is reported, so a run in a bwrap of its own starts the helper's `status` mode (STATUS_WORDS) first: the
spawner fills its slot with a pipe and reads the command's own wait status there (engine.sessions.host_io.
status_pipe). Only a run with no helper is left to exit_status()'s guess (130/131 read as SIGINT/SIGQUIT).
A run in the kept view is told exactly (exechost-hostenter dies of the command's signal).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass

from engine import sysbin
from engine.commands import hostkeeper

ENV = "/usr/bin/env"
# Signals a terminal (or an operator's ^C) sends: the command's, never bwrap's to die of.
_TERMINAL = "INT,QUIT,TSTP"
IGNORE = f"--ignore-signal={_TERMINAL}"
RESTORE = f"--default-signal={_TERMINAL}"
# Every run's own PID namespace and /proc (the kept view's runs get theirs from exechost-hostenter).
PID_OPS = ("--unshare-pid", "--proc", "/proc")
# A wrapped run with no status pipe whose command died of one of these is reported as that signal (bwrap
# says 128+n); with one, the command's own status is read (engine.sessions.host_io, the same words).
_REPORTED = (signal.SIGINT, signal.SIGQUIT)
STATUS_WORDS = ("status", "-")
INSTALL_HINT = (
    "gateway-host commands run with the state dir hidden, which needs bubblewrap: install it "
    '(apt-get install bubblewrap), or set [tools.exec] hostView = "none" to run them without it'
)


@dataclass(frozen=True)
class Outside:
    """What the gateway holds outside the state dir, named by its config (the caller's: this layer reads
    no config): files no host command may read (the nodes' SSH identity files: whoever holds one speaks
    to that node as the gateway), directories no host command may change (the agents' socket's: one
    agent's `rm` would take it from every other), and directories covered whole as the state dir is (the
    sandbox workspace roots: every agent's sandbox files, wherever the operator put them)."""

    hidden: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    covered: tuple[str, ...] = ()


NOTHING_OUTSIDE = Outside()


class HostViewError(Exception):
    """A gateway-host run cannot be given its view: it is refused."""


def bwrap_path() -> str | None:
    return sysbin.which("bwrap")


# Files the operator's shells run by themselves: at start (rc, profile, env) and when a login shell ends
# (~/.bash_logout is in Debian's /etc/skel; zsh reads ~/.zlogin after ~/.zshrc and ~/.zlogout at exit).
RC_FILES = (
    ".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
)  # fmt: skip


def trusted_configs(environ: dict[str, str] | None = None) -> list[tuple[str, bool]]:
    """(path, bind even when missing): files the gateway trusts (gitvet reads the global and system git
    config, treecode the operator's npm and cargo config) or the operator runs (shell rc files). A missing
    one is created empty as its mountpoint when it may be (an empty file reads as no file) — except the rc
    files, where an empty ~/.bash_profile would hide ~/.profile from the operator's login shell."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    always = [
        os.path.join(home, ".gitconfig"),
        os.path.join(xdg, "git", "config"),
        "/etc/gitconfig",
        os.path.join(home, ".npmrc"),
    ]
    cargo = [os.path.join(home, ".cargo", name) for name in ("config.toml", "config")]
    present = [p for p in cargo if os.path.lexists(p)]
    if not present and os.path.isdir(os.path.dirname(cargo[0])) and not _scratch_cargo(environ):
        present = [cargo[0]]  # none yet: the one cargo would read first, made read-only
    rc = [os.path.join(home, name) for name in RC_FILES]
    return [(p, True) for p in always + present] + [(p, False) for p in rc]


def _creatable(path: str) -> bool:
    """Whether bwrap (as this user) could make `path` as a mountpoint: the nearest existing directory
    above it is writable. What this user cannot create, its commands cannot either."""
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent):
        if os.path.lexists(parent):
            return False  # a file or a dangling link on the way: nothing to create
        parent = os.path.dirname(parent)
    return bool(parent) and os.access(parent, os.W_OK)


def _empty_file(state: str) -> str:
    """An empty regular file to bind over a missing config (not /dev/null: a device node on a nodev
    filesystem cannot be opened, and git then refuses to run). In the state dir, made once; bwrap reads
    bind sources from outside the view, where the state dir is not covered."""
    path = os.path.join(state, "hostview-empty")
    if not os.path.isfile(path) or os.path.getsize(path):
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444)
        os.close(fd)
        os.replace(path + ".tmp", path)
    return path


def trusted_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """Directories the gateway itself reads to act, made read-only whole (what is created in them later is
    read too, so no file list could cover them): ~/.ssh (asyncssh reads its config, `Match exec` and
    `ProxyCommand` run programs, at every node connect; the keys and known_hosts that prove the nodes),
    and the gateway's own install (its code and venv run in every later gateway and session host)."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    found: list[str] = []
    for d in (os.path.join(home, ".ssh"), _install_root(), os.path.realpath(sys.prefix)):
        if os.path.isdir(d) and d not in found:
            found.append(d)
    return found


def _under(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _install_root() -> str:
    """Where the `engine` package lives: a checkout's root, or the site-packages dir it was installed to."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _cargo_home(environ: dict[str, str] | None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cargo")


def _scratch_cargo(environ: dict[str, str] | None) -> bool:
    """No ~/.cargo, or an empty one (the mountpoint an earlier view left): nothing of the operator's there,
    so the view puts a scratch one in its place. A command could otherwise make one, and its config would
    be the operator's to treecode and to every later cargo."""
    cargo = _cargo_home(environ)
    if not os.path.lexists(cargo):
        return _creatable(cargo)
    if os.path.islink(cargo) or not os.path.isdir(cargo):
        return False
    try:
        with os.scandir(cargo) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def view_args(
    state: str, environ: dict[str, str] | None = None, outside: Outside = NOTHING_OUTSIDE
) -> list[str]:
    """The bwrap operations of the host view: the gateway's own inputs read-only, the state dir covered
    (after them: a state dir inside the install is still covered), the trusted configs read-only, what
    the gateway holds outside the state dir (`outside`) hidden or read-only."""
    configs = trusted_configs(environ)
    args: list[str] = []
    for d in [*trusted_dirs(environ), *outside.readonly]:
        if os.path.isdir(d) and not _under(d, state):
            args += ["--ro-bind", d, d]
    args += ["--tmpfs", state]
    for root in outside.covered:
        if not _under(root, state) and _cover_root(root):
            args += ["--tmpfs", os.path.realpath(root)]
    for path in outside.hidden:
        if os.path.exists(path) and not _under(path, state):
            args += ["--ro-bind", _empty_file(state), path]
    if _scratch_cargo(environ):
        # for the view's cargo caches (the host gets an empty directory, the mountpoint, and keeps it
        # empty), where no config can be written
        cargo = _cargo_home(environ)
        args += ["--tmpfs", cargo]
        for name in ("config.toml", "config"):
            args += ["--ro-bind", _empty_file(state), os.path.join(cargo, name)]
    for path, always in configs:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
        elif always and not os.path.lexists(path) and _creatable(path):
            # an empty read-only file: reads as no config, never written, never made by the command
            args += ["--ro-bind", _empty_file(state), path]
    locked = _link_parents([path for path, _always in configs])
    if locked:
        _make_mountpoints(args, locked)
    return ["--dev-bind", "/", "/", *(op for parent in locked for op in _lock_names(parent)), *args]


def _cover_root(root: str) -> bool:
    """Whether `root` (a sandbox workspace root) can be covered: made now when missing, as the sandbox
    would make it (0700), so a host command can neither find one made later in a view kept from before,
    nor plant a link there first. Never the whole filesystem."""
    if os.path.realpath(root) == os.sep:
        return False
    if not os.path.lexists(root) and _creatable(root):
        os.makedirs(root, mode=0o700, exist_ok=True)
    return os.path.isdir(root)


def _link_parents(paths: list[str]) -> list[str]:
    """The directories holding a link on the way to a trusted config (~/.gitconfig -> dotfiles/gitconfig)
    that this user, and so a host command, could replace. bwrap binds the link's target: the link itself
    is no mountpoint, and re-pointed it would make the agent's file the operator's trusted config."""
    found: list[str] = []
    for path in paths:
        here = ""
        for part in path.strip(os.sep).split(os.sep):
            here = os.path.join(here or os.sep, part)
            parent = os.path.dirname(here)
            if os.path.islink(here) and os.access(parent, os.W_OK) and parent not in found:
                found.append(parent)
            if not os.path.lexists(here):
                break
    return found


def _lock_names(parent: str) -> list[str]:
    """`parent` read-only, each of its entries bound back writable over it, except its links: what is in
    it stays as writable as before, but no name in it can be made, removed or re-pointed. First in the
    view: every later operation binds over these (their sources are the host's)."""
    ops = ["--ro-bind", parent, parent]
    with os.scandir(parent) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.is_symlink():  # -try: one removed on the host meanwhile is no failed run
                ops += ["--dev-bind-try", entry.path, entry.path]
    return ops


def _make_mountpoints(ops: list[str], locked: list[str]) -> None:
    """Make on the host, as bwrap would, the missing mountpoints of `ops` in a locked directory: in the
    view it is read-only by then (what lies in a tmpfs of `ops` is bwrap's to make there)."""
    scratch: list[str] = []
    for i, op in enumerate(ops):
        if op == "--tmpfs":
            dest, is_dir = ops[i + 1], True
        elif op in ("--ro-bind", "--bind", "--dev-bind"):
            dest, is_dir = ops[i + 2], os.path.isdir(ops[i + 1])
        else:
            continue
        if os.path.lexists(dest) or any(_under(dest, t) for t in scratch):
            pass
        elif any(_under(dest, p) for p in locked):
            os.makedirs(dest if is_dir else os.path.dirname(dest), exist_ok=True)
            if not is_dir:
                os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        if op == "--tmpfs":
            scratch.append(dest)


def kept_prefix(
    state: str, bwrap: str, *, make: bool = True, outside: Outside = NOTHING_OUTSIDE
) -> tuple[list[str], tuple[int, ...]] | None:
    """The words that run a command in this state dir's kept view and the fds they name (the caller's to
    pass and close), the keeper made or re-made here when `make` (blocking a few ms); None when there is
    no helper, or no keeper ready and `make` is false."""
    helper = hostkeeper.helper_path()
    if helper is None:
        return None
    ops = view_args(state, outside=outside)
    key = hostkeeper.view_key(bwrap, helper, state, ops)
    keeper = hostkeeper.current(key, state)
    if keeper is None and make:
        keeper = hostkeeper.ensure(key, state, bwrap, helper, ops)
    return keeper.enter(helper) if keeper is not None else None  # None: stopped meanwhile


def head(bwrap: str) -> list[str]:
    """The words before bwrap's operations: bwrap itself ignores the terminal's signals, and starts (with
    the helper) in a mount namespace whose /dev/pts is a devpts of its own, which its view copies: the
    run reaches no terminal but its own (engine/commands/hostenter.c, own-pts)."""
    helper = hostkeeper.helper_path()
    own_pts = [helper, "own-pts", hostkeeper.NO_PTY, "--"] if helper is not None else []
    return [ENV, IGNORE, *own_pts, bwrap]


def tail() -> list[str]:
    """The words after `--`: the command gets the terminal's signals back at their defaults (and, with
    the helper, its cwd is checked there: engine.commands.pinned.PinnedView.check_cwd)."""
    helper = hostkeeper.helper_path()
    if helper is None:
        return [ENV, RESTORE]
    return [helper, *STATUS_WORDS, "--", helper, "check-cwd", hostkeeper.NO_CWD, "--"]


def pid_ops() -> tuple[str, ...]:
    """PID_OPS for a run's own bwrap: with the helper, its `status` mode (tail) is the namespace's pid 1
    (`--as-pid-1`: it reaps, as bwrap's reaper would) and holds nothing of the run's open before the
    command starts, so the command is pid 2 with parent 1, as in the kept view."""
    return (*PID_OPS, "--as-pid-1") if hostkeeper.helper_path() is not None else PID_OPS


def is_wrapped(args: object) -> bool:
    return isinstance(args, (list, tuple)) and len(args) > 2 and args[0] == ENV and args[1] == IGNORE


def exit_status(args: object, code: int) -> tuple[int | None, str | None]:
    """`code` (os.waitstatus_to_exitcode) as (exit code, signal name), with a wrapped run's 128+n for
    SIGINT/SIGQUIT read as the signal bwrap could not report: for a run whose status pipe told nothing
    better (engine.sessions.host_io.status_exit is read first)."""
    if code < 0:
        try:
            return None, signal.Signals(-code).name
        except ValueError:
            return None, f"SIG{-code}"
    if is_wrapped(args) and code - 128 in _REPORTED:
        return None, signal.Signals(code - 128).name
    return code, None


def refuse_hidden_cwd(cwd: str | None, state: str, outside: Outside = NOTHING_OUTSIDE) -> None:
    """A cwd inside the state dir, or a covered sandbox workspace root, would not exist in the view:
    refused rather than run elsewhere."""
    if not cwd:
        return
    if _under(cwd, state):
        raise HostViewError(f"{cwd} is inside the state dir, which gateway-host commands cannot see")
    for root in outside.covered:
        if os.path.realpath(root) != os.sep and _under(cwd, root):
            raise HostViewError(
                f"{cwd} is inside the sandbox workspace root {root}, which gateway-host commands cannot see"
            )
