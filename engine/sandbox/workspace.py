"""Sandbox workspace dirs on the host, created and checked without ever following a link.

A workspace is bind-mounted into a container, and Docker resolves the source path when it creates the
mount: if anything (another sandbox, another local user) turned `<root>/<slug>` into a link, the container
would get whatever the link names. So every component below the trusted root is created with `mkdirat` and
opened with O_NOFOLLOW, and the whole path is checked again just before each container create. Below the
workspace everything is the sandbox's to write: the host writes there only through `beneath`.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass, field

from engine import pathtrust
from engine.errors import ExecHostError
from engine.sandbox import beneath, sandboxuid


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
    if st.st_uid not in (os.geteuid(), 0) and not sandboxuid.is_sandbox_uid(st.st_uid):
        raise WorkspaceError(f"sandbox workspace {shown} is owned by uid {st.st_uid}, not by this user")


def open_workspace(root: str, path: str, mode: int = 0o700) -> int:
    """An fd on `path`, created under `root` one component at a time, refusing any component that is a
    link or not ours.

    `root` (the state dir or the operator's workspaceRoot) is created if missing, and used only when it
    is no other account's to change: it and every directory above it root's or this account's and
    writable by no other account unless sticky (engine.pathtrust.foreign_hold, as a hostWritable root's
    ancestors: fresh round 16 a; each workspace in it is checked to be ours). Another
    account that made it first could rename the workspaces in it between their check and Docker's
    mount. Judged by name, then the fd opened on the real path is checked to be that directory: what
    passed cannot be exchanged by another account afterwards. Raises WorkspaceError, naming the
    component, when something is not a real directory of ours."""
    root = os.path.abspath(root)
    path = os.path.abspath(path)
    os.makedirs(root, mode=0o700, exist_ok=True)
    real = os.path.realpath(root)
    why = pathtrust.foreign_hold_at(real, os.geteuid(), holder=True)
    if why is not None:
        raise WorkspaceError(
            f"sandbox workspace root {root} is refused: {why}; another account could rename the "
            f"workspaces in it. Make it this gateway's (chown {os.geteuid()} {real}, in a directory only "
            "root or this account may change) or set sandbox.workspaceRoot to another directory."
        )
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid not in (os.geteuid(), 0):
            raise WorkspaceError(f"sandbox workspace root {root} changed owner while it was opened")
        shown = root
        for name in _below(root, path):
            shown = os.path.join(shown, name)
            try:
                child = beneath.open_dir(fd, name, create=mode)
            except beneath.Refused as exc:
                kind = "a link" if "symlink" in exc.why else "not a directory"
                raise WorkspaceError(
                    f"sandbox workspace {shown} is {kind} ({exc.why}); refusing to mount it. "
                    "Remove it and retry."
                ) from None
            os.close(fd)
            fd = child
            _check(fd, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_dir(root: str, path: str, mode: int = 0o700) -> None:
    """Create `path` under `root` without following a link (see open_workspace)."""
    os.close(open_workspace(root, path, mode))


def chown_dir(path: str, uid: int, gid: int) -> None:
    """chown through an fd opened with O_NOFOLLOW: a link swapped in after the check is refused, never
    followed (the dir's parents are ours: the workspace root or the state dir)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def workspace_user(path: str) -> str | None:
    """OpenClaw's default user: the workspace dir's owner, so files written inside stay the operator's."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return f"{st.st_uid}:{st.st_gid}"


def give_dirs(user: str | None, paths: list[str]) -> None:
    """Hand dirs to a non-root numeric container user ("uid[:gid]"), so it can use them; nothing else can
    reach them (their parents are ours). Root and named users keep them as they are."""
    if not user or user.startswith("0:") or user == "0":
        return
    uid, _, gid = user.partition(":")
    if not uid.isdigit():
        return
    for path in paths:
        with contextlib.suppress(OSError):
            chown_dir(path, int(uid), int(gid) if gid.isdigit() else -1)


SKILLS_DIR = "skills"
SKILLS_MAX_BYTES = 16 * 1024 * 1024  # all mirrored skill files together
INBOUND_DIR = "media/inbound"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Synced:
    """What a skills sync did: files copied (relative to skills/) and the writes it refused, each a line
    naming the path for the agent's warnings."""

    copied: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def has_skills(agent_workspace: str) -> bool:
    """Whether there may be skills to mirror: one stat, so a workspace without them costs no thread hop."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(agent_workspace, SKILLS_DIR)).st_mode)
    except OSError:
        return False


def sync_skills(root: str, agent_workspace: str, sandbox_workspace: str) -> Synced:
    """Seed 004 §6.2: mirror the agent workspace's `skills/` readable files into the sandbox workspace
    (structure kept, links never followed on either side, at most SKILLS_MAX_BYTES), so a sandbox without
    the agent workspace mounted still has its skills. The sandbox workspace is the sandbox's to write: a
    link or file it left where a directory or copy goes refuses that one write (listed in `refused`), and
    the rest is synced."""
    done = Synced()
    try:
        src_root = os.open(agent_workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return done
    try:
        try:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            src = os.open(SKILLS_DIR, flags, dir_fd=src_root)
        except OSError:
            return done  # no skills, or a link: nothing to mirror
    finally:
        os.close(src_root)
    try:
        ws = open_workspace(root, sandbox_workspace)
        try:
            _sync_tree(src, ws, done)
        finally:
            os.close(ws)
    finally:
        os.close(src)
    return done


def _sync_tree(src: int, ws: int, done: Synced) -> None:
    budget = SKILLS_MAX_BYTES
    # fwalk opens each source subdir by fd and checks it is the dir it listed: a link is never entered.
    for rel_dir, dirnames, filenames, src_dir in os.fwalk(".", dir_fd=src, follow_symlinks=False):
        dirnames.sort()
        rel_dir = os.path.normpath(rel_dir)
        dest_rel = SKILLS_DIR if rel_dir == "." else f"{SKILLS_DIR}/{rel_dir}"
        try:
            dest = beneath.open_dir(ws, dest_rel, create=0o755)
        except beneath.Refused as exc:
            done.refused.append(_refusal(exc))
            dirnames.clear()  # nothing below a refused dir
            continue
        try:
            for name in sorted(filenames):
                budget = _sync_file(src_dir, dest, name, rel_dir, dest_rel, budget, done)
        finally:
            os.close(dest)


def _sync_file(
    src_dir: int, dest: int, name: str, rel_dir: str, dest_rel: str, budget: int, done: Synced
) -> int:
    """Copy one skill file unless unchanged; returns the budget left."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    except OSError:
        return budget  # a link, unreadable, or gone: skipped
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > budget:
            return budget
        budget -= st.st_size
        have = beneath.lstat(dest, name)
        if (
            have is not None
            and stat.S_ISREG(have.st_mode)
            and (have.st_size, have.st_mtime_ns)
            == (
                st.st_size,
                st.st_mtime_ns,
            )
        ):
            return budget  # refreshed on every use: unchanged files are not copied again
        data = fh.read(st.st_size + 1)
    try:
        beneath.write_file(dest, name, data, replace=True, times_ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError as exc:  # a directory the sandbox made where the copy goes, a full disk, …
        done.refused.append(_refusal(beneath.Refused(f"{dest_rel}/{name}", exc.strerror or str(exc))))
        return budget
    done.copied.append(os.path.normpath(os.path.join(rel_dir, name)))
    return budget


def _refusal(exc: beneath.Refused) -> str:
    return f"skills sync: refused {exc.rel}: {exc.why}; other files synced"


def stage_inbound(root: str, sandbox_workspace: str, name: str, data: bytes) -> str:
    """Seed 004 §6.3: put an inbound file at `<sandbox workspace>/media/inbound/<safe name>` (no traversal,
    never overwriting: `name-1.ext`, `name-2.ext`, …); the path inside the workspace."""
    base = _SAFE_NAME.sub("_", os.path.basename(name.replace("\\", "/"))).lstrip(".") or "file"
    stem, ext = os.path.splitext(base)
    ws = open_workspace(root, sandbox_workspace)
    try:
        try:
            inbound = beneath.open_dir(ws, INBOUND_DIR, create=0o755)
        except beneath.Refused as exc:
            raise WorkspaceError(
                f"stage: refused {exc.rel}: {exc.why}; nothing staged. "
                f"Remove it from the sandbox workspace {sandbox_workspace} and retry."
            ) from None
    finally:
        os.close(ws)
    try:
        for n in range(1000):
            candidate = base if n == 0 else f"{stem}-{n}{ext}"
            try:
                beneath.write_file(inbound, candidate, data)
            except FileExistsError:
                continue
            return f"{INBOUND_DIR}/{candidate}"
    finally:
        os.close(inbound)
    raise WorkspaceError(f"too many files named like {base} in {INBOUND_DIR}")
