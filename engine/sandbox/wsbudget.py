"""Each agent's sandbox workspaces together, capped in bytes (`maxWorkspaceBytesPerAgent`): each workspace is
a capped filesystem of its own (engine.sandbox.wsfs), but an agent names as many scopes as it likes (scope
"session": one per session key), and their images together filled the state dir's disk (fresh round 10 b).

Whose an image is, is written beside it (<root>/.images/<name>.img.owner) before the image is made. What an
agent's workspaces take is the sum of its images' sizes: their caps, never the blocks written so far, so the
budget holds however full they get later. A new workspace gets its cap or what is left of its agent's
budget, whichever is less, and under scope "session" at most a SESSION_PARTS-th of the budget (so a budget
of a quarter of the disk is 16 sessions' workspaces, not 2 of an 8th each); with less than one small
workspace left it is refused, saying how to free space. A pool spare (made before its owner was known, at
its cap) counts at its size once claimed, and is claimed only while the budget has room for it.
Counted from the files alone, under the images lock (gateway, CLI, pool: one mounter at a time), at each new
workspace: nothing is cached, so a changed budget applies to the next one.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass

from engine.principals import is_operators
from engine.sandbox import beneath
from engine.sandbox.settings import SandboxSettings, split_namespace
from engine.sandbox.workspace import WorkspaceError

OWNER_SUFFIX = ".owner"  # beside `<name>.img`: whose it is
AGENT_SHARE = 4  # of the filesystem the images are on, when the config says nothing
# Under scope "session" one workspace takes at most this part of its agent's budget, so that many sessions
# have one (as many as its live sandboxes by default, engine.sandbox.agentcap); one per agent may take it all
SESSION_PARTS = 16
KEY = "maxWorkspaceBytesPerAgent"
_OWNER_MAX = 4096


@dataclass(frozen=True)
class Budget:
    """Whose a new workspace is, and the bytes all of theirs may take together."""

    owner: str  # the agent (on a node shared by gateways, `<namespace><agent>`: engine.sandbox.agentcap)
    most: int | None = None  # None: AGENT_SHARE of the filesystem the images are on
    parts: int = 1  # one workspace takes at most this part of the budget (SESSION_PARTS under scope session)


def for_scope(settings: SandboxSettings, scope_key: str, agent_id: str) -> Budget | None:
    """Whose a scope's workspace is: its agent, under its gateway's namespace on a shared node (as
    engine.sandbox.agentcap counts sandboxes); the shared scope's is nobody's. Taken from the settings at
    each start, never kept: a changed config applies to the next workspace."""
    if settings.scope == "shared" or is_operators(scope_key):  # (the operator's own: no agent's budget)
        return None
    parts = SESSION_PARTS if settings.scope == "session" else 1
    return Budget(split_namespace(scope_key)[0] + agent_id, settings.max_workspace_bytes, parts)


class WorkspaceBudgetError(WorkspaceError):
    """The agent's workspaces hold its whole budget: a new one is refused (its files elsewhere are kept)."""


def limit(root: str, budget: Budget, floor: int) -> int:
    """The bytes the owner's workspaces under `root` may take together."""
    if budget.most is not None:
        return budget.most
    st = os.statvfs(root)
    return max(st.f_blocks * st.f_frsize // AGENT_SHARE, floor)


def owner_of(images: int, image: str) -> str | None:
    """Who the image `image` (a name in the images dir `images`) was made for; None: nobody recorded."""
    try:
        fd = os.open(
            image + OWNER_SUFFIX, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=images
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _OWNER_MAX).decode("utf-8", "surrogateescape")
    finally:
        os.close(fd)


def record(images: int, image: str, owner: str) -> None:
    """`image` is `owner`'s (written, never through a link, before the image itself is made)."""
    beneath.write_file(
        images, image + OWNER_SUFFIX, owner.encode("utf-8", "surrogateescape"), mode=0o600, replace=True
    )


def forget(images: int, image: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(image + OWNER_SUFFIX, dir_fd=images)


def used(images: int, owner: str, besides: str = "") -> int:
    """The bytes `owner`'s images take (their sizes: what each may grow to), `besides` not counted."""
    total = 0
    for name in os.listdir(images):
        if not name.endswith(".img") or name == besides:
            continue
        st = beneath.lstat(images, name)
        if st is not None and stat.S_ISREG(st.st_mode) and owner_of(images, name) == owner:
            total += st.st_size
    return total


def size_for(root: str, images: int, image: str, budget: Budget, cap: int, floor: int) -> int:
    """The size a new image `image` of the budget's owner gets: its cap (at most its part of the budget),
    or what the budget has left when that is less. WorkspaceBudgetError when not even `floor` is left.
    Under the images lock."""
    most = limit(root, budget, floor)
    have = used(images, budget.owner, besides=image)
    cap = min(cap, max(most // budget.parts, floor))
    size = min(cap, most - have)
    if size < floor:
        raise WorkspaceBudgetError(refusal(root, budget, most, have, max(min(cap, most), floor)))
    return size


def check(root: str, images: int, image: str, budget: Budget, size: int, floor: int) -> None:
    """An image of `size` bytes made the owner's (a pool spare's, made before its owner was known) fits
    what its budget has left; WorkspaceBudgetError when not. Under the images lock."""
    most = limit(root, budget, floor)
    have = used(images, budget.owner, besides=image)
    if have + size > most:
        raise WorkspaceBudgetError(refusal(root, budget, most, have, size))


def refusal(root: str, budget: Budget, most: int, have: int, size: int) -> str:
    whence = (
        "as configured" if budget.most is not None else f"unset: 1/{AGENT_SHARE} of the filesystem of {root}"
    )
    return (
        f"agent {budget.owner}'s sandbox workspaces already take {have} bytes ({_mib(have)}) of its budget "
        f"of {most} bytes ({_mib(most)}; agents.defaults.sandbox.{KEY}, or its own in [agents.list.sandbox], "
        f"{whence}), and a new workspace needs {size} bytes ({_mib(size)}): refused. Use a session key "
        "whose workspace exists, or ask the operator to free space (`exechost sandbox prune --workspaces` "
        f"removes the workspaces of sandboxes that no longer exist) or to raise {KEY}."
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
