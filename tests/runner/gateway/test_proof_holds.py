"""liveprincipal.proof_holds: a proof an ask recorded, decided from the config and the token files as the
handshake decides it (a proof made by a token names that token's id)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from engine import statefs
from engine.config.loader import load_config
from engine.config.model import Config
from engine.protocol.frames import (
    OPERATOR_TOKEN_NAME,
    PROTOCOL_VERSION,
    TOKEN_NAME,
    ensure_token,
    token_path,
)
from runner.gateway.liveprincipal import proof_holds
from runner.gateway.tokenfiles import GatewayTokens


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


def _tokens(tmp_path: Path) -> GatewayTokens:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    ensure_token(state)
    ensure_token(state, OPERATOR_TOKEN_NAME)
    return GatewayTokens(state)


def _replace(tmp_path: Path, name: str) -> None:
    """A new token file (a new inode, as the operator replaces a leaked one)."""
    body = json.dumps({"version": PROTOCOL_VERSION, "token": secrets.token_urlsafe(24)}) + "\n"
    statefs.atomic_write(token_path(tmp_path / "state", name), body)


def test_the_anonymous_rule_holds_until_anonymous_is_none_or_its_token_is_replaced(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path)
    key = f"anonymous>main@{tokens.gateway.id()}"
    config = _config(tmp_path, "")
    assert proof_holds(key, config, tokens)
    assert not proof_holds(key, config)  # no token files to decide by: a token's proof holds nothing
    assert not proof_holds(f"anonymous>ops@{tokens.gateway.id()}", config, tokens)
    assert not proof_holds(key, _config(tmp_path, '[gateway]\nanonymous = "none"\n'), tokens)
    assert not proof_holds("ops", config, tokens)  # a credential's key is no proof of this kind
    # journaled before proofs named their token: it names none, so it holds nothing
    assert not proof_holds("anonymous>main", config, tokens)
    assert not proof_holds("anonymous>main@", config, tokens)
    _replace(tmp_path, TOKEN_NAME)
    assert not proof_holds(key, config, tokens)  # the leaked token's proof ended with its file
    assert proof_holds(f"anonymous>main@{tokens.gateway.id()}", config, tokens)


def test_the_operators_proof_holds_until_its_token_is_replaced(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path)
    key = f"operator@{tokens.operator.id()}"
    config = _config(tmp_path, "")
    assert proof_holds(key, config, tokens)
    assert not proof_holds("operator@", config, tokens)
    assert not proof_holds(f"operator@{tokens.gateway.id()}", config, tokens)  # the gateway token's id
    _replace(tmp_path, TOKEN_NAME)
    assert proof_holds(key, config, tokens)  # the other file's change is not this proof's
    _replace(tmp_path, OPERATOR_TOKEN_NAME)
    assert not proof_holds(key, config, tokens)


def test_a_credentials_listing_holds_while_the_config_lists_its_agent(tmp_path: Path) -> None:
    """A credential makes its agent only while `[[agents.list]]` names it (main needs no entry): removing
    the entry — the last one too, leaving no list — ends it (Config.admits)."""
    listed = _config(tmp_path, '[[agents.list]]\nid = "ops"\n[[agents.list]]\nid = "dev"\n')
    assert proof_holds("listed>ops", listed) and proof_holds("listed>main", listed)
    assert not proof_holds("listed>victim", listed)
    assert not proof_holds("listed>ops", _config(tmp_path, '[[agents.list]]\nid = "dev"\n'))
    assert not proof_holds("listed>ops", _config(tmp_path, ""))  # no list at all: only main
    assert proof_holds("listed>main", _config(tmp_path, ""))
