"""A filesystem only its owner may enter (FUSE without allow_other) is private wherever it is mounted, and
whatever its files' modes say (fresh round 15 b found one in the home; the rule is the mount's, so one
outside the home is covered too)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import homeprivate
from tests.attacks.harness import ALLOWLIST, attempt
from tests.attacks.test_fresh_round15_b import _Vault
from tests.helpers.gateway import connect, gateway, write_config

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="mounts a FUSE filesystem"
)

SECRET = "vault-outside-7c2d"


async def test_a_vault_mounted_outside_the_home_is_no_host_runs(state_dir: Path) -> None:
    top = Path(tempfile.mkdtemp(prefix="ehv-", dir="/mnt" if os.path.isdir("/mnt") else "/var/tmp"))
    os.chmod(top, 0o755)  # a public directory: only the mount keeps others out
    vault = _Vault(top, {"passwords.txt": f"bank: {SECRET}\n".encode()})
    try:
        assert str(top) in homeprivate.owner_only_mounts()
        read = await attempt(state_dir, f"/usr/bin/cat {top}/passwords.txt", allow=[("/usr/bin/cat", None)])
        listed = await attempt(state_dir, f"/usr/bin/ls -a {top}", allow=[("/usr/bin/ls", None)])
    finally:
        vault.close()
        shutil.rmtree(top, ignore_errors=True)
    assert SECRET not in read["_text"], read
    assert "passwords.txt" not in listed["_text"], listed


def test_only_fuse_mounts_without_allow_other_are_owner_only(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "30 1 0:30 / /home/op/Vault rw,nosuid,nodev - fuse.gocryptfs vault rw,user_id=1000,group_id=1000\n"
        "31 1 0:31 / /mnt/shared rw - fuse.sshfs host:/ rw,user_id=1000,group_id=1000,allow_other\n"
        "32 1 0:32 / /mnt/with\\040space rw - fuse vault rw,user_id=0,group_id=0\n"
        "33 1 0:33 / /media/usb rw - fuseblk /dev/sdb1 rw,user_id=0,group_id=0,default_permissions\n"
        "34 1 0:34 / /srv rw - ext4 /dev/sda2 rw\n"
    )
    assert homeprivate.owner_only_mounts(str(table)) == {"/home/op/Vault", "/mnt/with space", "/media/usb"}


async def test_a_vault_mounted_after_the_view_was_made_is_no_host_runs(state_dir: Path) -> None:
    """The agent's view is made (and kept) before the operator mounts the vault; the agent's next run, in
    the same gateway, does not read it."""
    vault_dir = Path(os.environ["HOME"]) / "Later"
    vault_dir.mkdir()
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/ls")
    store.add_allowlist("main", "/usr/bin/cat")
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            before = await client.request(
                "exec", {"command": f"/usr/bin/ls -a {vault_dir}", "agentId": "main"}
            )
            vault = _Vault(vault_dir, {"passwords.txt": f"bank: {SECRET}\n".encode()})
            try:
                read = await client.request(
                    "exec", {"command": f"/usr/bin/cat {vault_dir}/passwords.txt", "agentId": "main"}
                )
            finally:
                vault.close()
        finally:
            await client.close()
    assert before["details"]["status"] == "completed", before  # control: the view was made first
    assert SECRET not in read["text"], read
