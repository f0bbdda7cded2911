"""The host view, prepared once per state dir and entered per run (issue 31): a bubblewrap per run cost
4 ms of CPU and 16-26 ms under load on every gateway-host exec.

A keeper is `bwrap <the host view's operations> -- exechost-hostenter keep`: bwrap builds the view exactly
as it does per run (engine.commands.hostview.view_args), and the keeper holds its namespaces; this process
holds an fd of each as well. A run that needs no pinned copies starts as `exechost-hostenter enter <mnt fd>
<user fd> -- …` (engine/commands/hostenter/run.c) with its own copies of those fds: it joins the kept
namespaces, takes a mount and PID namespace of its own with its own /proc, and runs the command there.
Runs with pinned copies keep their own bwrap (engine.commands.pinned).

The keeper is re-made whenever what shapes the view changes: the operations themselves (a trusted config
appearing or going, a node key or the agents' socket configured), the identity (device, inode) of every
path the operations name (bound, bound over, covered: a config renamed over on the host detaches its
read-only bind in every other namespace, so a kept one would show the new file writable), and the host's
mount table. One keeper per state dir and agent (each agent's view has its own private /tmp and the
like: engine.commands.hostprivate), never shared with another;
it ends when the process that made it does (its stdin closes) or when it is replaced or stopped.
Namespaces outlive it while a run is in them, so a background session is never cut short by a replacement.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.commands import bindsource, hostnet, nsholder

HELPER_NAME = "exechost-hostenter"
KEEP_AT_MOST = 16  # keepers one process holds (one per agent of a state dir; tests make many)
# Starts of a keeper tried before its runs take a bwrap of their own: bwrap's setup fails now and then while
# the host's mount table changes under it (a source's path resolved to another mount: "Race condition
# binding dirfd"; a source's path gone: "Can't find source path"), before anything of a run has started.
START_ATTEMPTS = 3


# Where the helper is, when not in the venv; set empty: none (every run takes a bwrap of its own).
HELPER_ENV = "EXECHOST_HOSTENTER"


def helper_path() -> str | None:
    """The compiled helper (scripts/setup.sh builds it into the venv): None runs every view per run."""
    path = os.environ.get(HELPER_ENV, os.path.join(sys.prefix, "libexec", HELPER_NAME))
    # resolved: a venv reached through a link in a dir that is private in the view (/tmp) is bound at
    # its real path only (engine.commands.importroots), and bwrap runs the helper by this name there
    return os.path.realpath(path) if path and os.access(path, os.X_OK) else None


@dataclass
class Keeper(nsholder.Held):
    """bwrap + `exechost-hostenter keep`: `ns` is the kept mount namespace."""

    key: tuple[object, ...] = ()
    pid: int = 0

    def enter(self, helper: str, layers: Sequence[str] = ()) -> tuple[list[str], tuple[int, ...]] | None:
        """The words that enter the view, each of `layers` (absolute directories) shown through an overlay
        made for the run (engine.commands.homelayer), and the fds they name (this run's own copies, to
        pass to it and close once it is spawned); None once stopped."""
        fds = self.copies()
        if fds is None:
            return None
        user = "-" if len(fds) == 1 else str(fds[1])
        return [helper, "enter", str(fds[0]), user, NO_CWD, NO_PTY, *layers, "--"], fds


# The helper's word for "no cwd to check" (engine.commands.pinned.PinnedView.check_cwd fills in an fd).
NO_CWD = "-"
# The helper's word for "no terminal to make" (engine.commands.pinned.PinnedView.terminal fills in
# TERMINAL_SOCKET: the helper makes the run's terminal in the run's own /dev/pts and sends its master to
# the session host over the socket it has as stdout, engine.sessions.host_spawn.start_view_pty).
NO_PTY = "-"
TERMINAL_SOCKET = "1"


_keepers: OrderedDict[str, Keeper] = OrderedDict()
_lock = threading.Lock()  # making and replacing keepers


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _mounts() -> bytes:
    """The host's mount table as this process sees it. A bwrap made per run copies it as it is then; a
    kept view copied it once, and a host whose / is not a shared mount (a container) propagates nothing
    to it: a mount made or removed since is a reason to re-make it. Namespace files bound somewhere
    (nsfs: a container engine's network namespaces, made and gone with every container) hold nothing to
    read and are left out, or every container started would re-make the view."""
    with open("/proc/self/mountinfo", "rb") as f:
        return b"".join(line for line in f if b" - nsfs " not in line)


def view_key(bwrap: str, helper: str, state: str, ops: list[str]) -> tuple[object, ...]:
    """Everything the kept view depends on: equal keys, the same view."""
    # every path bound, and every path bound over or covered: a file renamed over a mountpoint on the
    # host (a node key replaced, a config saved) is no longer covered in a kept namespace
    bound = tuple(_identity(word) for word in ops if word.startswith("/"))
    return (bwrap, helper, state, tuple(ops), _identity(state), bound, _mounts())


def slot(state: str, private: str | None) -> str:
    """The name a keeper is held under: its state dir, and the agent's private dir when it has one (one
    agent's view is never another's)."""
    return state if private is None else f"{state}\0{os.path.dirname(private)}"


def current(key: tuple[object, ...], state: str) -> Keeper | None:
    """The live keeper of this slot (slot()) made for `key`, without blocking; None when one must be made."""
    keeper = _keepers.get(state)
    return keeper if keeper is not None and keeper.key == key and keeper.alive() else None


def ensure(
    key: tuple[object, ...],
    state: str,
    bwrap: str,
    helper: str,
    ops: list[str],
    outer: tuple[list[str], tuple[int, ...]] | None = None,
    owned: frozenset[str] = frozenset(),
) -> Keeper | None:
    """The keeper for `key` (made, or re-made, here: blocking, a few ms); None when it cannot be made
    (the run then takes a bwrap of its own, which says why if it fails too). `outer`: words (and the fds
    they name, the caller's) its bwrap starts after: the agent's network namespace's user namespace, for
    a gateway that is not root (engine.commands.hostnet). `owned`: the writable roots, each bound only
    when it is this account's on the fds bwrap mounts (engine.commands.bindsource.by_fd)."""
    with _lock:
        keeper = current(key, state)
        if keeper is not None:
            _keepers.move_to_end(state)
            return keeper
        old = _keepers.pop(state, None)
        if old is not None:
            old.stop()
        keeper = None
        for _ in range(START_ATTEMPTS):
            keeper = _start(key, bwrap, helper, ops, outer or ([], ()), owned)
            if keeper is not None:
                break
        if keeper is None:
            return None
        _keepers[state] = keeper
        while len(_keepers) > KEEP_AT_MOST:
            _keepers.popitem(last=False)[1].stop()
        return keeper


def _start(
    key: tuple[object, ...],
    bwrap: str,
    helper: str,
    ops: list[str],
    outer: tuple[list[str], tuple[int, ...]],
    owned: frozenset[str] = frozenset(),
) -> Keeper | None:
    try:
        # every bind's source by an fd opened now, no link followed: the directory checked is the one bound
        by_fd, fds_in = bindsource.by_fd(ops, owned)
    except OSError:
        return None  # moved meanwhile: the run's own bwrap says why
    try:
        popen = subprocess.Popen(
            [*outer[0], bwrap, *by_fd, "--", helper, "keep"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no terminal's signal and no group kill of ours reaches it
            cwd="/",
            pass_fds=(*fds_in, *outer[1]),
        )
    finally:
        bindsource.close(fds_in)  # bwrap has its own copies; it mounts them before the keeper reports
    taken = nsholder.take(popen, "mnt")
    if taken is None:
        Keeper(popen, -1, None, key=key).stop()
        return None
    pid, ns, user = taken
    keeper = Keeper(popen, ns, user, key=key, pid=pid)
    # The kept namespace private before any run enters it: bwrap left it a slave of the host's, and a
    # mount made on the host later arrived in every running view with its own flags (fresh round 10 a).
    # Refused (a helper too old to know `seal`): no keeper, every run takes a bwrap of its own.
    user_word = "-" if keeper.user is None else str(keeper.user)
    passed = (keeper.ns,) if keeper.user is None else (keeper.ns, keeper.user)
    words = [helper, "seal", str(keeper.ns), user_word]
    sealed = subprocess.run(words, pass_fds=passed, cwd="/", capture_output=True, check=False)
    if sealed.returncode != 0:
        keeper.stop()
        return None
    return keeper


def stop(state: str | None = None) -> None:
    """End the keepers of `state`, every agent's (every keeper of this process when None), and the
    agents' network namespaces with them."""
    hostnet.stop(state)
    with _lock:
        for name in [n for n in _keepers if state is None or n.split("\0")[0] == state]:
            keeper = _keepers.pop(name, None)
            if keeper is not None:
                keeper.stop()
