"""`exechost sandbox prune --workspaces`: the workspaces of sandboxes that no longer exist removed, their
filesystems and images with them (engine.sandbox.wsfs), so what an agent's workspaces take together
(engine.sandbox.wsbudget) has room for new ones again.

A workspace outlives its sandbox on purpose (the scope's next sandbox gets its files), so none goes by
itself: this is the operator's call. Kept: every workspace whose scope any sandbox or browser sandbox on
record or running has (a registry row, a Docker label, a bwrap runtime record), pool spares (the pool's
own), anything in the root not named as exechost names a scope's workspace, and one changed in the last
GRACE_MS (a sandbox may be starting on it, its record not yet written).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from typing import Any

from engine import statefs
from engine.sandbox import docker_ops, wsfs
from engine.sandbox.browser import BrowserManager, list_browsers
from engine.sandbox.manager import SandboxManager
from engine.sandbox.settings import resolve_settings, workspace_name

GRACE_MS = 10 * 60 * 1000
# What layout() names a scope's workspace: a slug (readable part, `-`, 32 hex digits) or the shared one's
_SCOPE_DIR = re.compile(r"(?:.+-[0-9a-f]{32}|shared)\Z")


@dataclass
class Pruned:
    """One workspace removed: its path, its image's size (what its agent's budget counted) and the bytes it
    took of the disk (both 0: a plain dir)."""

    path: str
    size: int
    disk: int


def in_use(config: Any, manager: SandboxManager) -> set[str]:
    """The workspace names of every scope a sandbox or browser sandbox exists for (blocking). Raises
    docker_ops.SandboxUnavailable when Docker sandboxes are on record but no engine answers: what exists
    cannot be told, so nothing is removed."""
    keys = {str(row.get("sessionKey") or "") for row in manager.list_runtimes(config)}
    browsers = BrowserManager()
    keys |= {entry.sessionKey for entry in browsers.registry.read()}
    with contextlib.suppress(docker_ops.SandboxUnavailable):  # (none on record and no engine: none)
        keys |= {str((c.get("Labels") or {}).get("openclaw.sessionKey") or "") for c in list_browsers()}
    return {workspace_name(key) for key in keys if key}


def roots(config: Any) -> list[str]:
    """Every workspace root the config names: the default's and each agent's own."""
    agents = ["main", *sorted(getattr(config, "agents", None) or {})]
    return sorted({resolve_settings(config, agent).workspace_root for agent in agents})


def prune(config: Any, manager: SandboxManager, now_ms: int | None = None) -> list[Pruned]:
    """Remove the workspaces of sandboxes that no longer exist, under every root (blocking)."""
    keep = in_use(config, manager)
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    removed: list[Pruned] = []
    for root in roots(config):
        removed += _prune_root(root, keep, stamp)
    return removed


def _prune_root(root: str, keep: set[str], stamp: int) -> list[Pruned]:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    images = os.path.join(root, wsfs.IMAGES)
    with contextlib.suppress(FileNotFoundError):  # an image whose workspace dir is gone takes disk too
        names += [n[: -len(".img")] for n in os.listdir(images) if n.endswith(".img")]
    removed: list[Pruned] = []
    for name in sorted(set(names)):
        if name in keep or not _SCOPE_DIR.match(name):
            continue
        path = os.path.join(root, name)
        image = wsfs.image_path(root, path)
        dir_st, image_st = _lstat(path), _lstat(image)
        if dir_st is not None and not stat.S_ISDIR(dir_st.st_mode):
            continue  # (not a workspace: never followed, never removed)
        if image_st is not None and not stat.S_ISREG(image_st.st_mode):
            continue
        # (mtime: the mounted filesystem's root for a capped one, as the sandbox sees it)
        changed = max((st.st_mtime_ns // 1_000_000 for st in (_stat_dir(path), image_st) if st), default=0)
        if stamp - changed < GRACE_MS:
            continue
        size, disk = (image_st.st_size, image_st.st_blocks * 512) if image_st is not None else (0, 0)
        wsfs.remove(root, path)  # its mount detached, its image and owner record gone
        if dir_st is not None:
            shutil.rmtree(path)  # (fd-based: a link inside is removed, never followed)
        with contextlib.suppress(FileNotFoundError):  # whose scope the name was made for
            os.unlink(statefs.state_dir() / "sandbox-owners" / name)
        removed.append(Pruned(path, size, disk))
    return removed


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _stat_dir(path: str) -> os.stat_result | None:
    """The dir as mounted (its filesystem's root when it is one); None when it is not a plain dir."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)
