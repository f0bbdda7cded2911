"""Sandboxes end to end: agent exec via the gateway into a container, then the console's Sandboxes pane."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.dialogs import ConfirmDialog
from console.widgets.sandboxes import SandboxesPane
from engine.protocol.frames import RemoteError
from engine.sandbox import SandboxManager, docker_ops, set_default_manager
from engine.sandbox.pool import is_pool_name
from tests.engine.sandbox.test_sandbox_docker import RUN_ID, TEST_LABEL, _cleanup
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sandbox import IMAGE, build_test_image

pytestmark = pytest.mark.docker


@pytest.fixture
def labelled(sandbox_image: str) -> Iterator[None]:
    set_default_manager(SandboxManager(extra_labels={"exechost.test": RUN_ID}))
    yield
    set_default_manager(None)
    _cleanup()


@pytest.fixture(scope="session")
def sandbox_image() -> Iterator[str]:
    yield build_test_image()
    _cleanup()


def sandbox_config() -> str:
    return (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )


async def until(pilot: Pilot[None], pred: Any, timeout: float = 10.0) -> Any:
    async def check() -> Any:
        await pilot.pause()
        return pred()

    return await wait_until(check, timeout=timeout)


async def test_gateway_exec_runs_in_sandbox_and_pane_manages_it(state_dir: Path, labelled: None) -> None:
    agent_id = "t" + secrets.token_hex(4)
    write_config(state_dir, sandbox_config())
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        try:
            res = await agent.request(
                "exec",
                {
                    "command": "cat /proc/1/cgroup >/dev/null; pwd; ls /sys/class/net",
                    "agentId": agent_id,
                    "sessionKey": f"agent:{agent_id}:chat",
                },
            )
            assert res["details"]["status"] == "completed", res
            assert "/workspace\nlo" in res["text"]
            listed = await agent.request("sandbox.list")
            (row,) = [r for r in listed["containers"] if r["agentId"] == agent_id]
            assert row["running"] and row["configMatch"]
            assert (await agent.request("sandbox.prune")) == {"removed": []}  # fresh: nothing to prune
            explained = await agent.request("sandbox.explain", {"agentId": agent_id})
            assert explained["containerName"] == row["containerName"] and explained["runtime"] == "sandboxed"
            with pytest.raises(RemoteError, match="exactly one of"):
                await agent.request("sandbox.recreate", {})

            app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
            async with app.run_test(size=(160, 40)) as pilot:
                await wait_until(app.link.connected.is_set)
                await pilot.press("5")
                pane = app.query_one(SandboxesPane)
                await until(pilot, lambda: any(r["agentId"] == agent_id for r in pane.rows))
                table = app.query_one("#sandbox-list")
                index = next(i for i, r in enumerate(pane.rows) if r["agentId"] == agent_id)
                table.move_cursor(row=index)  # type: ignore[attr-defined]
                await pilot.press("e")
                detail = app.query_one("#sandbox-detail")
                await until(pilot, lambda: row["containerName"] in str(detail.render()))
                await pilot.press("x")
                await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
                await pilot.press("y")
                await until(pilot, lambda: not docker_ops.inspect(row["containerName"]).exists)
                await until(pilot, lambda: all(r["agentId"] != agent_id for r in pane.rows))
            left = [str(c["Names"][0]).lstrip("/") for c in docker_ops.list_sandboxes(TEST_LABEL)]
            assert all(is_pool_name(n) for n in left)  # only the gateway's ready spares (no agent's)
        finally:
            await agent.close()
