"""runner/gateway/node_keys.py: the session keys each node was given, kept across restarts, bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.config.loader import ConfigError, load_config
from runner.gateway import node_keys
from runner.gateway.node_keys import NodeKeys


def test_keys_given_to_a_node_are_its_own_and_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    keys = NodeKeys(state)
    keys.give("alpha", "agent:ops:s1")
    assert keys.given("alpha", "agent:ops:s1")
    assert not keys.given("beta", "agent:ops:s1") and not keys.given("alpha", "agent:ops:s2")
    path = state / node_keys.FILE_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = NodeKeys(state)
    assert again.given("alpha", "agent:ops:s1") and not again.given("beta", "agent:ops:s1")


def test_a_node_keeps_at_most_the_newest_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_keys, "MAX_KEYS_PER_OWNER", 3)
    keys = NodeKeys(tmp_path)
    for k in ("a", "b", "c"):
        keys.give("n", k)
    keys.give("n", "a")  # used again: the newest
    keys.give("n", "d")
    assert [k for k in "abcd" if keys.given("n", k)] == ["a", "c", "d"]


def test_each_agent_has_its_own_share_of_a_nodes_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent giving keys past its share forgets only its own oldest; another agent's keys and the
    operator's (keys that name no agent) stay. Its newest keys are all kept: its own work is not cut."""
    monkeypatch.setattr(node_keys, "MAX_KEYS_PER_OWNER", 4)
    keys = NodeKeys(tmp_path)
    keys.give("n", "agent:ops:v")
    keys.give("n", "node-abc")  # the operator's
    for i in range(10):
        keys.give("n", f"agent:main:k{i}")
    assert keys.given("n", "agent:ops:v") and keys.given("n", "node-abc")
    assert [i for i in range(10) if keys.given("n", f"agent:main:k{i}")] == [6, 7, 8, 9]
    assert keys.held("n", "main") == 4 and keys.held("n", "ops") == 1 and keys.held("n", "") == 1
    again = NodeKeys(tmp_path)  # the shares hold across a restart (owners are read from the keys)
    assert again.given("n", "agent:ops:v") and again.held("n", "main") == 4


def test_past_the_nodes_cap_the_owner_holding_the_most_gives_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_keys, "MAX_KEYS_PER_OWNER", 4)
    monkeypatch.setattr(node_keys, "MAX_KEYS_PER_NODE", 6)
    keys = NodeKeys(tmp_path)
    for i in range(2):
        keys.give("n", f"agent:ops:v{i}")
    for i in range(4):
        keys.give("n", f"agent:main:k{i}")
    keys.give("n", "agent:b:x")  # the node is full: main, holding the most, forgets its oldest
    assert keys.held("n", "main") == 3 and keys.held("n", "ops") == 2 and keys.given("n", "agent:b:x")
    keys.give("n", "agent:ops:v2")  # ops now ties main (3 each): the giver forgets its own oldest
    assert keys.held("n", "ops") == 2 and not keys.given("n", "agent:ops:v0") and keys.held("n", "main") == 3
    keys.give("n", "agent:c:y")  # full again: main holds the most
    assert keys.held("n", "main") == 2 and keys.held("n", "ops") == 2 and keys.given("n", "agent:ops:v2")


def test_an_unreadable_file_is_kept_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / node_keys.FILE_NAME).write_text("{not json")
    keys = NodeKeys(tmp_path)
    assert not keys.given("n", "k") and "unreadable" in caplog.text


def test_agents_nodes_must_name_configured_nodes(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[[agents.list]]\nid = "ops"\nnodes = ["build"]\n[nodes.other]\nhost = "h"\n')
    with pytest.raises(ConfigError, match="unknown node 'build'"):
        load_config(path)
    path.write_text(
        '[[agents.list]]\nid = "ops"\nnodes = ["other"]\n[nodes.other]\nhost = "h"\n[nodes.x]\nhost = "y"\n'
    )
    config = load_config(path)
    assert config.may_use_node("ops", "other") and not config.may_use_node("ops", "x")
    assert config.may_use_node("main", "x")  # no list: every node


def test_a_node_id_stays_with_the_node_that_presented_it_first(tmp_path: Path) -> None:
    keys = NodeKeys(tmp_path)
    keys.pin("beta", "id-b")
    keys.pin("alpha", "id-a")
    again = NodeKeys(tmp_path)
    assert again.holder("id-b") == "beta" and again.holder("id-a") == "alpha"
    again.forget_ids({"alpha"})  # beta removed from the config: its id is free again
    assert again.holder("id-b") is None and NodeKeys(tmp_path).holder("id-b") is None
