"""The host view, prepared once per state dir and entered per run (issue 31): a bubblewrap per run cost
4 ms of CPU and 16-26 ms under load on every gateway-host exec.

A keeper is `bwrap <the host view's operations> -- exechost-hostenter keep`: bwrap builds the view exactly
as it does per run (engine.commands.hostview.view_args), and the keeper holds its namespaces. A run that
needs no pinned copies starts as `exechost-hostenter enter <keeper pid> <mnt inode> <user inode> -- …`
(engine/commands/hostenter.c): it joins the kept namespaces (checked by inode, so a pid reused by another
process is never entered), takes a mount and PID namespace of its own with its own /proc, and runs the
command there. Runs with pinned copies keep their own bwrap (engine.commands.pinned).

The keeper is re-made whenever what shapes the view changes: the operations themselves (a trusted config
appearing or going), the identity (device, inode) of every file bound and of the state dir (a config
renamed over on the host detaches its read-only bind in every other namespace, so a kept one would show
the new file writable), and the host's mount table. One keeper per state dir, never shared with another;
it ends when the process that made it does (its stdin closes) or when it is replaced or stopped.
Namespaces outlive it while a run is in them, so a background session is never cut short by a replacement.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

HELPER_NAME = "exechost-hostenter"
KEEP_AT_MOST = 8  # keepers one process holds (a gateway serves one state dir; tests make many)


def helper_path() -> str | None:
    """The compiled helper (scripts/setup.sh builds it into the venv): None runs every view per run."""
    path = os.path.join(sys.prefix, "libexec", HELPER_NAME)
    return path if os.access(path, os.X_OK) else None


@dataclass
class Keeper:
    key: tuple[object, ...]
    popen: subprocess.Popen[bytes]
    pid: int
    mnt: int
    user: int | None  # the keeper's user namespace when it is not ours (bwrap as non-root)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def prefix(self, helper: str) -> list[str]:
        user = "-" if self.user is None else str(self.user)
        return [helper, "enter", str(self.pid), str(self.mnt), user, "--"]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.popen.stdin is not None:
                self.popen.stdin.close()  # the keeper's cue: it exits, and bwrap with it
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_keepers: OrderedDict[str, Keeper] = OrderedDict()
_lock = threading.Lock()


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
    bound = tuple(_identity(ops[i + 1]) for i, op in enumerate(ops) if op == "--ro-bind")
    return (bwrap, helper, state, tuple(ops), _identity(state), bound, _mounts())


def current(key: tuple[object, ...], state: str) -> Keeper | None:
    """The live keeper of this state dir made for `key`, without blocking; None when one must be made."""
    keeper = _keepers.get(state)
    return keeper if keeper is not None and keeper.key == key and keeper.alive() else None


def ensure(key: tuple[object, ...], state: str, bwrap: str, helper: str, ops: list[str]) -> Keeper | None:
    """The keeper for `key` (made, or re-made, here: blocking, a few ms); None when it cannot be made
    (the run then takes a bwrap of its own, which says why if it fails too)."""
    with _lock:
        keeper = current(key, state)
        if keeper is not None:
            _keepers.move_to_end(state)
            return keeper
        old = _keepers.pop(state, None)
        if old is not None:
            old.stop()
        keeper = _start(key, bwrap, helper, ops)
        if keeper is None:
            return None
        _keepers[state] = keeper
        while len(_keepers) > KEEP_AT_MOST:
            _keepers.popitem(last=False)[1].stop()
        return keeper


def _start(key: tuple[object, ...], bwrap: str, helper: str, ops: list[str]) -> Keeper | None:
    popen = subprocess.Popen(
        [bwrap, *ops, "--", helper, "keep"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # no terminal's signal and no group kill of ours reaches it
        cwd="/",
    )
    assert popen.stdout is not None
    try:
        line = popen.stdout.readline()
        pid = int(line)
        mnt = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        user = os.stat(f"/proc/{pid}/ns/user").st_ino
    except (ValueError, OSError):
        keeper = Keeper(key, popen, 0, 0, None)
        keeper.stop()
        return None
    finally:
        popen.stdout.close()
    ours = os.stat("/proc/self/ns/user").st_ino
    return Keeper(key, popen, pid, mnt, None if user == ours else user)


def stop(state: str | None = None) -> None:
    """End the keeper of `state` (every keeper of this process when None)."""
    with _lock:
        for name in [state] if state is not None else list(_keepers):
            keeper = _keepers.pop(name, None) if name is not None else None
            if keeper is not None:
                keeper.stop()
