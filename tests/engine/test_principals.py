"""engine/principals.py: names, session-key namespaces and the credential files, plus `exechost agents`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine import principals
from engine.errors import InvalidInput
from tests.helpers.gateway import cli, listed, write_config


@pytest.mark.parametrize(
    "agent, key, owned, scoped",
    [
        ("ops", "", True, ""),
        ("ops", "agent:ops", True, "agent:ops"),
        ("ops", "agent:ops:chat", True, "agent:ops:chat"),
        ("ops", "agent:opsx:chat", False, "agent:ops:agent:opsx:chat"),  # a prefix is not a namespace
        ("ops", "agent:victim:main", False, "agent:ops:agent:victim:main"),
        ("ops", "main", False, "agent:ops:main"),  # still ops's main session (main_session_keys)
        ("ops", "Agent:ops:x", False, "agent:ops:Agent:ops:x"),
        ("main", "chat", False, "agent:main:chat"),  # an ownerless key is the operator's (issue 27 §1)
        ("main", "node-abc", False, "agent:main:node-abc"),
        ("main", "\x00unknown", False, "agent:main:\x00unknown"),
        ("main", "AGENT:victim:main", False, "agent:main:AGENT:victim:main"),
        ("main", "agent:main:x", True, "agent:main:x"),
    ],
)
def test_session_key_namespaces(agent: str, key: str, owned: bool, scoped: str) -> None:
    assert principals.owns_key(agent, key) is owned or key == ""
    assert principals.own_key(agent, key) == scoped
    assert principals.owns_key(agent, principals.own_key(agent, key)) or key == ""


def test_names() -> None:
    for good in ("main", "ops", "a.b-c_d", "A1", "x" * 64):
        assert principals.check_agent(good) == good
    for bad in ("", "../x", "*", "a:b", ".x", "-x", "_x", "a/b", "a b", "x" * 65, None, 3):
        with pytest.raises(InvalidInput):
            principals.check_agent(bad)
    for query in ("n1", "Build Box", "fd00::5", "10.0.0.5", "3f2a9c"):
        assert principals.check_node_query(query) == query
    for bad in ("../n1", "n1/..", "a..b", "/n1", " n1", "n\x00", ""):
        with pytest.raises(InvalidInput):
            principals.check_node_query(bad)


def test_credentials_mint_lookup_revoke(state_dir: Path) -> None:
    first = principals.mint(state_dir, "ops")
    path = state_dir / "agents" / "ops.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert principals.lookup(state_dir, first) == "ops"
    assert principals.lookup(state_dir, first + "x") is None
    assert principals.lookup(state_dir, "not-a-token") is None
    second = principals.mint(state_dir, "ops")  # re-minting replaces the token
    assert principals.lookup(state_dir, first) is None and principals.lookup(state_dir, second) == "ops"
    # A file whose name and content disagree grants nothing (renaming ops.json does not make it admin's).
    os.rename(path, state_dir / "agents" / "admin.json")
    assert principals.lookup(state_dir, second) is None and principals.listing(state_dir) == []
    os.rename(state_dir / "agents" / "admin.json", path)
    # A symlink in place of a credential file is never followed.
    os.symlink(path, state_dir / "agents" / "evil.json")
    assert [c.agent for c in principals.listing(state_dir)] == ["ops"]
    assert principals.revoke(state_dir, "ops") is True and principals.revoke(state_dir, "ops") is False
    assert principals.lookup(state_dir, second) is None


def test_agents_cli(state_dir: Path) -> None:
    write_config(state_dir, listed("ops"))
    added = cli(state_dir, "agents", "add", "ops", "--json")
    assert added.returncode == 0
    token = json.loads(added.stdout)["details"]["token"]
    assert principals.lookup(state_dir, token) == "ops"
    again = cli(state_dir, "agents", "add", "ops")
    assert again.returncode == 1 and "already has a credential" in again.stdout
    shown = json.loads(cli(state_dir, "agents", "list", "--json").stdout)
    assert [a["agent"] for a in shown["details"]["agents"]] == ["ops"]
    assert token not in cli(state_dir, "agents", "list").stdout
    assert cli(state_dir, "agents", "revoke", "ops").returncode == 0
    assert cli(state_dir, "agents", "revoke", "ops").returncode == 1
    assert "No agent credentials" in cli(state_dir, "agents", "list").stdout


def test_agents_add_refuses_an_agent_the_config_does_not_list(state_dir: Path) -> None:
    """A credential connects only for an agent `[[agents.list]]` names (main excepted): minting one for
    another would print a token that works as nobody, or starts working when an entry appears."""
    refused = cli(state_dir, "agents", "add", "ops", "--json")  # no config at all: no list
    assert refused.returncode == 1 and principals.read_token(state_dir, "ops") is None
    said = json.loads(refused.stdout)["details"]
    assert said["error"] == "unlisted" and said["config"] == str(state_dir / "config.toml")
    write_config(state_dir, listed("dev"))
    refused = cli(state_dir, "agents", "add", "ops")
    assert refused.returncode == 1 and principals.read_token(state_dir, "ops") is None
    assert "[[agents.list]]" in refused.stdout and str(state_dir / "config.toml") in refused.stdout
    assert 'id = "ops"' in refused.stdout  # the key that would list it
    assert cli(state_dir, "agents", "add", "main").returncode == 0  # main needs no entry
    assert cli(state_dir, "agents", "add", "dev").returncode == 0
    write_config(state_dir, "")  # dev's entry goes: its credential stays on disk, refused at connect
    rows = json.loads(cli(state_dir, "agents", "list", "--json").stdout)["details"]["agents"]
    assert {r["agent"]: r["listed"] for r in rows} == {"dev": False, "main": True}
    assert "dev  minted" in cli(state_dir, "agents", "list").stdout
    assert "not in [[agents.list]]" in cli(state_dir, "agents", "list").stdout
    rotated = cli(state_dir, "agents", "add", "dev", "--rotate")
    assert rotated.returncode == 1 and "not in [[agents.list]]" in rotated.stdout
