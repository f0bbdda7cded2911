"""Sandbox workspace dirs on the host, created and checked without ever following a link.

A workspace is bind-mounted into a container, and Docker resolves the source path when it creates the
mount: if anything (another sandbox, another local user) turned `<root>/<slug>` into a link, the container
would get whatever the link names. So every component below the trusted root is created with `mkdirat` and
opened with O_NOFOLLOW, and the whole path is checked again just before each container create.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from engine.errors import ExecHostError


class WorkspaceError(ExecHostError):
    """A workspace path is, or passes through, something other than a real directory of ours."""

    code = "tool_error"


def _below(root: str, path: str) -> list[str]:
    """The components of `path` below `root` (both absolute, normalised); [] when path is root."""
    rel = os.path.relpath(path, root)
    if rel == ".":
        return []
    if rel.startswith(".."):
        raise WorkspaceError(f"sandbox workspace {path} is outside its root {root}")
    return rel.split(os.sep)


def _check(fd: int, shown: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise WorkspaceError(f"sandbox workspace {shown} is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise WorkspaceError(f"sandbox workspace {shown} is owned by uid {st.st_uid}, not by this user")


def ensure_dir(root: str, path: str, mode: int = 0o700) -> None:
    """Create `path` under `root` one component at a time, refusing any component that is a link.

    `root` is trusted as configured (the state dir or the operator's workspaceRoot); it is created if
    missing. Raises WorkspaceError, naming the component, when something is not a real directory."""
    root = os.path.abspath(root)
    path = os.path.abspath(path)
    os.makedirs(root, mode=0o700, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        shown = root
        for name in _below(root, path):
            shown = os.path.join(shown, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                kind = "a link" if os.path.islink(shown) else "not a directory"
                raise WorkspaceError(
                    f"sandbox workspace {shown} is {kind} ({exc.strerror}); refusing to mount it. "
                    "Remove it and retry."
                ) from None
            os.close(fd)
            fd = child
            _check(fd, shown)
    finally:
        os.close(fd)


def chown_dir(path: str, uid: int, gid: int) -> None:
    """chown without following a link (the dir was checked, but a swap after the check must not redirect)."""
    os.chown(path, uid, gid, follow_symlinks=False)


SKILLS_DIR = "skills"
SKILLS_MAX_BYTES = 16 * 1024 * 1024  # all mirrored skill files together
INBOUND_DIR = os.path.join("media", "inbound")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def sync_skills(root: str, agent_workspace: str, sandbox_workspace: str) -> list[str]:
    """Seed 004 §6.2: mirror the agent workspace's `skills/` readable files into the sandbox workspace
    (structure kept, links never followed, at most SKILLS_MAX_BYTES), so a sandbox without the agent
    workspace mounted still has its skills. Returns the relative paths copied; stale copies are removed."""
    source = os.path.join(agent_workspace, SKILLS_DIR)
    target = os.path.join(sandbox_workspace, SKILLS_DIR)
    if not os.path.isdir(source) or os.path.islink(source):
        return []
    copied: list[str] = []
    budget = SKILLS_MAX_BYTES
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        rel_dir = os.path.relpath(dirpath, source)
        dest_dir = os.path.normpath(os.path.join(target, rel_dir))
        ensure_dir(root, dest_dir, mode=0o755)
        for name in sorted(filenames):
            src = os.path.join(dirpath, name)
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link, unreadable, or gone: skipped
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
                    continue
                budget -= st.st_size
                dest = os.path.join(dest_dir, name)
                if _same(dest, st):
                    continue  # refreshed on every use: unchanged files are not copied again
                data = fh.read(st.st_size + 1)
            _write_new(dest, data, replace=True)
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
            copied.append(os.path.normpath(os.path.join(rel_dir, name)))
    return copied


def _same(dest: str, st: os.stat_result) -> bool:
    try:
        have = os.lstat(dest)
    except OSError:
        return False
    return stat.S_ISREG(have.st_mode) and (have.st_size, have.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def stage_inbound(root: str, sandbox_workspace: str, name: str, data: bytes) -> str:
    """Seed 004 §6.3: put an inbound file at `<sandbox workspace>/media/inbound/<safe name>` (no traversal,
    never overwriting: `name-1.ext`, `name-2.ext`, …); the path inside the workspace."""
    inbound = os.path.join(sandbox_workspace, INBOUND_DIR)
    ensure_dir(root, inbound, mode=0o755)
    base = _SAFE_NAME.sub("_", os.path.basename(name.replace("\\", "/"))).lstrip(".") or "file"
    stem, ext = os.path.splitext(base)
    for n in range(1000):
        candidate = base if n == 0 else f"{stem}-{n}{ext}"
        try:
            _write_new(os.path.join(inbound, candidate), data, replace=False)
        except FileExistsError:
            continue
        return os.path.join(INBOUND_DIR, candidate)
    raise WorkspaceError(f"too many files named like {base} in {inbound}")


def _write_new(path: str, data: bytes, *, replace: bool) -> None:
    """Write without following a link at `path`; `replace` swaps an existing regular file atomically."""
    if replace:
        tmp = f"{path}.exechost-tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # rename replaces a link itself, never writes through it
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
