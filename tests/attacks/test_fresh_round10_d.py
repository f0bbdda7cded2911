"""Fresh round 10, attacker d: a host tool reads exactly the bytes that were checked (issue 27 §4):
emulating another program, check then use, crash at the worst moment."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, wait_until, write_config

needs_bwrap = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode != 0,
    reason="needs bubblewrap",
)


def _private_root(state: Path) -> Path:
    """The test's stand-in for /tmp (conftest: EXECHOST_HOST_PRIVATE), private to each agent."""
    return Path(os.environ["EXECHOST_HOST_PRIVATE"])


def _agent_copy(state: Path, agent: str, path: Path) -> Path:
    from engine.commands import hostprivate

    binds = hostprivate.binds(str(state), agent, hostprivate.dests(None))
    source = hostprivate.source_of(binds, str(path))
    assert source is not None
    return Path(source)


async def _exec(state: Path, params: dict[str, Any]) -> dict[str, Any]:
    client = await connect(state)
    try:
        result = await client.request("exec", {"agentId": "main", **params})
    finally:
        await client.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


async def _approve(state: Path, approval_id: str) -> None:
    client = await connect(state)
    try:
        await client.request("approve", {"id": approval_id, "decision": "allow-once"})
    finally:
        await client.close()


PACKAGE = {
    "name": "p",
    "version": "1.0.0",
    "scripts": {"test": "cat go.fifo >/dev/null; npm run --silent build", "build": "echo SAFE > out.txt"},
}


async def _npm_rewrite_after_spawn(state: Path, work: Path, copy: Path) -> str:
    """Ask `npm test` in `work` (its files in `copy` on the host), approve it as shown, and once the run
    is past its spawn rewrite package.json in place; what the approved run's nested npm ran."""
    import json

    copy.mkdir(parents=True, exist_ok=True)
    (copy / "package.json").write_text(json.dumps(PACKAGE))
    os.mkfifo(copy / "go.fifo")
    details = await _exec(state, {"command": "npm test", "workdir": str(work)})
    assert details["status"] == "approval-pending", details
    await _approve(state, details["approvalId"])

    def after_spawn() -> None:
        with open(copy / "go.fifo", "w") as go:  # returns once the approved run's `cat` opened it
            evil = dict(PACKAGE, scripts=dict(PACKAGE["scripts"], build="echo PWNED > out.txt"))
            with open(copy / "package.json", "r+") as f:  # in place: same inode, no rename
                f.truncate(0)
                f.write(json.dumps(evil))
            go.write("go\n")

    await asyncio.wait_for(asyncio.to_thread(after_spawn), 120)
    out = copy / "out.txt"
    await wait_until(out.exists, timeout=120)
    await wait_until(lambda: out.read_text().strip() != "", timeout=30)
    return out.read_text().strip()


@needs_bwrap
async def test_npm_control_workdir_outside_private_dirs(state_dir: Path) -> None:
    """Control: in an ordinary workdir the approved run reads the bound copy of package.json."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "proj"
    async with gateway(state_dir):
        assert await _npm_rewrite_after_spawn(state_dir, work, work) == "SAFE"


@needs_bwrap
@pytest.mark.xfail(
    strict=True,
    reason="open: in a workdir in the agent's private /tmp the run is decided at the host path of its "
    "copy (state/hostprivate/...), so every vetted file (package.json here) is bound read-only at that "
    "host path, under the view's state-dir tmpfs, and the program reads the live file at /tmp/...: an "
    "in-place rewrite after the approval runs",
)
async def test_npm_in_private_tmp_reads_live_package_json(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    work = _private_root(state_dir) / "proj"
    async with gateway(state_dir):
        copy = _agent_copy(state_dir, "main", work)
        assert await _npm_rewrite_after_spawn(state_dir, work, copy) == "SAFE"
