"""A root gateway's bwrap sandbox runs as an unprivileged host uid of its agent's own (sandboxuid):
what it writes is that uid's on the host, root-only files anywhere in its view are refused, each agent has
its own uid, and a gateway that is not root is unchanged."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import statefs
from engine.sandbox import SandboxManager, admin, bwraprecords, prepare_exec, sandboxuid
from engine.sessions import RunSpec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

pytestmark = [
    pytest.mark.bwrap,
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the construction is a root gateway's"),
]
__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

SECRET = "root-only-4f1c9e"


def _host_uids(pid: int) -> set[int]:
    """The real, effective, saved and fs uids of every process below `pid`, as the host sees them."""
    uids: set[int] = set()
    for child in bwraprecords.children(pid, grandchildren=True):
        try:
            with open(f"/proc/{child}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        uids.update(int(x) for x in line.split()[1:])
        except OSError:
            continue
    return uids


async def test_the_sandbox_is_its_agents_own_unprivileged_uid_on_the_host(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    status, out, _ = await run(sx, "id -u; echo made > made.txt")
    assert status[0] == 0 and out == "0\n"  # its root inside ...
    made = Path(sx.workspace_dir, "made.txt")
    uid = os.stat(made).st_uid
    assert uid != 0 and sandboxuid.is_sandbox_uid(uid)  # ... is that uid on the host
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)  # no account's
    record = bwraprecords.read_record(sx.container)
    assert record is not None and record["uid"] == uid
    inside = _host_uids(int(record["pid"])) - {0}  # (the keeper stays root: it sets the limits)
    assert inside == {uid}, inside
    assert admin.explain(bwrap_config(), "main", "s")["bwrap"]["hostUid"] == uid  # what the operator sees


async def test_a_terminal_in_the_sandbox_is_its_uid_too(bwrap_mgr: SandboxManager) -> None:
    """A terminal joins the sandbox by nsenter: with the gateway's credentials kept it was host root in the
    sandbox's namespaces (its files root's); it is the namespace's root, so the sandbox's uid."""
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    await run(sx, "echo x > by-pipes.txt")
    handle = await sx.launcher.spawn(RunSpec(command="sh", cwd=sx.cwd, env={}, pty=True, cols=80, rows=24))
    await handle.write(
        b"echo x > /workspace/by-pty.txt; cat /usr/local/etc/none 2>/dev/null; echo done-$((6*7))\n"
    )
    buf = b""
    async with asyncio.timeout(10):
        while b"done-42" not in buf:
            chunk = await handle.read()
            assert chunk is not None, buf
            buf += chunk[1]
    await handle.write(b"exit 0\n")
    while await handle.read() is not None:
        pass
    await handle.wait()
    handle.close()
    owner = os.stat(Path(sx.workspace_dir, "by-pipes.txt")).st_uid
    assert sandboxuid.is_sandbox_uid(owner)
    assert os.stat(Path(sx.workspace_dir, "by-pty.txt")).st_uid == owner


async def test_a_root_only_file_anywhere_in_the_view_is_refused(bwrap_mgr: SandboxManager) -> None:
    """Not a list of paths: a 0600 file of root's in the agent workspace, mounted read-only into the
    sandbox, is as unreadable as one under /usr."""
    agent_ws = Path(statefs.state_dir(), "workspace")
    agent_ws.mkdir(parents=True, exist_ok=True)
    (agent_ws / "open.txt").write_text("open\n")
    (agent_ws / "open.txt").chmod(0o644)
    secret = agent_ws / "key.txt"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    config = bwrap_config('workspaceAccess = "ro"')
    sx = await prepare_exec(config, "main", "s", None, manager=bwrap_mgr)
    status, out, err = await run(sx, "cat /agent/open.txt; cat /agent/key.txt")
    assert out == "open\n", (out, err)
    assert SECRET not in out + err and status[0] != 0
    assert os.stat(secret).st_uid == 0  # the operator's file stays root's


async def test_two_agents_sandboxes_are_two_uids(bwrap_mgr: SandboxManager) -> None:
    config = bwrap_config('scope = "agent"')
    uids = []
    for agent in ("main", "other"):
        sx = await prepare_exec(config, agent, f"agent:{agent}:s", None, manager=bwrap_mgr)
        status, _, _ = await run(sx, "echo x > mine.txt && chmod 600 mine.txt")
        assert status[0] == 0
        uids.append(os.stat(Path(sx.workspace_dir, "mine.txt")).st_uid)
    assert uids[0] != uids[1] and all(sandboxuid.is_sandbox_uid(u) for u in uids)


def test_the_uids_skip_every_id_of_the_machine_and_are_stable() -> None:
    taken = sandboxuid._taken()
    for owner in ("main", "other", "shared"):
        uid = sandboxuid.for_owner(owner)
        assert uid is not None and uid == sandboxuid.for_owner(owner)
        assert not any(first <= uid < first + count for first, count in taken)


def test_a_gateway_that_is_not_root_keeps_its_own_uid(tmp_path: Path) -> None:
    """Run by another account, the module gives no uid and no drop: bwrap runs as the gateway, as before."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv")
    code = "from engine.sandbox import sandboxuid as s; print(s.for_owner('main'), s.drop_to(None))"
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "OPENCLAW_STATE_DIR": str(tmp_path)},
        check=False,
    )
    assert done.stdout == "None []\n", done.stderr
