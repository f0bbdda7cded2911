"""The bwrap sandbox's seccomp filter: built by libseccomp's Python bindings (never hand-written BPF) and
handed to `bwrap --seccomp FD` as a memfd. It refuses what Docker's default profile refuses."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from typing import Any

from engine.sandbox.docker_ops import SandboxUnavailable
from engine.sandbox.seccomprules import (
    MODE_ARG,
    NAMESPACE_FLAGS,
    REFUSED_SYSCALLS,
    SANDBOX_SOCKET_FAMILIES,
    SET_ID_BITS,
    TIOCSTI,
    UNSUPPORTED_SYSCALLS,
)


def _seccomp_module() -> Any:
    """libseccomp's Python bindings: the `pyseccomp` wheel, else Debian's python3-seccomp."""
    try:
        import pyseccomp

        return pyseccomp
    except ImportError:
        pass
    try:
        import seccomp

        return seccomp
    except ImportError:
        raise SandboxUnavailable(
            "The bwrap sandbox backend needs libseccomp's Python bindings: `pip install pyseccomp` "
            "(or `apt-get install python3-seccomp`)."
        ) from None


@functools.cache
def seccomp_program() -> bytes:
    """The filter as BPF, exported by libseccomp: everything allowed except REFUSED_SYSCALLS (EPERM),
    clone() making a namespace (EPERM), UNSUPPORTED_SYSCALLS (ENOSYS: clone3's flags are out of a filter's
    reach, and libc falls back to clone; io_setup takes from a host-wide count), TIOCSTI, a set-id bit in
    any mode (EPERM; openat2 ENOSYS), socket() of a family outside SANDBOX_SOCKET_FAMILIES (EAFNOSUPPORT:
    no netlink); another architecture's calls kill the process (libseccomp's default)."""
    sc = _seccomp_module()
    filt = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in REFUSED_SYSCALLS:
        try:
            filt.add_rule(eperm, name)
        except (ValueError, RuntimeError, OSError):  # a call this architecture does not have
            continue
    for flag in NAMESPACE_FLAGS:
        filt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for name in UNSUPPORTED_SYSCALLS:
        with contextlib.suppress(ValueError, RuntimeError, OSError):  # a call this libseccomp lacks
            filt.add_rule(sc.ERRNO(errno.ENOSYS), name)
    filt.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    for name, arg in MODE_ARG.items():
        for bit in SET_ID_BITS:
            try:
                filt.add_rule(eperm, name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
            except (ValueError, RuntimeError, OSError):  # a call this libseccomp or architecture lacks
                break
    # An allowlist written as its complement (a filter's default here is allow): every family number below
    # the largest allowed one that is not allowed, and everything above it, fails as unsupported.
    refused_family = sc.ERRNO(errno.EAFNOSUPPORT)
    top = max(SANDBOX_SOCKET_FAMILIES)
    for family in range(top):
        if family not in SANDBOX_SOCKET_FAMILIES:
            filt.add_rule(refused_family, "socket", sc.Arg(0, sc.EQ, family))
    filt.add_rule(refused_family, "socket", sc.Arg(0, sc.GT, top))
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "wb") as out:
            filt.export_bpf(out)
        with os.fdopen(read_fd, "rb") as src:
            read_fd = -1
            return src.read()
    finally:
        if read_fd >= 0:
            os.close(read_fd)


def seccomp_fd() -> int:
    """A memfd holding the filter at offset 0, for `bwrap --seccomp FD` (close it after the spawn)."""
    fd = os.memfd_create("exechost-seccomp", os.MFD_CLOEXEC)
    data = seccomp_program()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
