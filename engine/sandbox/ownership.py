"""A scope uses only what was made for it: the sandbox its name hashes to and the workspace it recorded."""

from __future__ import annotations

import contextlib
import logging
import os

from engine import statefs
from engine.sandbox import docker_ops, wsbudget, wsfs
from engine.sandbox.errors import SandboxError
from engine.sandbox.settings import (
    LEGACY_HASH_HEX,
    SLUG_HASH_HEX,
    Layout,
    SandboxSettings,
)
from engine.sandbox.workspace import WorkspaceError, ensure_dir

log = logging.getLogger(__name__)


def refuse_foreign(state: docker_ops.ContainerState, name: str, scope_key: str) -> None:
    """A sandbox is adopted only by the scope it records (Docker label, bwrap runtime record): a name is a
    hash of the scope key, and a name shared by two keys must never hand one the other's sandbox."""
    if not state.exists or state.pool_key is not None:  # (a pool container's claim is in the registry)
        return
    owner = (state.labels or {}).get("openclaw.sessionKey")
    if owner != scope_key:
        raise SandboxError(
            f"Sandbox {name} was made for another scope ({owner!r}, not {scope_key!r}); refusing to use it "
            "(an operator removes it with `exechost sandbox recreate --session KEY`, its own key)."
        )


def check_workspaces(settings: SandboxSettings, lay: Layout, agent_id: str) -> None:
    """Create or re-check, without following links, every workspace a container is about to mount."""
    own_workspace(settings, lay)
    try:
        # its own capped filesystem (engine.sandbox.wsfs: root only), mounted before any sandbox binds it,
        # a new one within what its agent's workspaces together may take (engine.sandbox.wsbudget)
        wsfs.ensure(
            settings.workspace_root,
            lay.sandbox_workspace,
            wsbudget.for_scope(settings, lay.scope_key, agent_id),
        )
        for path in {lay.workspace_dir, lay.agent_mount or lay.workspace_dir}:
            if path != lay.sandbox_workspace:
                ensure_dir(_trusted_root(path, settings.workspace_root), path)
    except WorkspaceError as exc:
        raise SandboxError(str(exc)) from None


def own_workspace(settings: SandboxSettings, lay: Layout) -> None:
    """A scope's workspace dir is its own: the key it was first made for is recorded in the state dir (no
    sandbox mounts it), and a key whose name is the same gets a refusal, never the dir and its files."""
    if settings.scope == "shared":
        return
    path = statefs.state_dir() / "sandbox-owners" / os.path.basename(lay.sandbox_workspace)
    try:
        recorded = statefs.read_text(path)
        if recorded is None:
            _adopt_legacy_workspace(lay.sandbox_workspace)
            statefs.atomic_write(path, lay.scope_key)
            return
    except (OSError, statefs.StateFileError, UnicodeDecodeError) as exc:
        raise SandboxError(f"Sandbox workspace owner record {path}: {exc}") from None
    if recorded != lay.scope_key:
        raise SandboxError(
            f"Sandbox workspace {lay.sandbox_workspace} was made for another scope ({recorded!r}, not "
            f"{lay.scope_key!r}); refusing to use it."
        )


def _adopt_legacy_workspace(workspace: str) -> None:
    """Nothing is lost in the move to 128-bit names: a scope's workspace made under the old name (the same
    readable part and the first 8 hex digits of the same hash, so the old name is the new one cut) is
    renamed to the new name the first time its scope is used, before any owner is recorded. Only where no
    workspace has the new name yet; a rename is atomic, so two starts cannot both take it."""
    base = os.path.basename(workspace)
    legacy = os.path.join(os.path.dirname(workspace), base[: len(base) - (SLUG_HASH_HEX - LEGACY_HASH_HEX)])
    if legacy == workspace or os.path.lexists(workspace) or os.path.islink(legacy):
        return
    if not os.path.isdir(legacy):
        return
    with contextlib.suppress(FileNotFoundError):
        os.rename(legacy, workspace)
        log.info("sandbox workspace %s renamed to %s (128-bit names)", legacy, workspace)


def _trusted_root(path: str, workspace_root: str) -> str:
    """The deepest ancestor taken as configured: the workspace root or the state dir when `path` is inside
    one, else its own parent (an agent workspace the operator placed elsewhere)."""
    for root in (workspace_root, str(statefs.state_dir())):
        root = os.path.abspath(root)
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return os.path.dirname(path)
