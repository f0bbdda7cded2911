"""Sandbox workspace dirs on the host, created and checked without ever following a link.

A workspace is bind-mounted into a container, and Docker resolves the source path when it creates the
mount: if anything (another sandbox, another local user) turned `<root>/<slug>` into a link, the container
would get whatever the link names. So every component below the trusted root is created with `mkdirat` and
opened with O_NOFOLLOW, and the whole path is checked again just before each container create.
"""

from __future__ import annotations

import contextlib
import os
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
