"""The gateway and operator tokens read live (runner.gateway.tokenfiles): the stat-identity cache follows
every change of the file it caches, and a replaced token stops at the handshake and on live connections."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from engine import principals
from engine.protocol.frames import OPERATOR_TOKEN_NAME, RemoteError, ensure_token, token_path
from runner.gateway.tokenfiles import CredentialFiles, GatewayTokens, TokenFile
from tests.helpers.gateway import connect, gateway, wait_until


def test_a_replaced_token_file_is_read_again(tmp_path: Path) -> None:
    old = ensure_token(tmp_path)
    cache = TokenFile(tmp_path, "gateway.json")
    assert cache.matches(old) and cache.changes == 0
    token_path(tmp_path).unlink()
    new = ensure_token(tmp_path)  # a new file (atomic write: a new inode)
    assert not cache.matches(old) and cache.matches(new) and cache.changes == 1


def test_an_in_place_rewrite_of_the_same_size_is_read_again(tmp_path: Path) -> None:
    old = ensure_token(tmp_path)
    cache = TokenFile(tmp_path, "gateway.json")
    assert cache.matches(old)
    path = token_path(tmp_path)
    ino = os.stat(path).st_ino
    new = old[::-1] if old[::-1] != old else "x" * len(old)
    text = path.read_text().replace(old, new)
    with open(path, "r+", encoding="utf-8") as fh:  # same inode, same size: only the times move
        fh.write(text)
    assert os.stat(path).st_ino == ino
    assert cache.matches(new) and not cache.matches(old)


def test_a_missing_or_broken_file_matches_nothing(tmp_path: Path) -> None:
    token = ensure_token(tmp_path)
    cache = TokenFile(tmp_path, "gateway.json")
    assert cache.matches(token)
    token_path(tmp_path).unlink()
    assert not cache.matches(token) and not cache.matches("")
    token_path(tmp_path).write_text(json.dumps({"token": ""}))
    assert not cache.matches("") and cache.current() == ""


def test_the_generation_moves_with_either_file(tmp_path: Path) -> None:
    ensure_token(tmp_path)
    ensure_token(tmp_path, OPERATOR_TOKEN_NAME)
    tokens = GatewayTokens(tmp_path)
    first = tokens.generation()
    assert tokens.generation() == first  # nothing changed: nothing moves
    token_path(tmp_path, OPERATOR_TOKEN_NAME).unlink()
    ensure_token(tmp_path, OPERATOR_TOKEN_NAME)
    assert tokens.generation() == first + 1 == tokens.seen()


async def test_a_replaced_gateway_token_drops_its_live_holders(state_dir: Path) -> None:
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)  # the gateway token alone: main
        assert "sessions" in await agent.request("sessions.list")
        token_path(state_dir).unlink()
        ensure_token(state_dir)
        with contextlib.suppress(RemoteError, ConnectionError, OSError):
            await agent.request("sessions.list")  # not acted upon: the token it proved is gone
        await wait_until(lambda: agent.closed)
        fresh = await connect(state_dir, "again", operator=False)  # reads the new gateway.json
        assert "sessions" in await fresh.request("sessions.list")
        await fresh.close()


def test_the_credential_files_watch_sees_a_re_mint_a_removal_and_a_new_agent(state_dir: Path) -> None:
    """What CredentialFiles keeps (the files' identities) is replaced by each change it must report."""
    principals.mint(state_dir, "ops")
    files = CredentialFiles(state_dir)
    assert not files.changed()  # the first look is the baseline
    assert not files.changed()
    principals.mint(state_dir, "ops")  # re-minted (an atomic replace)
    assert files.changed() and not files.changed()
    principals.mint(state_dir, "dev")
    assert files.changed()
    principals.revoke(state_dir, "ops")
    assert files.changed() and not files.changed()
