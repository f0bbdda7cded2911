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


def test_a_credentials_listing_holds_while_the_config_lists_its_agent(tmp_path: Path) -> None:
    """A credential makes its agent only while `[[agents.list]]` names it (main needs no entry): removing
    the entry — the last one too, leaving no list — ends it (Config.admits)."""
    listed = _config(tmp_path, '[[agents.list]]\nid = "ops"\n[[agents.list]]\nid = "dev"\n')
    assert proof_holds("listed>ops", listed) and proof_holds("listed>main", listed)
    assert not proof_holds("listed>victim", listed)
    assert not proof_holds("listed>ops", _config(tmp_path, '[[agents.list]]\nid = "dev"\n'))
    assert not proof_holds("listed>ops", _config(tmp_path, ""))  # no list at all: only main
    assert proof_holds("listed>main", _config(tmp_path, ""))
