"""runner.node.quota: a node's sessions and their output on its disk are budgeted per principal as it files
them (gateway key + agent), by the node's own config, and every session a gateway may admit here starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.config.loader import load_config_text
from engine.results import ToolError
from engine.sessions import RunSpec, SessionManager
from runner.node.quota import GATEWAY_BUDGET, NodeQuota
from tests.helpers.gateway import connect, gateway, wait_until, write_config

MIB = 1 << 20


async def _cap(manager: SessionManager, scope: str) -> int:
    res = await manager.run(RunSpec(command="sleep 30", background=True, scope_key=scope))
    assert res.details["status"] == "running", res.text
    session = manager.get(str(res.details["sessionId"]))
    assert session is not None
    return session.output.log_cap


async def test_every_session_the_count_allows_starts_and_the_caps_add_up_to_the_budget(
    state_dir: Path,
) -> None:
    quota = NodeQuota(sessions=4, output_bytes=16 * MIB)
    manager = SessionManager(state_dir, log_cap_bytes=8 * MIB, kill_grace_sec=0.5, quota=quota)
    try:
        caps = [await _cap(manager, "fp/agent:main:s") for _ in range(4)]
        assert caps == [8 * MIB, 6 * MIB, MIB, MIB]  # room kept for each later one: all four start
        assert sum(caps) == 16 * MIB
        with pytest.raises(ToolError, match="agent main of gateway fp has 4 sessions"):
            await _cap(manager, "fp/agent:main:s")
        # another gateway's main, a keyless link's main, and this gateway's ops: each its own budget
        for scope in ("gp/agent:main:s", "agent:main", "fp/agent:ops:x"):
            assert await _cap(manager, scope) == 8 * MIB
        # an ownerless key is the gateway's own: budgeted too (the node cannot tell its operator)
        assert [await _cap(manager, "fp/plain") for _ in range(4)] == caps
        with pytest.raises(ToolError, match="gateway fp has 4 sessions"):
            await _cap(manager, "fp/other")
    finally:
        await manager.close()


async def test_a_small_budget_is_shared_out_evenly(state_dir: Path) -> None:
    quota = NodeQuota(sessions=64, output_bytes=4 * MIB)
    manager = SessionManager(state_dir, log_cap_bytes=64 * MIB, kill_grace_sec=0.5, quota=quota)
    try:
        assert await _cap(manager, "fp/agent:main:s") == 64 * 1024  # 4 MiB / 64 sessions
    finally:
        await manager.close()


async def test_the_caps_are_the_nodes_config_per_agent(state_dir: Path) -> None:
    config = load_config_text(
        "[tools.exec]\nmaxSessionsPerAgent = 2\nmaxOutputBytesPerAgent = 4194304\nlogCapBytes = 67108864\n"
        '[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nmaxSessionsPerAgent = 1\n'
    )
    quota = NodeQuota(config=lambda: config)
    manager = SessionManager(state_dir, log_cap_bytes=64 * MIB, kill_grace_sec=0.5, quota=quota)
    try:
        assert [await _cap(manager, "fp/agent:main:s") for _ in range(2)] == [3 * MIB, MIB]
        assert await _cap(manager, "fp/agent:ops:s") == 4 * MIB
        with pytest.raises(ToolError, match="agent ops of gateway fp has 1 sessions"):
            await _cap(manager, "fp/agent:ops:s")
        assert await _cap(manager, "gp/agent:ops:s") == 4 * MIB  # another gateway's ops
    finally:
        await manager.close()


def test_the_gateways_budget_only_tightens_the_nodes() -> None:
    config = load_config_text("[tools.exec]\nmaxOutputBytesPerAgent = 4194304\n")
    quota = NodeQuota(config=lambda: config)
    assert quota.caps("fp/main") == (64, 4 * MIB)
    token = GATEWAY_BUDGET.set(2 * MIB)
    try:
        assert quota.caps("fp/main") == (64, 2 * MIB)
    finally:
        GATEWAY_BUDGET.reset(token)
    token = GATEWAY_BUDGET.set(1 << 40)  # a gateway cannot raise the node's own
    try:
        assert quota.caps("fp/main") == (64, 4 * MIB)
    finally:
        GATEWAY_BUDGET.reset(token)


async def test_a_gateways_budget_caps_its_agents_node_sessions(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """The node's own config says nothing; the gateway's maxOutputBytesPerAgent (4 MiB) rides along with
    each of its agent's runs and caps what that agent's sessions keep on the node's disk."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    )
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    nodes = alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    runs = '[tools.exec]\nhost = "node"\nnode = "alpha"\nsecurity = "full"\nask = "off"\n'
    write_config(state_dir, runs + "maxOutputBytesPerAgent = 4194304\n\n" + nodes)
    principals.mint(state_dir, "main")
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False, agent="main")
        try:
            big = "head -c 12000000 /dev/zero | tr '\\\\0' x"
            started = await main.request("exec", {"command": big, "background": True})
            sid = started["details"]["sessionId"]

            async def done() -> bool:
                polled = await main.request("process", {"action": "poll", "sessionId": sid})
                return polled["details"].get("status") != "running"

            await wait_until(done, timeout=60)
            logs = {p.name: p.stat().st_size for p in alpha.state_dir.rglob("*.log")}
        finally:
            await main.close()
    assert logs and sum(logs.values()) <= 4 * MIB, logs
