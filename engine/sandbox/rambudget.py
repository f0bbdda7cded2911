"""The one RAM budget both sandbox backends draw from: what a tmpfs mount and a sandbox may pin, and the
shares of the host's RAM (and of its TCP socket memory) an agent's sandboxes and an install's may take
together."""

from __future__ import annotations

import os

TMPFS_BYTES = 256 * 1024 * 1024  # each of /tmp, /var/tmp, /run: a full /tmp stops there, not at the host disk
# /dev/shm (POSIX shared memory): Docker's size. bwrap's own /dev is a tmpfs of half the RAM, so it is made
# read-only once populated, and only this capped tmpfs in it takes writes.
SHM_BYTES = 64 * 1024 * 1024
# What all sandboxes of an install, and one agent's (or the shared scope's), may pin: bwrap checks its
# tmpfs reservations against these before a start; Docker's owner and install memory cgroups are capped
# at them (engine/sandbox/dockercg.py), and one container by default at the agent's share.
INSTALL_MEMORY_SHARE = 2
AGENT_MEMORY_SHARE = 4
# TCP socket buffers: net.ipv4.tcp_mem is one count for the whole machine (no network namespace divides it),
# and past its maximum no socket on the host may grow its buffers. A v1 memory group charges them only where
# memory.kmem.tcp.limit_in_bytes was written (cgroup v2 charges them to memory.max already), so every group an
# agent's processes run in has it: an install's sockets together at most a quarter of tcp_mem's maximum
# (below its pressure threshold, two thirds), one agent's (or the shared scope's) a sixteenth, one sandbox
# its memory cap if lower (fresh round 18 a: a 128 MB sandbox held 292 MB in loopback pairs it never read).
INSTALL_TCP_SHARE = 4
AGENT_TCP_SHARE = 16
TCP_LIMIT = "memory.kmem.tcp.limit_in_bytes"


def mem_total() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 1024**3  # unknown: assume a small machine


def tcp_max() -> int:
    """net.ipv4.tcp_mem's maximum in bytes (pages of the host's size); a 4 GiB machine's when unknown."""
    try:
        with open("/proc/sys/net/ipv4/tcp_mem") as fh:
            return int(fh.read().split()[2]) * _page_size()
    except (OSError, ValueError, IndexError):
        return 4 * 1024**3 * 3 // 32  # the kernel's default: 3/32 of the RAM


def _page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def parse_bytes(value: str | int | None) -> int | None:
    """A size as config spells it (123, "64m", "1.5g")."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = value.strip().lower()
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    scale = units.get(text[-1:], 1)
    return int(float(text.rstrip("bkmg")) * scale)


def tmpfs_size(entry: str) -> tuple[str, int]:
    """A docker.tmpfs entry ("/tmp" or "/tmp:size=64m,mode=1777") as (path, size): its size option, else
    TMPFS_BYTES (the kernel's default, half the RAM per mount, is no bound at all for a sandbox)."""
    path, _, options = entry.partition(":")
    for option in options.split(","):
        key, _, value = option.partition("=")
        if key.strip() == "size" and value.strip():
            try:
                return path, parse_bytes(value) or TMPFS_BYTES
            except ValueError:
                break
    return path, TMPFS_BYTES


def docker_tmpfs(entries: tuple[str, ...]) -> dict[str, str]:
    """docker-py's `tmpfs` for docker.tmpfs: each mount with its options as written, and TMPFS_BYTES where
    they name no size."""
    mounts: dict[str, str] = {}
    for entry in entries:
        path, _, options = entry.partition(":")
        kept = [o for o in options.split(",") if o.strip()]
        if not any(o.partition("=")[0].strip() == "size" for o in kept):
            kept.append(f"size={TMPFS_BYTES}")
        mounts[path] = ",".join(kept)
    return mounts


def container_memory(configured: str | None) -> int | str:
    """A container's memory limit: docker.memory when set, else the agent's share of the host's RAM (one
    container may take what all of its agent's may; the owner's cgroup caps them together)."""
    return configured or mem_total() // AGENT_MEMORY_SHARE
