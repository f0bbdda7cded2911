"""liveprincipal.proof_holds: a proof an ask recorded, decided from the config as the handshake decides it."""

from __future__ import annotations

from pathlib import Path

from engine.config.loader import load_config
from engine.config.model import Config
from runner.gateway.liveprincipal import proof_holds


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "exechost.toml"
    path.write_text(text)
    return load_config(path)


def test_a_uid_mapping_holds_while_the_config_maps_that_account_to_that_agent(tmp_path: Path) -> None:
    mapped = _config(tmp_path, '[[agents.list]]\nid = "ops"\nuid = 47123\n')
    assert proof_holds("uid:47123>ops", mapped)
    assert not proof_holds("uid:47123>main", mapped)
    assert not proof_holds("uid:47124>ops", mapped)
    assert not proof_holds("uid:x>ops", mapped)
    assert not proof_holds("uid:47123>ops", _config(tmp_path, '[[agents.list]]\nid = "ops"\n'))


def test_the_anonymous_rule_holds_until_anonymous_is_none(tmp_path: Path) -> None:
    assert proof_holds("anonymous>main", _config(tmp_path, ""))
    assert not proof_holds("anonymous>ops", _config(tmp_path, ""))
    assert not proof_holds("anonymous>main", _config(tmp_path, '[gateway]\nanonymous = "none"\n'))
    assert not proof_holds("ops", _config(tmp_path, ""))  # a credential's key is no proof of this kind
