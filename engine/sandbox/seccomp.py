"""The bwrap sandbox's seccomp filter: built by libseccomp's Python bindings (never hand-written BPF) and
handed to `bwrap --seccomp FD` as a memfd. It refuses what Docker's default profile refuses."""

from __future__ import annotations

import errno
import functools
import os
from typing import Any

from engine.sandbox.docker_ops import SandboxUnavailable

# Docker's default seccomp profile refuses these (moby profiles/seccomp default.json, the calls it leaves
# out of its allowlist or allows only with CAP_SYS_ADMIN and friends, which a sandbox never has), plus
# ptrace and process_vm_*: a sandbox has nothing to trace but itself.
REFUSED_SYSCALLS = (
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "syslog",
    "sysfs",
    "_sysctl",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vhangup",
    "vm86",
    "vm86old",
)
# clone() with any of these makes a namespace: refused, as Docker refuses it without CAP_SYS_ADMIN.
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
TIOCSTI = 0x5412


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
    clone() making a namespace (EPERM), clone3 (ENOSYS: its flags are out of a filter's reach, and libc
    falls back to clone), TIOCSTI; another architecture's calls kill the process (libseccomp's default)."""
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
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    filt.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
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
