"""`[[agents.list]]` is the allowlist of principals: a credential whose agent the config does not list is
refused at its hello, and a reload that removes an agent's entry drops its live connections and settles
its asks, as `agents revoke` does (fresh round 15 a: a retired agent's credential ran under the defaults)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from engine import principals
from engine.errors import ExecHostError
from engine.protocol.client import ControlClient
from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config


async def _agent(state: Path, token: str | None = None) -> ControlClient:
    return await ControlClient.connect(state, client="agent", name="agent", autostart=False, credential=token)


@pytest.mark.parametrize("config", ["", FULL, FULL + listed("dev")], ids=["no-config", "no-list", "others"])
async def test_a_credential_of_an_unlisted_agent_is_refused_at_its_hello(
    state_dir: Path, config: str
) -> None:
    if config:
        write_config(state_dir, config)
    token = principals.mint(state_dir, "ops")  # minted on disk, past the CLI's own refusal
    async with gateway(state_dir):
        with pytest.raises(ExecHostError) as refused:
            await _agent(state_dir, token)
        said = str(refused.value)
        assert "'ops' is not in [[agents.list]]" in said and str(state_dir / "config.toml") in said
        # main needs no entry, by its credential or by the gateway token alone.
        main = await _agent(state_dir, principals.mint(state_dir, "main"))
        assert main.agent == principals.MAIN_AGENT
        await main.close()
        anonymous = await _agent(state_dir)
        assert anonymous.agent == principals.MAIN_AGENT
        await anonymous.close()


async def test_a_listed_agent_connects_and_under_its_own_policy(state_dir: Path, tmp_path: Path) -> None:
    own = '\n[[agents.list]]\nid = "ops"\ntools.exec.ask = "always"\n'
    write_config(state_dir, FULL + listed("dev") + own)
    async with gateway(state_dir):
        ops = await _agent(state_dir, principals.mint(state_dir, "ops"))
        assert ops.agent == "ops"
        asked = await ops.request("exec", {"command": f"touch {tmp_path / 'x'}"})
        assert asked["details"]["status"] == "approval-pending"  # its own entry, not the defaults
        await ops.close()


@pytest.mark.parametrize("rest", ["", listed("dev")], ids=["last-entry", "one-of-several"])
async def test_a_reload_that_removes_an_agents_entry_drops_it_and_settles_its_asks(
    state_dir: Path, tmp_path: Path, rest: str
) -> None:
    own = '\n[[agents.list]]\nid = "ops"\ntools.exec.security = "allowlist"\ntools.exec.ask = "on-miss"\n'
    write_config(state_dir, FULL + rest + own)
    token = principals.mint(state_dir, "ops")
    proof = tmp_path / "ran"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        ops = await _agent(state_dir, token)
        idle = await _agent(state_dir, token)  # a second connection that sends nothing
        call = asyncio.ensure_future(ops.request("exec", {"command": f"touch {proof}", "background": True}))
        await wait_until(lambda: len(server.services.approvals.pending()) == 1)
        ask = server.services.approvals.pending()[0]
        write_config(state_dir, FULL + rest)  # the operator retires ops: its entry goes
        await operator.request("agents.refresh")  # (the reload does it too; this waits for it)
        await wait_until(lambda: ops.closed and idle.closed)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(call, 5)
        assert ask.id not in [r.id for r in server.services.approvals.pending()]  # settled, as a revoke
        with pytest.raises(ExecHostError, match=r"not in \[\[agents\.list\]\]"):
            await _agent(state_dir, token)
        # Listing ops again admits its credential, but what was asked before is not brought back.
        write_config(state_dir, FULL + rest + own)
        await operator.request("agents.refresh")
        again = await _agent(state_dir, token)
        assert again.agent == "ops"
        assert not server.services.approvals.pending()
        await again.close()
        await operator.close()
    assert not proof.exists()


async def test_a_request_after_the_reload_is_not_acted_upon_before_the_recheck(
    state_dir: Path, tmp_path: Path
) -> None:
    """The request that follows the config change is decided under the new config (the loop's check of
    the config's part, `_still_configured`), not under the one its connection said hello under."""
    write_config(state_dir, ALLOWLIST + '\n[[agents.list]]\nid = "ops"\ntools.exec.security = "full"\n')
    token = principals.mint(state_dir, "ops")
    proof = tmp_path / "ran"
    async with gateway(state_dir) as server:
        ops = await _agent(state_dir, token)
        write_config(state_dir, FULL)  # no list at all now: ops is nobody
        server.services.live_config.get()  # (the reload, as the file watcher would make it)
        with contextlib.suppress(Exception):
            await ops.request("exec", {"command": f"touch {proof}"})
        await ops.close()
    assert not proof.exists()
