"""A bwrap sandbox's cpu group (engine.sandbox.hostcpu) and its TCP socket charge (bwrapmemory.charge_tcp):
every process of the sandbox, a terminal's included, weighs in one cpu group of its own in its owner's, its
memory group charges its sockets (capped at its memory cap, its owner's at the agent's share of tcp_mem),
and the cpu group goes with the sandbox (fresh round 18 a)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.sandbox import SandboxManager, bwrapmemory, bwraprecords, hostcpu, prepare_exec, rambudget
from engine.sandbox.settings import slugify, state_id
from engine.sessions import RunSpec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

pytestmark = [
    pytest.mark.bwrap,
    needs_bwrap,
    pytest.mark.skipif(
        not hostcpu.usable() or not bwrapmemory.usable(),
        reason="needs writable v1 cpu and memory hierarchies",
    ),
]
__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

PAGE = 4096


def _group(pid: int, controller: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return ""


async def test_every_process_of_a_sandbox_weighs_in_its_own_cpu_group(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(docker='memory = "96m"'), "main", "s", None, manager=bwrap_mgr)
    assert (await run(sx, "echo up"))[1] == "up\n"
    record = json.loads((bwraprecords.runtime_dir() / f"{sx.container}.json").read_text())
    cpu = Path(record["cpuCgroup"])
    owner = hostcpu.CPU_BASE / f"exechost-{state_id()}" / f"agent-{slugify('main')}"
    assert cpu == owner / sx.container
    assert [int((g / "cpu.shares").read_text()) for g in (cpu, owner, owner.parent)] == [hostcpu.SHARES] * 3
    shown = "/" + str(cpu.relative_to(hostcpu.CPU_BASE))
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
        assert {_group(pid, "cpu") for pid in members} == {shown}  # the terminal's processes too
        assert _group(record["pid"], "cpu") != shown  # the keeper left it once bwrap ran
    finally:
        await handle.write(b"exit\n")
        while await handle.read() is not None:
            pass
        await handle.wait()
        handle.close()
    await bwrap_mgr.settle()
    assert bwrap_mgr.remove_runtime(sx.container)
    assert not cpu.exists()  # and goes with it (its emptied owner's and install's too)
    assert not owner.exists()


async def test_a_sandboxs_memory_group_charges_its_tcp_sockets(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(docker='memory = "96m"'), "main", "s", None, manager=bwrap_mgr)
    # one loopback pair: its buffers are the sandbox group's usage while it lives
    script = (
        'python3 -c \'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(1); '
        'c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.sendall(b"x"*65536); '
        'print(open("/proc/self/cgroup").read())\''
    )
    status, _, err = await run(sx, script)
    assert status == (0, None), err
    record = json.loads((bwraprecords.runtime_dir() / f"{sx.container}.json").read_text())
    group = Path(record["memoryCgroup"])
    tcp = rambudget.tcp_max()
    limit = int((group / rambudget.TCP_LIMIT).read_text())
    assert limit == min(96 << 20, tcp // rambudget.AGENT_TCP_SHARE) // PAGE * PAGE
    owner = int((group.parent / rambudget.TCP_LIMIT).read_text())
    assert owner == tcp // rambudget.AGENT_TCP_SHARE // PAGE * PAGE
    install = int((group.parent.parent / rambudget.TCP_LIMIT).read_text())
    assert install == tcp // rambudget.INSTALL_TCP_SHARE // PAGE * PAGE
    assert int((group / "memory.kmem.tcp.max_usage_in_bytes").read_text()) > 0  # its sockets were charged
