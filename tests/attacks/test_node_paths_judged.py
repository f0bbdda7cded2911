"""A node's identityFile and identityAgent are judged as named, like its knownHosts: a key or agent socket
another account may swap (a dir on the way it may write) is refused, never used (round 18 c, class 6)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.test_fresh_round18_c import NOBODY, _as_nobody
from tests.helpers.gateway import connect, gateway, write_config
from tests.helpers.sshd import ssh_agent

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account (nobody)")


def _team_dir(state_dir: Path) -> Path:
    """A team dir another account (nobody) may write: group-writable, its group that account's."""
    root = state_dir.parent
    os.chmod(root, 0o711)  # (the other account must reach the team dir)
    team = root / "team"
    team.mkdir()
    os.chown(team, 0, NOBODY)
    os.chmod(team, 0o775)
    return team


async def _alpha_row(state_dir: Path) -> dict[str, Any]:
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            rows = (await op.request("nodes.status", {"ping": True}))["nodes"]
        finally:
            await op.close()
    return {r["name"]: r for r in rows}["alpha"]


@needs_root
async def test_identity_file_in_a_dir_another_account_may_write_is_refused(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The node's key lives in the team dir. The other account swaps in a key of its own (one its server
    accepts: here alpha's authorized_keys lists it too): the gateway would log in with, and prove itself
    by, a key that account holds. Refused by name; nothing is dialled with it."""
    alpha, _beta = sshd_nodes
    team = _team_dir(state_dir)
    key = team / "id_ed25519"
    shutil.copy(alpha.client_key, key)
    os.chmod(key, 0o600)
    theirs = team / "theirs"
    _as_nobody("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nobody", "-f", str(theirs))
    with (alpha.root / "authorized_keys").open("a") as fh:
        fh.write((team / "theirs.pub").read_text())
    _as_nobody("mv", "-f", str(theirs), str(key))  # the other account's swap
    write_config(state_dir, alpha.config_toml().replace(str(alpha.client_key), str(key)))
    row = await _alpha_row(state_dir)
    assert row["state"] != "connected", row
    assert "nodes.alpha.identityFile" in row["lastError"] and str(key) in row["lastError"], row


@needs_root
async def test_identity_file_behind_a_link_in_a_dir_another_account_may_write_is_refused(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The key itself is private, but the config names it through a link in the team dir: the other
    account may repoint that link at a key of its own. Judged link by link, refused."""
    alpha, _beta = sshd_nodes
    team = _team_dir(state_dir)
    link = team / "node-key"
    link.symlink_to(alpha.client_key)
    write_config(state_dir, alpha.config_toml().replace(str(alpha.client_key), str(link)))
    row = await _alpha_row(state_dir)
    assert row["state"] != "connected", row
    assert "nodes.alpha.identityFile" in row["lastError"], row


@needs_root
async def test_identity_agent_socket_in_a_dir_another_account_may_write_is_refused(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The node logs in through an ssh-agent whose socket is in the team dir: the other account may put
    its own agent's socket at that name, and the gateway would ask that agent to sign. Refused before it
    is dialled."""
    alpha, _beta = sshd_nodes
    team = _team_dir(state_dir)
    sock = team / "agent.sock"
    assert len(str(sock)) <= 107
    text = alpha.config_toml().replace(f'identityFile = "{alpha.client_key}"', f'identityAgent = "{sock}"')
    assert "identityFile" not in text
    with ssh_agent(sock, alpha.client_key):
        write_config(state_dir, text)
        row = await _alpha_row(state_dir)
    assert row["state"] != "connected", row
    assert "nodes.alpha.identityAgent" in row["lastError"] and str(sock) in row["lastError"], row


@needs_root
async def test_identity_agent_and_file_held_by_this_account_still_connect(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The control: the same agent socket in a dir only this account may write logs in (the fixture's
    identityFile, in such a dir too, logs in throughout tests/engine/nodes)."""
    alpha, _beta = sshd_nodes
    mine = state_dir.parent / "mine"
    mine.mkdir(mode=0o700)
    sock = mine / "agent.sock"
    text = alpha.config_toml().replace(f'identityFile = "{alpha.client_key}"', f'identityAgent = "{sock}"')
    with ssh_agent(sock, alpha.client_key):
        os.chmod(sock, 0o775)  # as gnome-keyring leaves its socket: who may connect, not who may replace it
        write_config(state_dir, text)
        row = await _alpha_row(state_dir)
    assert row["state"] == "connected", row
