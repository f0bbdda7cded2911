"""A directory-swap racer: what a sandboxed process does to redirect the host's writes into its workspace.

`exchange_loop(a, b)` runs, in its own process, `renameat2(a, b, RENAME_EXCHANGE)` as fast as it can, so
that `a` is one moment the real directory and the next a link to a host directory. The exchange is atomic:
there is never a moment when neither name exists, which is what defeats check-then-use by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator

AT_FDCWD, RENAME_EXCHANGE = -100, 2  # glibc's renameat2 (2.28+)

_RACER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
swap = lambda: libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
if swap() != 0:
    sys.stdout.write("err %d\n" % ctypes.get_errno()); sys.stdout.flush(); sys.exit(1)
sys.stdout.write("go\n"); sys.stdout.flush()
n = 1
while True:
    swap(); n += 1
    if n % 2 == 0 and os.getppid() == 1:  # orphaned: the test died
        break
"""


def exchange(a: str, b: str) -> None:
    """One atomic swap of `a` and `b` (renameat2 RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


@contextlib.contextmanager
def exchange_loop(a: str, b: str) -> Iterator[None]:
    """Swap `a` and `b` atomically in a loop while the block runs; on exit both are back in place."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _RACER, a, b], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if first != "go":
            raise RuntimeError(f"the racer could not swap {a} and {b}: {first or proc.wait()}")
        yield
    finally:
        proc.kill()
        proc.wait()
        if os.path.islink(a) and not os.path.islink(b):  # stopped mid-way: put the real dir back
            exchange(a, b)


def tries(most: int, budget_s: float = 90.0) -> Iterator[int]:
    """Up to `most` tries of a race, stopping early once `budget_s` has passed: on a loaded machine each
    try may take seconds, and a race the old code lost within a few tries must not outrun the test's
    timeout when the defence holds. (Bounds the loop only; nothing asserts a time.)"""
    import time

    deadline = time.monotonic() + budget_s
    for n in range(most):
        if n and time.monotonic() >= deadline:
            return
        yield n
