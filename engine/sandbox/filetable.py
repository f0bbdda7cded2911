"""A sandbox's share of the host's open-file table: fs.file-max is one count for the whole machine (no
namespace or cgroup divides it), and past it every process without CAP_SYS_ADMIN gets ENFILE on each open.

A sandbox's processes may hold at most nofile (hard) x pidsLimit open files, so that product is what it may
take; it is kept within 1/fileTableShare of fs.file-max (16 by default: docs/SECURITY.md). Unset, a
sandbox's nofile is the default (4096 soft, 8192 hard) lowered to fit (301 with pidsLimit 512 and this
machine's 2.47M), never below 64 (a shell and its pipes need a few: where 64 x pidsLimit is past the share,
a small host's or a large pidsLimit's, the floor wins and docs/SECURITY.md says so); an operator's own nofile
past the share refuses the sandbox's start, saying which key to change (fresh round 18 a: the defaults'
8192 x 512 = 4.2M exceeded the whole table).
"""

from __future__ import annotations

import resource

from engine.config.schema import DEFAULT_ULIMITS
from engine.sandbox.errors import SandboxError
from engine.sandbox.ownergroups import AGENT_PIDS_SHARE
from engine.sandbox.settings import DockerSettings

DEFAULT_SHARE = 16  # docker.fileTableShare: what one sandbox's processes together may hold of fs.file-max


def file_max() -> int:
    try:
        with open("/proc/sys/fs/file-max") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 1 << 20


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 32768


def nofile(d: DockerSettings) -> tuple[int, int]:
    """The sandbox's RLIMIT_NOFILE (soft, hard): the configured one where it fits the share, the default
    lowered to fit where none was configured; SandboxError for an operator's value past it. A sandbox
    with no pidsLimit counts as its owner's whole pids cap (pid_max/4)."""
    share = d.file_table_share or DEFAULT_SHARE
    budget = file_max() // share
    pids = d.pids_limit or _pid_max() // AGENT_PIDS_SHARE
    soft, hard = d.ulimits.get("nofile", DEFAULT_ULIMITS["nofile"])
    fits = budget // pids
    if (soft, hard) == DEFAULT_ULIMITS["nofile"]:
        top = max(min(hard, fits), 64)  # (a shell and its pipes need a few; below that the share is the pids)
        return min(soft, top), top
    if hard == resource.RLIM_INFINITY or hard < 0 or hard * pids > budget:
        raise SandboxError(
            f"sandbox not started: docker.ulimits nofile (hard {hard}) x docker.pidsLimit ({pids}) may hold "
            f"more open files than 1/{share} of this host's fs.file-max ({budget} of {file_max()}), which "
            f"one sandbox may take. Set nofile's hard limit to at most {fits}, a lower pidsLimit, or a "
            "smaller docker.fileTableShare (a larger share of the host's table for each sandbox)."
        )
    return soft, hard


def ulimits(d: DockerSettings) -> dict[str, tuple[int, int]]:
    """docker.ulimits with nofile as nofile() gives it (for a container's --ulimit)."""
    return {**d.ulimits, "nofile": nofile(d)}
