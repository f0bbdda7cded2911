"""Nothing is lost when sandbox names grew from a 32-bit to a 128-bit hash: a scope's workspace made under
the old name is its workspace under the new one (renamed on first use, then owned as usual)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engine.config.loader import load_config_text
from engine.sandbox.ownership import own_workspace
from engine.sandbox.settings import layout, resolve_settings


def test_a_workspace_made_under_the_old_name_is_kept(state_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    cfg = resolve_settings(
        load_config_text(
            f'[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nworkspaceRoot = "{root}"\n'
        ),
        "main",
    )
    key = "agent:main:build"
    lay = layout(cfg, "main", key)
    new = Path(lay.sandbox_workspace)
    old = new.with_name(new.name[: -(32 - 8)])
    assert old.name.endswith("-" + hashlib.sha256(lay.scope_key.encode()).hexdigest()[:8])
    old.mkdir()
    (old / "work.txt").write_text("kept")
    own_workspace(cfg, lay)
    assert (new / "work.txt").read_text() == "kept" and not old.exists()
    # Owned now: the next use changes nothing, and a new workspace is never swapped for a later old one.
    old.mkdir()
    own_workspace(cfg, lay)
    assert os.listdir(old) == [] and (new / "work.txt").exists()
