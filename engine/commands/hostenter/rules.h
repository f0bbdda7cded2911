/* Generated from engine/sandbox/seccomprules.py by `python -m engine.sandbox.seccomphost`:
   do not edit. The gateway-host runs' seccomp rules (confine.c builds the filter from them). */

#ifndef EXECHOST_HOSTENTER_RULES_H
#define EXECHOST_HOSTENTER_RULES_H

#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

#define HOST_SET_ID_BITS 06000

/* nr, the argument holding a mode (-1: refused whatever its arguments), the errno it fails with */
static const struct host_rule {
    long nr;
    int mode_arg;
    int err;
} HOST_RULES[] = {
#ifdef SYS_keyctl
    {SYS_keyctl, -1, EPERM},
#endif
#ifdef SYS_add_key
    {SYS_add_key, -1, EPERM},
#endif
#ifdef SYS_request_key
    {SYS_request_key, -1, EPERM},
#endif
#ifdef SYS_io_uring_setup
    {SYS_io_uring_setup, -1, EPERM},
#endif
#ifdef SYS_settimeofday
    {SYS_settimeofday, -1, EPERM},
#endif
#ifdef SYS_clock_settime
    {SYS_clock_settime, -1, EPERM},
#endif
#ifdef SYS_openat2
    {SYS_openat2, -1, ENOSYS},
#endif
#ifdef SYS_io_setup
    {SYS_io_setup, -1, ENOSYS},
#endif
#ifdef SYS_chmod
    {SYS_chmod, 1, EPERM},
#endif
#ifdef SYS_fchmod
    {SYS_fchmod, 1, EPERM},
#endif
#ifdef SYS_fchmodat
    {SYS_fchmodat, 2, EPERM},
#endif
#ifdef SYS_fchmodat2
    {SYS_fchmodat2, 2, EPERM},
#endif
#ifdef SYS_open
    {SYS_open, 2, EPERM},
#endif
#ifdef SYS_openat
    {SYS_openat, 3, EPERM},
#endif
#ifdef SYS_creat
    {SYS_creat, 1, EPERM},
#endif
#ifdef SYS_mknod
    {SYS_mknod, 1, EPERM},
#endif
#ifdef SYS_mknodat
    {SYS_mknodat, 2, EPERM},
#endif
};

/* socket() opens only these families (a network namespace confines them), others EAFNOSUPPORT */
static const int HOST_SOCKET_FAMILIES[] = {1, 2, 10, 16};

/* the capabilities a root gateway's run keeps (engine/commands/rootcaps.py); every other goes */
static const int HOST_ROOT_KEPT_CAPS[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE};

#endif
