"""Paths no allowlisted command may touch without a human: exechost's own state (tokens, approvals)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from functools import lru_cache

from engine import statefs
from engine.commands.which import LINKS, REAL, dir_links, poll_changes, real_path


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def protected_root(*, poll: bool = True, home: str | None = None) -> str:
    """The state dir, resolved: socket tokens, the approvals file and sandbox workspaces live there.
    `home`: statefs.home_dir(), when the caller has it already."""
    env = os.environ
    account = home if home is not None else statefs.home_dir()
    pins = statefs.pin_generation()
    key = (env.get("OPENCLAW_STATE_DIR"), env.get("OPENCLAW_HOME"), env.get("HOME"), account, pins)
    return real_path(_state_dir_text(key), poll=poll)


def protected_root_watched(home: str) -> tuple[str, bool]:
    """protected_root(poll=False, home=home), and whether the path cache holds that answer (then it stays
    true until a watched directory changes)."""
    env = os.environ
    pins = statefs.pin_generation()
    text = _state_dir_text(
        (env.get("OPENCLAW_STATE_DIR"), env.get("OPENCLAW_HOME"), env.get("HOME"), home, pins)
    )
    root = real_path(text, poll=False)
    return root, REAL.get(text) == root


@lru_cache(maxsize=16)
def _state_dir_text(key: tuple[str | int | None, ...]) -> str:
    """statefs.state_dir() as text, keyed by everything it reads (its env vars, the account's home, the
    state dirs pinned in this process): building the Path costs more than the rest of the lookup."""
    del key
    return str(statefs.state_dir())


def _resolved(path: str, poll: bool) -> str:
    """os.path.realpath(path) for an absolute path: its directory through the watched cache, then one lstat
    of the last component (operands are mostly unique, their directories are not). Raises OSError where a
    link cannot be read."""
    cut = path.rfind("/") + 1  # os.path.split and os.path.join, inlined: this runs for every operand
    head, tail = path[:cut], path[cut:]
    head = head.rstrip("/") or head
    if not head.startswith("/") or "\x00" in path:
        return os.path.realpath(path)
    if not tail or tail in (".", ".."):
        return real_path(path, poll=poll)  # a directory operand (`src/mod3/`, `.`): watched like the cwd
    real_head = None if poll else REAL.get(head)  # a hit without the call
    if real_head is None:
        real_head = real_path(head, poll=poll)
        watched = REAL.get(head) == real_head
    else:
        watched = True
    joined = real_head + tail if real_head.endswith("/") else real_head + "/" + tail
    if watched:
        # The directory's resolution is watched, so its listing can be (engine.commands.which.dir_links):
        # whether `tail` is a symlink there, without a syscall.
        links = dir_links(real_head)
        if links is not None:
            return os.path.realpath(path) if tail in links else joined
    try:
        link = stat.S_ISLNK(os.lstat(joined).st_mode)
    except OSError:
        link = False  # missing (or a loop above it): realpath keeps the name as written
    if not link:
        return joined
    # Raises when the link is swapped back to a file between the lstat and its readlink (EINVAL): the
    # decision fails closed on that (allowlist.evaluate_allowlist), never judges a name it could not follow.
    return os.path.realpath(path)


def protected_operand(
    argv: Sequence[str], cwd: str, root: str | None = None, *, poll: bool = True
) -> str | None:
    """The first word of `argv` (or the cwd) that names something inside the state dir, else None.

    Every word counts, options' `=value` parts too: `cat gateway.json` run in the state dir reads a
    token as surely as `cat ~/.openclaw/gateway.json` does. Reading them would let an allowlisted reader
    (`cat`, `head`, `grep`) hand the agent the tokens that approve and broaden its own commands.
    Raises OSError where a word's path cannot be resolved: the caller fails closed."""
    if poll:
        poll_changes()  # once, then every lookup below answers from caches valid as of now
    root = root or protected_root(poll=False)
    base = real_path(cwd, poll=False) if cwd else os.getcwd()
    if _inside(base, root):
        return cwd
    return protected_word(argv, base, root)


def protected_word(argv: Sequence[str], base: str, root: str, own: str = "") -> str | None:
    """protected_operand's check of the words, with the cwd already resolved (`base`) and not inside;
    `own`, inside the root, is the run's own (an agent's private copies, which its view shows)."""
    prefix = root.rstrip("/") + "/"
    mine = own.rstrip("/") + "/" if own else ""
    # The cwd's listing, when kept (engine.commands.which.dir_links): a plain name in it that is not a
    # symlink resolves to base/name with no lookup at all. Kept only while the directory and every
    # component of its path are watched, so its presence is the proof.
    links = LINKS.get(base)
    for word in argv[1:]:
        if (
            links is not None
            and word
            and word[0] not in "-~"
            and "/" not in word
            and "=" not in word
            and word not in links
            and word not in (".", "..")
            and "\x00" not in word
        ):
            path = base + word if base.endswith("/") else base + "/" + word
            if (path == root or path.startswith(prefix)) and not (mine and (path + "/").startswith(mine)):
                return word
            continue
        for candidate in (word, word.partition("=")[2]) if "=" in word else (word,):
            if not candidate or candidate[0] == "-":
                continue
            if candidate[0] == "~":
                path = os.path.join(base, os.path.expanduser(candidate))
            elif candidate[0] == "/":
                path = candidate
            else:
                path = base + candidate if base.endswith("/") else base + "/" + candidate  # os.path.join
            path = _resolved(path, False)
            if (path == root or path.startswith(prefix)) and not (mine and (path + "/").startswith(mine)):
                return candidate
    return None


# Paths each process resolves for itself: its own cwd, root, fds and exe under /proc/self (and /proc/<pid>,
# which is another process than the one checked), and /dev/fd, /dev/std* (links into /proc/self/fd).
_PER_PROCESS = frozenset({"/proc", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"})


def through_process(path: str) -> bool:
    """Whether the absolute `path`, walked as written (`.` and `..` taken lexically, step by step), passes
    through /proc or /dev/fd at any step: `/dev/fd/../../self/cwd` goes through /dev/fd (a link to
    /proc/self/fd) although its lexical normal form does not, `//proc` and `/dev/../proc` reach /proc."""
    here = ""
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            here = here.rpartition("/")[0]
            continue
        here = f"{here}/{part}"
        if here in _PER_PROCESS or here.startswith("/proc/"):
            return True
    return False


def process_word(words: Iterable[str], cwd: str, *, cwd_checked: bool = False) -> str | None:
    """The first of `words` (or the cwd) that names a file through /proc or /dev/fd, else None.

    The gateway resolving such a path sees its own process (its cwd, its fds), never the run's: a check
    or a digest made there is about another file than the one the command opens. So no such word is
    checked or bound at all: the command asks, and nothing is saved for it. Every absolute path inside a
    word counts (`--file=/proc/…`, `-f/proc/…`, `@/proc/…`), and a relative one from the cwd.
    `cwd_checked`: the caller found the cwd itself not through /proc already (once per context)."""
    if not cwd_checked and through_process(cwd):
        return cwd
    near = "proc" in cwd or "dev" in cwd  # `fd/0` from /dev
    for word in words:
        if not near and "proc" not in word and "dev" not in word:
            continue  # no step of any path it names can be /proc or /dev/…
        if not word.startswith("/") and through_process(cwd + "/" + word):
            return word
        # A path starts at the word's first `/` (`-f/proc/…`, `--x=/proc/…`) or after a separator
        # (`a:/proc/…`, `x,/proc/…`); a later `/` inside a path (`/tmp/proc`) starts none.
        cut = word.find("/")
        while cut >= 0:
            if through_process(word[cut:]):
                return word
            cut = word.find("/", cut + 1)
            while cut > 0 and word[cut - 1] not in _STARTS_A_PATH:
                cut = word.find("/", cut + 1)
    return None


_STARTS_A_PATH = frozenset("=:,@~'\" \t")
