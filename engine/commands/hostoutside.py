"""What a host view is made from and refused with: what the gateway holds outside the state dir (Outside),
the home every view protects, and the path tests the view's modules share (engine.commands.hostview)."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class Outside:
    """What the gateway holds outside the state dir, named by its config (the caller's: this layer reads
    no config): files no host command may read (the nodes' SSH identity files: whoever holds one speaks
    to that node as the gateway), directories no host command may change (the agents' socket's: one
    agent's `rm` would take it from every other), directories covered whole as the state dir is (the
    sandbox workspace roots: every agent's sandbox files, wherever the operator put them), files the
    gateway reads to decide (its config file, a seccomp profile, known_hosts files: read-only, made empty
    when missing), directories whose programs run later (every pathPrepend dir and bwrap rootfs, in
    `readonly`), the home's directories the operator lets host commands write (`[tools.exec]
    hostWritable`; every agent's in `writable_anywhere`), and the run's own workdir (only for
    workdir_note: it is never made writable)."""

    hidden: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    covered: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    workdir: str | None = None
    # every agent's `hostWritable` (the config's): another agent's runs may rename in its dirs
    writable_anywhere: tuple[str, ...] = ()
    # the `tasks` file of the agent's pids cgroup its runs join first (engine.sandbox.bwraplimits)
    join_tasks: str | None = None
    # the `tasks` file of the agent's memory cgroup, joined after the pids one (its share of the host's RAM)
    join_memory: str | None = None
    # the `tasks` file of the agent's cpu cgroup, joined after the memory one (its share of the CPU)
    join_cpu: str | None = None
    # (source, destination): the agent's own /tmp, /var/tmp, ... (engine.commands.hostprivate)
    private: tuple[tuple[str, str], ...] = ()
    # the workdir as the run names it, when it is in the agent's private copy (its host path is there)
    chdir: str | None = None
    # whose network namespace the run joins (engine.commands.hostnet: the agent's own, kept); None: the
    # host's ([tools.exec] hostNetwork = "host")
    net_agent: str | None = None
    # why each of the agent's `hostWritable` dirs left out of `writable` is not this gateway's to trust
    # (engine.commands.hostroots.trusted_writable); it stays in `writable_anywhere`: covered, as another's
    refused: tuple[str, ...] = ()


NOTHING_OUTSIDE = Outside()


class HostViewError(Exception):
    """A gateway-host run cannot be given its view: it is refused."""


def creatable(path: str) -> bool:
    """Whether bwrap (as this user) could make `path` as a mountpoint: the nearest existing directory
    above it is writable. What this user cannot create, its commands cannot either."""
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent):
        if os.path.lexists(parent):
            return False  # a file or a dangling link on the way: nothing to create
        parent = os.path.dirname(parent)
    return bool(parent) and os.access(parent, os.W_OK)


def shared(path: str) -> bool:
    """`/`, or a directory every user may write: no view can keep it read-only without taking it from
    every run."""
    return path == os.sep or (os.path.isdir(path) and bool(os.stat(path).st_mode & 0o002))


def under(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def home_dir(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.realpath(env.get("HOME") or os.path.expanduser("~"))


# The home host views protect when it is not the account's own (tests, a service account whose HOME is
# set on purpose): it must name $HOME itself (home_refused).
HOST_HOME_ENV = "EXECHOST_HOST_HOME"


def home_refused(environ: dict[str, str] | None = None) -> str | None:
    """Why a gateway must not start with this $HOME; None when it may. Every view protects $HOME (read-only,
    the operator's private files hidden, its sockets unreachable): a $HOME that is not the account's home
    (its passwd entry, where its login shell, ssh and desktop read, and ~/.openclaw) left that one
    writable and unhidden to every host run (fresh round 13 b: a client that autostarted the daemon chose
    HOME). Refused, unless the operator named $HOME in EXECHOST_HOST_HOME."""
    env = os.environ if environ is None else environ
    home = env.get("HOME")
    try:
        own = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None  # no passwd entry: $HOME is the only home there is
    if not home or not own or os.path.realpath(home) == os.path.realpath(own):
        return None
    named = env.get(HOST_HOME_ENV)
    if named and os.path.realpath(named) == os.path.realpath(home):
        return None
    return (
        f"HOME is {home}, not this account's home {own} (its passwd entry): host runs would find {own} "
        f"writable and its private files readable. Start the gateway with HOME={own}, or set "
        f"{HOST_HOME_ENV}={home} to say that {home} is the home host views protect."
    )


def inside(path: str, root: str) -> bool:
    """`path` is `root` or below it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def changeable(directory: str) -> bool:
    """Whether a host command could rename an entry of `directory`: the gateway's user may write it (a
    root gateway: any), or group or others may (/tmp)."""
    try:
        st = os.stat(directory)
    except OSError:
        return False
    return os.access(directory, os.W_OK) or bool(st.st_mode & 0o022)
