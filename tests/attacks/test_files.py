"""Issue 9 item 22: exechost's own files, losing what a human wrote or trusting what another user wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config
from engine.config.model import ConfigError

INVALID_ITEMS = [42, {"pattern": ""}, {"pattern": "/usr/bin/x", "argPattern": 5}, "   ", None, ["/bin/sh"]]


def test_invalid_allowlist_entries_survive_a_write(state_dir: Path) -> None:
    """Invalid entries were dropped on the next write: a human's half-typed entry vanished unseen."""
    path = state_dir / "exec-approvals.json"
    raw = {
        "version": 1,
        "agents": {"main": {"allowlist": [{"pattern": "/usr/bin/ls"}, *INVALID_ITEMS]}},
    }
    path.write_text(json.dumps(raw))
    path.chmod(0o600)
    store = ApprovalsStore(path)
    assert [e.pattern for e in store.entries("main")] == ["/usr/bin/ls"]  # ignored for matching
    assert any("invalid entry 42" in p for p in store.load().problems())
    store.add_allowlist("main", "/usr/bin/wc")
    store.remove_allowlist("main", "/usr/bin/ls")
    kept = json.loads(path.read_text())["agents"]["main"]["allowlist"]
    assert [e["pattern"] for e in kept if isinstance(e, dict) and e.get("pattern")][:2] == [
        "/usr/bin/wc",
        "/usr/bin/x",
    ]
    for item in INVALID_ITEMS:
        assert item in kept, item


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_config_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Anyone who can write config.toml can set security = "full"."""
    path = tmp_path / "config.toml"
    path.write_text('[tools.exec]\nsecurity = "full"\nask = "off"\nhost = "gateway"\n')
    path.chmod(mode)
    with pytest.raises(ConfigError, match="writable by group or others"):
        load_config(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_config_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[tools.exec]\nsecurity = "full"\n')
    path.chmod(0o644)
    os.chown(path, 4242, 4242)
    if os.geteuid() == 0:
        # Root trusts only its own files here: the test plays a user whose config another user owns.
        with pytest.raises(ConfigError, match="owned by uid 4242"):
            load_config(path)


def test_the_gateway_refuses_to_run_on_a_forged_config(state_dir: Path) -> None:
    from tests.helpers.gateway import cli

    path = state_dir / "config.toml"
    path.write_text('[tools.exec]\nsecurity = "full"\nask = "off"\nhost = "gateway"\n')
    path.chmod(0o666)
    proc = cli(state_dir, "exec", "--", "id")
    assert proc.returncode != 0
    assert "writable by group or others" in proc.stderr
