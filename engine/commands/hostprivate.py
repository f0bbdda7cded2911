"""Every agent's own /tmp, /var/tmp, /dev/shm and runtime dir in its host view: shared ones were a way into
the operator's programs (fresh round 8 r: tmux's server socket, a /tmp/.git, a /tmp/node_modules)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

from engine.commands import homeprivate, privatefs

# What a host run may write outside the home that others read: the FHS's shared temp and lock dirs,
# screen's sockets, the gateway user's runtime dir (its session bus, systemd --user, gpg-agent, a
# desktop's sockets) and the temp dir the gateway's TMPDIR names. Missing ones are left out.
DEFAULT = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run/screen", "$XDG_RUNTIME_DIR", "$TMPDIR")
# The gateway process's default for `[tools.exec] hostPrivate` when the config sets none (colon-separated):
# a test suite whose workdirs live in the machine's shared /tmp names a dir of its own here.
DEFAULT_ENV = "EXECHOST_HOST_PRIVATE"
ROOT = "hostprivate"  # under the state dir: one directory per agent, one per private dir in it
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# The key of the operator's own host runs' private dirs (fresh round 15 b): its `exec` names an agent for
# policy only, and a run keyed by that agent left its /tmp files in the agent's copy. No agent id starts
# with `_` (engine.principals.valid_name), and a node's keys hold a `/`: it is nobody else's.
OPERATOR = "_operator"


def space(owner: str, *, operator: bool = False) -> str:
    """Whose private dirs a run gets: the operator's own for the operator's call, else `owner`'s (the
    agent, or a shared node's gateway's agent: ExecContext.owner)."""
    return OPERATOR if operator else owner


def dests(configured: Iterable[str] | None, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The directories made private, resolved (bwrap follows links in a destination: /var/run is /run),
    present now, never `/`: `configured` (the config's `hostPrivate`) or DEFAULT_ENV's or DEFAULT."""
    env = os.environ if environ is None else environ
    if configured is None:
        named = env.get(DEFAULT_ENV)
        configured = named.split(":") if named is not None else DEFAULT
    found: list[str] = []
    for item in _with_account_runtime(configured):
        path = os.path.expanduser(env.get(item[1:], "") if item.startswith("$") else item)
        if not path.startswith(os.sep):
            continue
        real = os.path.realpath(path)
        if real != os.sep and os.path.isdir(real) and real not in found:
            found.append(real)
    return tuple(found)


def _with_account_runtime(configured: Iterable[str]) -> list[str]:
    """`$XDG_RUNTIME_DIR` names the account's runtime dir, and that is /run/user/<euid> whatever the
    gateway's environment says: a gateway started without the variable (by an MCP client, cron, sudo)
    still makes the account's own dir private (fresh round 11 a)."""
    out = list(configured)
    if "$XDG_RUNTIME_DIR" in out:
        out.insert(out.index("$XDG_RUNTIME_DIR") + 1, f"/run/user/{os.geteuid()}")
    return out


def agent_dir(state: str, agent_id: str) -> str:
    """The agent's own directory under the state dir (never reachable from a host view: the state dir is
    covered); an id that is not a plain name is hashed."""
    name = agent_id if _PLAIN.fullmatch(agent_id) and agent_id not in (".", "..") else ""
    name = name or "h-" + hashlib.sha256(agent_id.encode()).hexdigest()[:32]
    return os.path.join(state, ROOT, name)


def binds(state: str, agent_id: str, private: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(source, destination) for each private dir, the source made now (0700, the agent's alone; kept
    across runs, so a background session and a later run of the agent share it)."""
    if not private:
        return ()
    state = os.path.realpath(state)
    top = agent_dir(state, agent_id)
    if not os.path.isdir(top):
        os.makedirs(os.path.dirname(top), mode=0o700, exist_ok=True)
        os.makedirs(top, mode=0o700, exist_ok=True)
    privatefs.ensure(top, state)  # a capped filesystem of its own (root only: docs/SECURITY.md)
    out = []
    for dest in private:
        if dest == state or dest.startswith(state.rstrip(os.sep) + os.sep):
            continue  # covered with the state dir
        source = os.path.join(top, quote(dest, safe=""))
        if not os.path.isdir(source):
            os.makedirs(source, mode=0o700, exist_ok=True)
        out.append((source, dest))
    # the gateway's TMPDIR, which every run inherits, exists in the agent's copy (mktemp needs it)
    tmpdir = source_of(out, os.environ.get("TMPDIR") or "/")
    if tmpdir is not None:
        _make_in_copy(tmpdir, out)
    return tuple(out)


def _make_in_copy(path: str, binds_: Iterable[tuple[str, str]]) -> None:
    """`path` (in a private copy) made one directory at a time from the copy's own directory, by fd, no
    link followed: the copy is the agent's to write, and os.makedirs followed a link it planted on the
    way, so the gateway made directories in the read-only home or another agent's copy (fresh round 10
    a). A link or a file on the way: nothing is made (the agent's mktemp then fails in its own copy)."""
    source = next((s for s, _dest in binds_ if path == s or path.startswith(s + os.sep)), None)
    if source is None:
        return
    make_below(source, path)


def make_below(start: str, path: str) -> None:
    """`path` made below `start` (an existing directory), each missing directory 0700, one at a time by fd
    with no link followed (engine.commands.otherroots makes missing roots so too); a link or a file on the
    way: nothing more is made."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(start, flags)
    except OSError:
        return
    try:
        for part in path[len(start.rstrip(os.sep)) :].split(os.sep):
            if not part:
                continue
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        return
    finally:
        os.close(fd)


def source_of(binds_: Iterable[tuple[str, str]], path: str) -> str | None:
    """`path` as the run names it (a workdir) at its place in the agent's private copy on the host; None
    when no private dir holds it. The innermost private dir wins."""
    real = os.path.abspath(path)
    best: tuple[str, str] | None = None
    for source, dest in binds_:
        held = real == dest or real.startswith(dest.rstrip(os.sep) + os.sep)
        if held and (best is None or len(dest) > len(best[1])):
            best = (source, dest)
    if best is None:
        return None
    return best[0] + real[len(best[1]) :]


def view_of(binds_: Iterable[tuple[str, str]], path: str) -> str | None:
    """A host path in the agent's private copy as the run names it (source_of's inverse); None when it is
    in none."""
    for source, dest in binds_:
        if path == source or path.startswith(source + os.sep):
            return dest + path[len(source) :]
    return None


def ops(binds_: Iterable[tuple[str, str]], home: str) -> tuple[list[str], list[str]]:
    """The binds as bwrap operations: (first, last). A private dir outside the home, or the home itself or
    one holding it, goes first, so what the view shows under it (the home read-only, a hostWritable dir,
    the state dir's cover) is bound on top (fresh round 10 c: HOME=/tmp/svc bound last made the home, its
    ~/.gitconfig, the agent's); one inside the home goes last (the home is bound read-only over it
    otherwise), with `protect`'s binds after it."""
    first: list[str] = []
    last: list[str] = []
    for source, dest in binds_:
        inside = dest != home and _within(dest, home)
        (last if inside else first).extend(["--bind", source, dest])
    return first, last


def protect(
    binds_: Iterable[tuple[str, str]], home: str, files: Iterable[str], dirs: Iterable[str], empty: str
) -> list[str]:
    """What a private dir holds that the decision trusts as the operator's (a trusted config file, a
    trusted or PATH dir): bound read-only over the agent's copy, after every private dir, so the view has
    the host's (an empty file, an empty read-only dir where the host has none): never the agent's. In
    the home under a private dir bound first, the home's read-only bind has done it. Privacy wins here
    too (fresh round 14 c): one another account could not read (its own mode, or a private dir between
    the private dir and it: a 0700 /tmp/op-bin on PATH) is shown empty, never the host's."""
    dests = [dest for _source, dest in binds_]
    out: list[str] = []
    for path, is_dir in [*((f, False) for f in files), *((d, True) for d in dirs)]:
        path = os.path.abspath(path)
        holder = max((d for d in dests if _within(path, d)), key=len, default=None)
        if holder is None or (_within(path, home) and not (holder != home and _within(holder, home))):
            continue
        shown = os.path.exists(path) and not _kept_from_others(path, holder)
        if shown:
            out += ["--ro-bind", os.path.realpath(path), path]
        elif is_dir or os.path.isdir(path):
            out += ["--tmpfs", path, "--remount-ro", path]
        else:
            out += ["--ro-bind", empty, path]
    return out


def _kept_from_others(path: str, holder: str) -> bool:
    """Whether another account could not read `path` (present): by its own mode, or by a directory's
    between `holder` (the shared dir, /tmp) and it."""
    here = path
    while _within(here, holder) and here != holder:
        try:
            if homeprivate.private_mode(os.stat(here).st_mode):
                return True
        except OSError:
            return True
        here = os.path.dirname(here)
    return False


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)
