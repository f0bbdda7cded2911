"""The capabilities a root gateway's host run keeps: a short list of what a root user's ordinary shell work
needs, every other one gone from all five sets (fresh round 18 a), so a capability the kernel adds later is
not kept either. exechost-hostenter drops to it (rules.h, written by engine.sandbox.seccomphost); a run with
no helper gets it as bwrap's words (`bwrap_ops`)."""

from __future__ import annotations

# (name, bit, why a root run keeps it). Not kept, among others: CAP_SYS_ADMIN (umount a view's cover,
# sethostname, mount), CAP_SYS_TIME (the host's clock), CAP_DAC_READ_SEARCH (open_by_handle_at opens any
# file of a filesystem by its handle, past every mount of the view; CAP_DAC_OVERRIDE reads what it reads),
# CAP_NET_RAW and CAP_NET_ADMIN (a raw socket or a route in the host's network namespace), CAP_SYS_PTRACE,
# CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_BOOT, CAP_SYS_NICE, CAP_SYS_RESOURCE, CAP_IPC_LOCK, CAP_LEASE,
# CAP_LINUX_IMMUTABLE, CAP_MAC_*, CAP_BPF, CAP_PERFMON, CAP_SYSLOG, CAP_AUDIT_CONTROL, CAP_AUDIT_READ,
# CAP_CHECKPOINT_RESTORE, CAP_WAKE_ALARM, CAP_BLOCK_SUSPEND, and CAP_SETFCAP, CAP_MKNOD (fresh round 17 a).
KEPT: tuple[tuple[str, int, str], ...] = (
    ("CAP_CHOWN", 0, "chown: unpacking, installing, fixing a file's owner"),
    ("CAP_DAC_OVERRIDE", 1, "root's reads and writes of other accounts' files (what the view shows)"),
    ("CAP_FOWNER", 3, "chmod, utimes, xattrs of a file it does not own"),
    ("CAP_FSETID", 4, "a file's group bit kept on a write (set-id modes are refused by the filter)"),
    ("CAP_KILL", 5, "signals to its own processes of other uids (its own PID namespace only)"),
    ("CAP_SETGID", 6, "setgid, setgroups: su, setpriv, runuser, a package manager's sandbox user"),
    ("CAP_SETUID", 7, "setuid: the same programs"),
    ("CAP_SETPCAP", 8, "drop more (setpriv --bounding-set, a nested sandbox); adds none past this list"),
    ("CAP_NET_BIND_SERVICE", 10, "a server on a port below 1024"),
    ("CAP_SYS_CHROOT", 18, "chroot (dpkg --root, a build root): inside the run's own mount namespace"),
    ("CAP_AUDIT_WRITE", 29, "login-like programs (su, sudo) write their audit record or fail"),
)


def kept_bits() -> int:
    """The kept set as a capability mask (the form /proc/<pid>/status shows)."""
    mask = 0
    for _, bit, _ in KEPT:
        mask |= 1 << bit
    return mask


def bwrap_ops() -> tuple[str, ...]:
    """bwrap's words for a root run with no helper: every capability dropped, the kept ones added back."""
    ops: list[str] = ["--cap-drop", "ALL"]
    for name, _, _ in KEPT:
        ops += ["--cap-add", name]
    return tuple(ops)
