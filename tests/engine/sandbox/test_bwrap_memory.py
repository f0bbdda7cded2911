"""A bwrap sandbox's memory group (engine.sandbox.bwrapmemory): every process of the sandbox, a terminal's
included, is charged to one v1 memory group capped at docker.memory, in its owner's group (RAM/4, the
install's RAM/2: the groups Docker's containers of that owner share), and the group goes with the sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.sandbox import SandboxManager, bwrapmemory, bwraprecords, prepare_exec, rambudget
from engine.sandbox.settings import slugify
from engine.sessions import RunSpec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

pytestmark = [
    pytest.mark.bwrap,
    needs_bwrap,
    pytest.mark.skipif(not bwrapmemory.usable(), reason="needs a writable cgroup v1 memory hierarchy"),
]
__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

PAGE = 4096


def _memory_group(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return ""


async def test_every_process_of_a_sandbox_is_charged_to_its_capped_group(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(
        bwrap_config(docker='pidsLimit = 64\nmemory = "96m"'), "main", "s", None, manager=bwrap_mgr
    )
    assert (await run(sx, "echo up"))[1] == "up\n"
    record = json.loads((bwraprecords.runtime_dir() / f"{sx.container}.json").read_text())
    group = Path(record["memoryCgroup"])
    owner = bwrapmemory.install_group() / f"agent-{slugify('main')}"
    assert group == owner / sx.container
    ram = rambudget.mem_total()
    assert int((group / "memory.limit_in_bytes").read_text()) == 96 << 20
    assert (
        int((owner / "memory.limit_in_bytes").read_text())
        == ram // rambudget.AGENT_MEMORY_SHARE // PAGE * PAGE
    )
    install = int((owner.parent / "memory.limit_in_bytes").read_text())
    assert install == ram // rambudget.INSTALL_MEMORY_SHARE // PAGE * PAGE
    # A terminal joins it too (bwrapterm.JOIN_SH): every member of the sandbox's pids group, the
    # terminal's processes among them, is in its memory group; the keeper left both once bwrap ran.
    handle = await sx.launcher.spawn(RunSpec(command="sh", cwd=sx.cwd, env={}, pty=True, cols=80, rows=24))
    try:
        await handle.write(b"echo in-terminal\n")
        buf = b""
        async with asyncio.timeout(10):
            while b"in-terminal\r\n" not in buf:
                chunk = await handle.read()
                assert chunk is not None, buf
                buf += chunk[1]
        members = [int(p) for p in Path(record["cgroup"], "cgroup.procs").read_text().split()]
        assert len(members) > len(bwraprecords.children(record["pid"], grandchildren=True))
        shown = "/" + str(group.relative_to(bwrapmemory.MEMORY_BASE))
        assert {_memory_group(pid) for pid in members} == {shown}
        assert _memory_group(record["pid"]) != shown
    finally:
        await handle.write(b"exit\n")
        while await handle.read() is not None:
            pass
        await handle.wait()
        handle.close()
    await bwrap_mgr.settle()
    assert bwrap_mgr.remove_runtime(sx.container)
    assert not group.exists()  # and goes with it (its emptied owner's and install's too)
    assert not owner.exists()
