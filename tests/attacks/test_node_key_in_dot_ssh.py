"""A node's identityFile in ~/.ssh/, where exechost's own error message tells the operator to put it: every
gateway-host run still runs, and none reads the key (a user's bug before it was an attacker's: the view's
bind over the key failed in ~/.ssh, read-only and covered as private, and broke every host run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.gateway import FULL, connect, gateway, write_config


def _node(home: Path, key: Path) -> str:
    return FULL + (
        f'[nodes.n1]\nhost = "127.0.0.1"\nport = 2\nuser = "x"\nidentityFile = "{key}"\n'
        f'knownHosts = "{home}/.ssh/known_hosts"\n'
    )


@pytest.mark.parametrize(("spelled", "sub"), [("real", "."), ("tilde", "."), ("real", "nodes")])
async def test_host_runs_work_with_a_node_key_in_dot_ssh(state_dir: Path, spelled: str, sub: str) -> None:
    """A real key is 0600 (ssh refuses one others may read): private to the operator, so hidden twice,
    once as the config's key (left out of ~/.ssh's read-only copy) and once as a private file (a bind
    there, where the copy has no file to bind over: bwrap failed to create it). Failed before the fix."""
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "known_hosts").write_text("")
    (ssh / sub).mkdir(mode=0o700, exist_ok=True)
    key = ssh / sub / "id_node"
    key.write_text("SECRET-NODE-KEY\n")
    key.chmod(0o600)
    named = key if spelled == "real" else Path("~/.ssh") / sub / "id_node"
    write_config(state_dir, _node(home, named))
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            ok = await client.request("exec", {"command": "true"})
            read = await client.request("exec", {"command": f"cat {key}; ls -a {key.parent}; echo done"})
        finally:
            await client.close()
    assert ok.get("exitCode", 0) == 0 and "bwrap" not in ok["text"], ok
    assert "done" in read["text"] and "SECRET-NODE-KEY" not in read["text"], read
