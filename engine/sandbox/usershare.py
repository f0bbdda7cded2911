"""A bwrap sandbox's user namespace, made before bwrap with the kernel's per-user counts that are kept per
user namespace (inotify instances and watches) capped at a share of the gateway user's: every sandbox's
processes were charged to the gateway's uid alone, and one sandboxed command took all 128 inotify
instances, so another agent's runs and the operator's own programs (an editor, a file watcher) got EMFILE
(fresh round 10 b).

The kernel charges a count to the namespace the process is in and to every namespace above it, each
checked against its own `/proc/sys/user/max_*`; a namespace made here with its maxima at SHARE of the
gateway's leaves the rest to everyone else, whatever the sandbox does (its seccomp filter refuses making a
namespace of its own, which would be charged here too). bwrap joins it (`--userns FD`) in place of
`--unshare-user`. Root gateways only: the namespace is made by the sandbox's own uid
(engine.sandbox.sandboxuid), mapping its root inside to that uid, one id, and bwrap runs as that uid to join
it; a gateway that is not root keeps bwrap's own namespace (docs/SECURITY.md).
"""

from __future__ import annotations

import os
import subprocess

from engine import sysbin

SHARE = 8  # of the gateway user's counts, per sandbox
COUNTS = ("max_inotify_instances", "max_inotify_watches")


def _maxima() -> dict[str, int]:
    out = {}
    for name in COUNTS:
        with open(f"/proc/sys/user/{name}") as f:
            out[name] = max(1, int(f.read()) // SHARE)
    return out


def user_namespace(drop: list[str] | None = None) -> int | None:
    """An fd of a new user namespace with its maxima set (the caller passes it to bwrap and closes it);
    None where it cannot be made (not root, no unshare, a kernel without the files): bwrap makes its own.
    `drop` (engine.sandbox.sandboxuid.drop_to): made by the sandbox's own uid, so it maps the sandbox's root
    to that uid and bwrap, running as it, may join it."""
    unshare = sysbin.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return None
    try:
        maxima = _maxima()
    except (OSError, ValueError):
        return None
    script = "".join(f"echo {n} > /proc/sys/user/{name} && " for name, n in maxima.items())
    script += "echo ready && exec cat > /dev/null"
    proc = subprocess.Popen(
        [*(drop or ()), unshare, "--user", "--map-root-user", "--", "/bin/sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
    )
    assert proc.stdin is not None and proc.stdout is not None
    fd = -1
    try:
        if proc.stdout.readline() == b"ready\n":  # its maxima are set; it waits on its stdin
            fd = os.open(f"/proc/{proc.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        fd = -1
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()
    return fd if fd >= 0 else None
