"""The gateway keeps the sandbox pool: filled at start, claimed by its agent's first exec, adopted after a
restart of the gateway."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import SandboxManager, default_manager, docker_ops, set_default_manager
from engine.sandbox.pool import is_pool_name
from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"gwpool-{os.getpid()}-{secrets.token_hex(3)}"


@pytest.fixture
def labelled(state_dir: Path) -> Iterator[None]:
    build_test_image()
    set_default_manager(SandboxManager(extra_labels={"exechost.test": RUN_ID}))
    yield
    set_default_manager(None)
    remove_labelled(RUN_ID)


def ready() -> list[str]:
    """The gateway's (this process's default manager's) spares that are ready to claim."""
    return [e.name for e in default_manager().pool.ready()]


def spares() -> list[str]:
    names = [str(c["Names"][0]).lstrip("/") for c in docker_ops.list_sandboxes(f"exechost.test={RUN_ID}")]
    return sorted(n for n in names if is_pool_name(n))


async def test_an_agents_first_exec_claims_its_spare_and_a_restart_adopts_the_refill(
    state_dir: Path, labelled: None
) -> None:
    """Spares are per owner (a claim cannot move a container's cgroups): each sandboxed agent the config
    names (main, and the listed one) has its own, made at start; an agent's first exec claims its own."""
    agent_id = "g" + secrets.token_hex(4)
    write_config(
        state_dir,
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
        f'[[agents.list]]\nid = "{agent_id}"\n',
    )
    async with gateway(state_dir):
        first = set(await wait_until(lambda: ready() if len(ready()) >= 2 else None))  # main's and its
        client = await connect(state_dir, "agent")
        try:
            res = await client.request(
                "exec",
                {"command": "echo hi > f; pwd", "agentId": agent_id, "sessionKey": f"agent:{agent_id}:main"},
            )
            assert res["details"]["status"] == "completed" and res["text"].strip() == "/workspace", res
            listed = await client.request("sandbox.list")
            (row,) = [r for r in listed["containers"] if r["agentId"] == agent_id]
            assert row["configMatch"]
            assert not any(is_pool_name(r["containerName"]) for r in listed["containers"])  # spares hidden
            info = docker_ops.client().api.inspect_container(row["containerName"])
            assert docker_ops.POOL_LABEL in info["Config"]["Labels"]  # its spare became the agent's
            assert len(first - set(spares())) == 1  # one spare claimed: main's is still there
            refill = sorted(await wait_until(lambda: [n for n in ready() if n not in first]))
        finally:
            await client.close()
    kept = spares()
    assert set(refill) <= set(kept) and len(kept) == 2  # a stopped gateway leaves its spares for the next
    async with gateway(state_dir):
        await wait_until(lambda: sorted(ready()) == kept)  # adopted, not replaced
        client = await connect(state_dir, "agent")
        try:
            res = await client.request(
                "exec", {"command": "ls -A", "agentId": "main", "sessionKey": "agent:main:main"}
            )
            assert res["details"]["status"] == "completed" and res["text"].strip() in ("", "(no output)"), res
            # the adopted spare of main's served main; its own stays for the listed agent
            await wait_until(lambda: len(set(kept) - set(spares())) == 1)
            assert set(refill) <= set(spares())
        finally:
            await client.close()
