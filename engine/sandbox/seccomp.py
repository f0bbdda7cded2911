"""The bwrap sandbox's seccomp filter: built by libseccomp's Python bindings (never hand-written BPF) and
handed to `bwrap --seccomp FD` as a memfd. It refuses what Docker's default profile refuses."""

from __future__ import annotations

import contextlib
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
# The calls that give a file its mode, and which argument holds it. The sandbox's uid may be the host's
# root (a root gateway's), and a file's owner may set S_ISUID/S_ISGID without any capability: a setuid
# root binary in the workspace is a root shell on the host for whoever reaches that dir (binds are nosuid
# inside; the host's mounts are not). Those bits are refused wherever a mode is given; openat2, whose mode
# sits in a struct no filter reads, gets ENOSYS (libc and runtimes fall back to openat).
MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1}
MODE_ARG |= {"mknod": 1, "mknodat": 2}
SET_ID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID
# The socket families a sandbox may open: those a network namespace confines (plus AF_UNIX, whose reach is
# the mount view). Every other family is refused, as Flatpak does: AF_VSOCK in particular ignores the
# network namespace and reaches the hypervisor's services from a sandbox that has no network at all, and
# the rarer families (ALG, TIPC, RDS, …) are kernel attack surface no command needs.
SOCKET_FAMILIES = (
    1,  # AF_UNIX
    2,  # AF_INET
    10,  # AF_INET6
    16,  # AF_NETLINK (getaddrinfo, ip): per network namespace
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
    clone() making a namespace (EPERM), clone3 (ENOSYS: its flags are out of a filter's reach, and libc
    falls back to clone), TIOCSTI, a set-id bit in any mode (EPERM; openat2 ENOSYS), socket() of a family
    outside SOCKET_FAMILIES (EAFNOSUPPORT); another architecture's calls kill the process (libseccomp's
    default)."""
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
    for name, arg in MODE_ARG.items():
        for bit in SET_ID_BITS:
            try:
                filt.add_rule(eperm, name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
            except (ValueError, RuntimeError, OSError):  # a call this libseccomp or architecture lacks
                break
    with contextlib.suppress(ValueError, RuntimeError, OSError):
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "openat2")
    # An allowlist written as its complement (a filter's default here is allow): every family number below
    # the largest allowed one that is not allowed, and everything above it, fails as unsupported.
    refused_family = sc.ERRNO(errno.EAFNOSUPPORT)
    top = max(SOCKET_FAMILIES)
    for family in range(top):
        if family not in SOCKET_FAMILIES:
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
