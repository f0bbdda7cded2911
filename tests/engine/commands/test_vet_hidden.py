"""A vet never reads through the agent's link into exechost's state dir, which no run's view shows: the
file is refused unread and nothing of it reaches the ask (round 10 d; engine.commands.regular)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.commands import treecode
from engine.commands.regular import Unreadable, read_regular


def test_a_link_into_the_state_dir_is_refused_unread(state_dir: Path, tmp_path: Path) -> None:
    secret = state_dir / "secret.toml"
    secret.write_text("token = 'SECRET'\n")
    link = tmp_path / "w" / "config"
    link.parent.mkdir()
    os.symlink(secret, link)
    with pytest.raises(Unreadable) as exc:
        read_regular(str(link), 1 << 20)
    assert "state dir" in str(exc.value) and "SECRET" not in str(exc.value)
    (tmp_path / "w" / "plain").write_text("x")
    assert read_regular(str(tmp_path / "w" / "plain"), 10) == b"x"  # control


def test_npm_package_json_linked_into_the_state_dir_binds_nothing(state_dir: Path, tmp_path: Path) -> None:
    """Variant: a tree program's manifest (not git's config) linked there is unreadable, so unbound."""
    (state_dir / "p.json").write_text(json.dumps({"name": "SECRET", "scripts": {"test": "true"}}))
    work = tmp_path / "w"
    work.mkdir()
    os.symlink(state_dir / "p.json", work / "package.json")
    found = treecode.findings_for(["npm", "test"], ["/usr/bin/npm"], str(work), [str(state_dir)])
    text = treecode.binding(found)
    assert f"tree:{work / 'package.json'}={treecode.UNREADABLE}" in text, text
    assert "SECRET" not in text


def test_npm_walks_past_the_home_as_npm_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service account's home in a directory the gateway user can write: npm's workspace root and its
    .npmrc above the home are named (the home's own ~/.npmrc is the operator's, passed over)."""
    home = tmp_path / "home"
    proj = home / "proj"
    proj.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    (proj / "package.json").write_text("{}")
    (home / ".npmrc").write_text("offline=true\n")
    (tmp_path / ".npmrc").write_text("script-shell=/x\n")
    found = treecode.findings_for(["npm", "test"], ["/usr/bin/npm"], str(proj), [])
    paths = {f.path for f in found}
    assert str(tmp_path / ".npmrc") in paths, paths
    assert str(home / ".npmrc") not in paths
