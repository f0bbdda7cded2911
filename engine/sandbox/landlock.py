"""Landlock as a layer inside a bwrap sandbox: a static helper (landlock.c) that restricts the sandbox to
its own ruleset after bwrap has mounted everything (a landlock domain forbids mount), then runs its command.

The mount view already bounds what a sandbox can reach; the ruleset says, independently of it, which of
those paths may be written (the workspace, the sandbox's tmpfs, its control dir), executed (the system dirs,
the workspace) and which TCP ports used, so a writable mount that slipped into the view (a bind, a bwrap bug)
is still refused. Built like the egress forwarder: static, from the source beside this module, once per
source digest, into the read-only bin mount.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from engine import sysbin
from engine.errors import ExecHostError
from engine.sandbox import staticbuild
from engine.sandbox import supervisor as sv

SOURCE = Path(__file__).with_name("landlock.c")
NAME = "exechost-landlock"
SYS_CREATE_RULESET = 444  # landlock_create_ruleset: one number on every architecture (the generic table)
CREATE_RULESET_VERSION = 1
NET_ABI = 4  # TCP bind/connect rules
# What each letter of a rule grants (landlock.c): read, execute, write (make, remove, rename, truncate),
# a device's write and ioctl, write of an existing file.
READ, EXEC, WRITE, DEVICE, WRITE_EXISTING = "r", "x", "w", "d", "f"


class LandlockUnavailable(ExecHostError):
    """The helper cannot be built here (no C compiler, or the build failed)."""

    code = "tool_error"


@dataclass(frozen=True)
class Ruleset:
    """What a sandbox may do under landlock: (rights, path inside) rules, and when `tcp`, the only TCP ports
    it may bind and connect to (the kernel's ABI >= 4; below that TCP is left to the network namespace)."""

    rules: tuple[tuple[str, str], ...]
    tcp: bool = False
    bind: tuple[int, ...] = ()
    connect: tuple[int, ...] = ()

    def argv(self) -> list[str]:
        args = [f"{sv.BIN_MOUNT}/{NAME}"]
        if self.tcp:
            args += ["-n", *(f"bind={p}" for p in self.bind), *(f"connect={p}" for p in self.connect)]
        return args + [f"{rights}:{path}" for rights, path in self.rules]

    def wrap(self, command: list[str]) -> list[str]:
        return [*self.argv(), "--", *command]

    def explained(self) -> dict[str, object]:
        return {
            "rules": {path: rights for rights, path in self.rules},
            "tcp": {"bind": list(self.bind), "connect": list(self.connect)} if self.tcp else "not restricted",
        }


@dataclass(frozen=True)
class Status:
    """Whether a sandbox started now gets the layer: the kernel's ABI (0: none) and, when not, why."""

    abi: int
    active: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"abi": self.abi, "active": self.active, "reason": self.reason}


@functools.cache
def kernel_abi() -> tuple[int, str | None]:
    """The kernel's landlock ABI version, or 0 and why there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    if abi >= 1:
        return int(abi), None
    err = ctypes.get_errno()
    if err == errno.EOPNOTSUPP:
        return 0, "landlock is built into this kernel but not enabled (lsm= boot parameter)"
    if err == errno.ENOSYS:
        return 0, "this kernel has no landlock (Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK)"
    return 0, f"landlock_create_ruleset: {os.strerror(err)}"


def status(enabled: bool, *, build: bool) -> Status:
    """The layer's state for a sandbox about to start (`build`: make the helper now if it is missing or
    stale) or for an operator's eyes (never builds: a binary still to make is fine when a compiler is)."""
    abi, why = kernel_abi()
    if not enabled:
        return Status(abi, False, "off in config ([agents.defaults.sandbox.bwrap] landlock = false)")
    if abi < 1:
        return Status(abi, False, why)
    if build:
        try:
            ensure_binary()
        except LandlockUnavailable as exc:
            return Status(abi, False, str(exc))
    elif not _current() and _compiler() is None:
        return Status(abi, False, NO_COMPILER)
    return Status(abi, True)


@functools.cache
def source_digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def binary_path() -> Path:
    return sv.bin_dir() / NAME


def _stamp() -> Path:
    return sv.bin_dir() / f"{NAME}.sha"


def _current() -> bool:
    return staticbuild.current(binary_path(), _stamp(), source_digest())


def _compiler() -> str | None:
    return sysbin.which("cc") or sysbin.which("gcc")


NO_COMPILER = (
    "the landlock helper needs a C compiler once, to be built (apt-get install gcc libc6-dev); until then "
    "sandboxes start without the landlock layer"
)


def ensure_binary() -> Path:
    """The helper in the bin dir, built from landlock.c when missing or from other source (blocking)."""
    target = binary_path()
    if _current():
        return target
    sv.ensure_bin_dir()
    compiler = _compiler()
    if compiler is None:
        raise LandlockUnavailable(NO_COMPILER)
    problem = staticbuild.build(compiler, SOURCE, target, _stamp(), source_digest())
    if problem is not None:
        raise LandlockUnavailable(f"could not build the landlock helper: {problem}")
    return target
