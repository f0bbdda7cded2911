"""The Docker sandbox's seccomp profile: Docker's default allowlist for a container without capabilities,
narrowed by the rules of the bwrap filter (engine/sandbox/seccomprules.py), so both backends refuse the same.

Docker takes one profile per container and cannot layer one on its default, so this is a whole profile in
Docker's own semantics: everything outside the allowlist fails with EPERM. The list is the calls Docker's
default profile allows a container whatever its capabilities (our containers drop all of them, so the
capability-gated entries of Docker's profile would add nothing), less REFUSED_SYSCALLS; the calls that
give a file its mode are allowed only when that mode carries no set-id bit (MODE_ARG); clone only without
a namespace flag; UNSUPPORTED_SYSCALLS fail with ENOSYS (clone3's and openat2's flags sit in a struct no
filter reads, and libc and runtimes fall back to clone and openat; io_setup takes from the host-wide
fs.aio-max-nr, and libaio's users fall back to threads); socket only for SANDBOX_SOCKET_FAMILIES (no
netlink). A call this runc's libseccomp does not know is dropped from the profile by runc, so it fails too.
"""

from __future__ import annotations

import errno
import functools
import json
from typing import Any

from engine.sandbox.seccomprules import (
    MODE_ARG,
    NAMESPACE_FLAGS,
    REFUSED_SYSCALLS,
    SANDBOX_SOCKET_FAMILIES,
    SET_ID_BITS,
    UNSUPPORTED_SYSCALLS,
)

_ALLOWED = """
accept accept4 access adjtimex alarm arch_prctl bind brk capget capset chdir chown chown32 clock_getres
clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range
connect copy_file_range dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait
epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2
fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchown fchown32 fchownat fcntl fcntl64 fdatasync
fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync
ftruncate ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid
getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp
getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list
getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr
inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents
io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit ipc kill landlock_add_rule
landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat listen listxattr
llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise membarrier memfd_create memfd_secret
mincore mkdir mkdirat mlock mlock2 mlockall mmap mmap2 modify_ldt mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget
msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect pause pidfd_open
pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64
preadv preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read
readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min
sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr
sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32
setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority setregid setregid32 setresgid
setresgid32 setresuid setresuid32 setreuid setreuid32 setrlimit set_robust_list setsid setsockopt
set_thread_area set_tid_address setuid setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack
signalfd signalfd4 sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx
symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create timerfd_gettime
timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname
unlink unlinkat utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
"""
# The personalities Docker's default allows (Linux, with UNAME26 and/or ADDR_NO_RANDOMIZE, and the query).
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
ALLOWED_SYSCALLS = tuple(
    n for n in _ALLOWED.split() if n not in (*REFUSED_SYSCALLS, *UNSUPPORTED_SYSCALLS) and n not in MODE_ARG
)


def _rule(
    name: str, action: str = "SCMP_ACT_ALLOW", *args: dict[str, int | str], **extra: Any
) -> dict[str, Any]:
    return {"names": [name], "action": action, "args": list(args), **extra}


def _arg(index: int, op: str, value: int, value_two: int = 0) -> dict[str, int | str]:
    # Docker's MASKED_EQ: (arg & value) == valueTwo
    return {"index": index, "op": op, "value": value, "valueTwo": value_two}


@functools.cache
def profile_json() -> str:
    """The profile as the Engine API takes it (`security_opt` "seccomp=<json>")."""
    set_id = sum(SET_ID_BITS)
    rules: list[dict[str, Any]] = [{"names": list(ALLOWED_SYSCALLS), "action": "SCMP_ACT_ALLOW", "args": []}]
    # One condition per rule: runc ORs several conditions on the same argument, so "no set-id bit" is a
    # single MASKED_EQ against both bits at once.
    rules += [
        _rule(name, "SCMP_ACT_ALLOW", _arg(arg, "SCMP_CMP_MASKED_EQ", set_id))
        for name, arg in MODE_ARG.items()
    ]
    rules.append(_rule("clone", "SCMP_ACT_ALLOW", _arg(0, "SCMP_CMP_MASKED_EQ", sum(NAMESPACE_FLAGS))))
    rules += [
        _rule("socket", "SCMP_ACT_ALLOW", _arg(0, "SCMP_CMP_EQ", family))
        for family in SANDBOX_SOCKET_FAMILIES
    ]
    rules += [_rule("personality", "SCMP_ACT_ALLOW", _arg(0, "SCMP_CMP_EQ", p)) for p in PERSONALITIES]
    rules += [_rule(name, "SCMP_ACT_ERRNO", errnoRet=errno.ENOSYS) for name in UNSUPPORTED_SYSCALLS]
    profile = {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.EPERM, "syscalls": rules}
    return json.dumps(profile, separators=(",", ":"))
