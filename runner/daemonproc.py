"""A daemon (the gateway, a node service) starts from a process state of its own, whatever its starter
handed it: an agent's client that autostarts the gateway could otherwise give it (and every run it starts)
no address-space randomisation, a blocked or ignored signal, core dumps of a memory that holds every token,
or a file-size limit that fails its journal writes. The umask is statefs.settle_umask's."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import resource
import signal
import sys
from pathlib import Path

from engine import statefs

log = logging.getLogger("exechost.daemon")

PER_LINUX = 0  # the kernel's default personality: every address-space randomisation on
QUERY = 0xFFFFFFFF  # personality(2): read, change nothing
# Set by the one re-exec that takes a new personality (a personality shapes the address space at exec).
REEXEC_ENV = "EXECHOST_DAEMON_REEXEC"

# Limits a daemon takes at their hard value: a starter's lower soft value is no bound the daemon chose.
# (RLIMIT_STACK is left: an unlimited stack changes the mmap layout; RLIMIT_NOFILE is
# procs.raise_open_file_limit's.)
RAISED = {
    "cpu time": resource.RLIMIT_CPU,
    "file size": resource.RLIMIT_FSIZE,
    "data size": resource.RLIMIT_DATA,
    "address space": resource.RLIMIT_AS,
    "processes": resource.RLIMIT_NPROC,
    "pending signals": resource.RLIMIT_SIGPENDING,
    "message queue bytes": resource.RLIMIT_MSGQUEUE,
}
# What Python itself ignores at start (writes then fail with EPIPE/EFBIG, which it handles): kept.
PYTHONS_OWN = {signal.SIGPIPE, signal.SIGXFSZ}


def settle() -> list[str]:
    """Take a process state of the daemon's own; what the starter had set otherwise, for the log
    (log_notes). May re-exec this process once (a personality): call it first, before any fd or thread is
    made."""
    notes = _personality()
    statefs.settle_umask()
    blocked = signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if blocked:
        names = sorted(signal.Signals(s).name for s in blocked)
        notes.append("signals blocked by the starter unblocked: " + ", ".join(names))
    defaulted = []
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP) or sig in PYTHONS_OWN:
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
                defaulted.append(signal.Signals(sig).name)
    if defaulted:
        notes.append("signals ignored by the starter set to their defaults: " + ", ".join(sorted(defaulted)))
    # Core dumps off: the daemon's memory holds the gateway's, the operator's and the agents' tokens.
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    root = os.geteuid() == 0
    for name, which in RAISED.items():
        soft, hard = resource.getrlimit(which)
        want = resource.RLIM_INFINITY if root else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (want, want))
        if soft != hard:  # lowered below its hard limit by whoever started it (a default soft is the hard)
            now, _ = resource.getrlimit(which)
            shown = "unlimited" if now == resource.RLIM_INFINITY else str(now)
            notes.append(f"its {name} limit, {soft} as started, lifted to {shown}")
    return notes


def pinned_state_dir() -> Path:
    """A node process's state dir, resolved once and used as resolved from here on (by everything it
    opens, and named so to what it starts): a link on the named way may be re-pointed while it serves
    (fresh round 17 c); the server judges the path returned (engine.commands.gatewaydirs.adopt)."""
    state = statefs.pin_state_dir(statefs.state_dir())
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    return state


def log_notes(notes: list[str]) -> None:
    """What settle() changed, once logging is set up (settle runs before it: it may re-exec)."""
    for note in notes:
        log.warning("daemon start: %s", note)


def _personality() -> list[str]:
    once = os.environ.pop(REEXEC_ENV, None) is not None  # (bounds the re-exec to one, skips nothing)
    current = _libc_personality(QUERY)
    if current in (PER_LINUX, None):
        return []
    if _libc_personality(PER_LINUX) is None or _libc_personality(QUERY) != PER_LINUX:
        return [f"its personality is {current:#x} (it could not be reset)"]
    if once:
        return [f"its personality was {current:#x} again after its re-exec: reset for its runs only"]
    # The address space was laid out under the starter's personality: only a new exec lays it out anew.
    os.environ[REEXEC_ENV] = "1"
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606 (itself, as it was started)
    return []  # (not reached)


def _libc_personality(value: int) -> int | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result = int(libc.personality(ctypes.c_ulong(value)))
    except (OSError, AttributeError):
        return None
    return None if result == -1 else result & 0xFFFFFFFF
