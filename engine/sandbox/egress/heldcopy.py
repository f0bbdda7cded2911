"""The egress forwarder the gateway starts outside every view (in a host run's network namespace, as its own
uid): built by this process from the installed source into a sealed memfd and run from that fd, never a file
of the state dir that a stamp beside it vouches for.

`sandbox-bin/egress-forward` and its `.sha` stamp are written by whoever may write the state dir, and a state
dir that no view covers (a second gateway's, recorded under another HOME, kept in a dir the first's agent may
write) is writable by host runs: they planted a program and the stamp (the source's digest is public), and the
next host run's `netkeep` started it as the gateway (fresh round 17 c). No check of a file there can tell the
gateway's build from a planted one, and a file checked is a file swapped after the check: the bytes the
gateway runs are the bytes it compiled itself, from the source in its install dir piped to the compiler, into
memory nobody else names (memfds, no temporary file), sealed against every write, and executed by fd.
`scripts/setup.sh` builds the same source into the install dir (as it builds exechost-hostenter, which is as
trusted), with the source's digest beside it: when that digest is the installed source's, the held copy is
that build's bytes, and a gateway's first host run with egress pays no compile (0.2–0.5 s under load).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from engine import sysbin
from engine.sandbox.egress import forwarder

_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
# (source digest, compiler or "installed") -> a read-only fd of the sealed build: one per process and source
# (a changed source or compiler is built again; the older fd stays open, as a netkeep may still hold it).
_held: dict[tuple[str, str], int] = {}
_lock = threading.Lock()
# Built by scripts/setup.sh from forward.c, its source's sha256 in INSTALLED + ".sha256".
INSTALLED = Path(sys.prefix) / "libexec" / "exechost-egress-forward"


def held_fd() -> int:
    """A read-only fd (close-on-exec) of the forwarder for the installed forward.c: the install's build of it
    when there is one, else built by this process on first use (blocking: ~0.2 s); ForwarderUnavailable when
    neither can be had."""
    source = forwarder.SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    with _lock:
        fd = _held.get((digest, "installed"))
        if fd is None and (installed := _installed(digest)) is not None:
            fd = _held[(digest, "installed")] = _sealed(installed)
    if fd is not None:
        return fd
    compiler = sysbin.which("cc") or sysbin.which("gcc")
    if compiler is None:
        raise forwarder.ForwarderUnavailable(
            "Host runs' egress needs a C compiler, to build the static forwarder (apt-get install gcc "
            'libc6-dev), or set [agents.defaults.sandbox.egress] mode = "none".'
        )
    key = (digest, os.path.realpath(compiler))
    with _lock:
        fd = _held.get(key)
        if fd is None:
            fd = _build(compiler, source)
            _held[key] = fd
        return fd


def _installed(digest: str) -> bytes | None:
    """The install's build of this very source, or None (not built, or built from another source)."""
    try:
        if Path(f"{INSTALLED}.sha256").read_text().strip() != digest:
            return None
        program = INSTALLED.read_bytes()
    except OSError:
        return None
    return program if program.startswith(b"\x7fELF") else None


def _sealed(program: bytes) -> int:
    out = os.memfd_create(forwarder.NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(out, program)
        return _seal(out)
    finally:
        os.close(out)


def _seal(out: int) -> int:
    fcntl.fcntl(out, fcntl.F_ADD_SEALS, _SEALS)
    # Read-only, and the writable fd closed (by the caller): exec refuses a file open for writing (ETXTBSY).
    return os.open(exec_path(out), os.O_RDONLY | os.O_CLOEXEC)


def exec_path(fd: int) -> str:
    """The name that executes `fd` in a process that holds it at the same number (passed, not inherited
    by a name): the kernel opens the fd's own file, whatever is at any path now."""
    return f"/proc/self/fd/{fd}"


def _build(compiler: str, source: bytes) -> int:
    obj = os.memfd_create("egress-forward.o", os.MFD_CLOEXEC)
    out = os.memfd_create(forwarder.NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        # The source as bytes on stdin, the object and the program into memfds named by the children's own
        # /proc/self/fd, and -pipe: nothing the compiler reads or writes has a name another process can open.
        steps = (
            ([compiler, "-Os", "-pipe", "-x", "c", "-c", "-o", exec_path(obj), "-"], source, (obj,)),
            ([compiler, "-static", "-s", "-o", exec_path(out), exec_path(obj)], b"", (obj, out)),
        )
        for argv, given, fds in steps:
            done = subprocess.run(
                argv, input=given, capture_output=True, timeout=120, check=False, pass_fds=fds, cwd="/"
            )
            if done.returncode != 0:
                complaint = done.stderr.decode(errors="replace").strip()[-800:]
                raise forwarder.ForwarderUnavailable(f"could not build the egress forwarder: {complaint}")
        if os.pread(out, 4, 0) != b"\x7fELF":
            raise forwarder.ForwarderUnavailable("could not build the egress forwarder: no program made")
        return _seal(out)
    finally:
        os.close(obj)
        os.close(out)
