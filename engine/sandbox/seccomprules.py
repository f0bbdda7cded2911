"""What both sandbox backends' and the gateway-host runs' seccomp filters refuse: one rule set, encoded for
bwrap by engine/sandbox/seccomp.py (libseccomp), for Docker by engine/sandbox/dockerseccomp.py (a profile)
and for host runs by engine/sandbox/seccomphost.py (a C header exechost-hostenter is built with)."""

from __future__ import annotations

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
# Calls that fail as unimplemented (ENOSYS), so programs take their fallback: clone3 and openat2 carry their
# flags and mode in a struct no filter reads (libc falls back to clone and openat); io_setup takes from
# fs.aio-max-nr, one count for the whole host that no namespace or cgroup divides, so one sandbox could
# take every AIO context of the host (fresh round 10 b): libaio users (databases, fio) fall back to
# threads, glibc's POSIX AIO never used it. (io_uring_setup is refused outright, as Docker refuses it.)
UNSUPPORTED_SYSCALLS = ("clone3", "openat2", "io_setup")
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
# What the sandboxes (bwrap and Docker) allow of those: no AF_NETLINK. A netlink socket's queued buffers
# are charged to no memory group (v1's or v2's) and counted by no host-wide limit (TCP and UDP at least
# have tcp_mem/udp_mem), and SO_RCVBUF's ceiling, net.core.rmem_max, is read-only outside the host's own
# network namespace (kernel 6.18: even for root, even by Docker's --sysctl), so it cannot be lowered per
# sandbox: a sandbox capped at 128m queued 518 MiB to NETLINK_USERSOCK sockets it never read (fresh round
# 18 a), ~8 MiB a socket. Keeping only NETLINK_ROUTE would not close it (its own replies to requests it
# never reads fill the same 8 MiB). No sandboxed command needs netlink: glibc's getaddrinfo (AI_ADDRCONFIG)
# takes both address families as present when the socket fails; `ip`/`ss` see nothing of the host in a
# sandbox's own namespace anyway. AF_UNIX's queues are charged to the memory group, so they stay.
SANDBOX_SOCKET_FAMILIES = tuple(f for f in SOCKET_FAMILIES if f != 16)
# What a gateway-host run's filter (exechost-hostenter, engine/sandbox/seccomphost.py) refuses of the above:
# a host run is the operator's own programs in a view of the host, so not the sandboxes' whole list (a
# debugger's ptrace, a tool's own namespaces are the host's), but what reaches past its namespaces and
# view: the account's keyrings (in no namespace: fresh rounds 11 a, 14 c), io_uring (its socket operation
# makes a socket no filter sees), a socket family outside SOCKET_FAMILIES (AF_VSOCK: fresh round 13 b),
# and a set-id bit in any mode, as in the sandboxes (fresh round 17 a: a run of a root gateway left a
# setuid copy of a program, root's, in its hostWritable dir on the host); openat2 fails as unimplemented
# there too (its mode is in a struct no filter reads), and so does io_setup: fs.aio-max-nr is one count for
# the whole host, which one agent's run took whole from the operator's own database (fresh round 17 a).
# And the calls that set the host's clock (one for every namespace: a time namespace offsets only the
# monotonic and boot clocks), a second layer under the capabilities a root run keeps (engine.commands.
# rootcaps: no CAP_SYS_TIME), fresh round 18 a; no run but a root one could ever make them. clock_adjtime
# stays (glibc's adjtimex reads the clock's state through it; setting needs CAP_SYS_TIME).
HOST_REFUSED_SYSCALLS: tuple[str, ...] = ("keyctl", "add_key", "request_key", "io_uring_setup")
HOST_REFUSED_SYSCALLS += ("settimeofday", "clock_settime")
HOST_UNSUPPORTED_SYSCALLS = ("openat2", "io_setup")
