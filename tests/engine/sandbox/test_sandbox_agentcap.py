"""Each agent's live sandboxes against its cap (engine.sandbox.agentcap), with real bubblewrap sandboxes:
past it the agent's least recently used idle one ends, never another agent's; all busy, a clear refusal."""

from __future__ import annotations

import pytest

from engine.results import ToolError
from engine.sandbox import SandboxManager, agentcap, bwrap, prepare_exec
from engine.sandbox.registry import RegistryEntry
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap

__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

PER_SESSION = 'scope = "session"'


def _entry(name: str, used: int, agent: str = "main", key: str = "") -> RegistryEntry:
    return RegistryEntry(name, key or f"agent:{agent}:{name}", 1, used, "host", agentId=agent)


def test_the_cap_is_the_agents_own_and_never_past_its_session_cap() -> None:
    from engine.config.loader import load_config_text

    assert agentcap.cap_for(load_config_text(""), "main") == agentcap.DEFAULT_MAX_SANDBOXES_PER_AGENT
    cfg = load_config_text(
        "[tools.exec]\nmaxSandboxesPerAgent = 5\n"
        '[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nmaxSessionsPerAgent = 3\n'
    )
    assert (agentcap.cap_for(cfg, "main"), agentcap.cap_for(cfg, "ops")) == (5, 3)
    assert agentcap.cap_for(None, "main") == agentcap.DEFAULT_MAX_SANDBOXES_PER_AGENT


def test_only_the_agents_own_sandboxes_count_and_idle_ones_end_oldest_first() -> None:
    rows = [
        _entry("a", 30),
        _entry("b", 10),
        _entry("c", 20),
        _entry("o", 1, agent="ops"),
        _entry("s", 1, key="shared"),
        RegistryEntry("legacy", "agent:main:x", 1, 5, "host"),  # no agentId: its key's owner
    ]
    mine = agentcap.owned(rows, "main", besides="c")
    assert [e.containerName for e in mine] == ["a", "b", "legacy"]
    chosen, short = agentcap.to_end(mine, 2, {})
    assert [e.containerName for e in chosen] == ["legacy", "b"] and short == 0
    chosen, short = agentcap.to_end(mine, 2, {"legacy": 1, "b": 1})  # busy ones are never ended
    assert [e.containerName for e in chosen] == ["a"] and short == 1
    assert agentcap.to_end(mine, 4, {}) == ([], 0)


@needs_bwrap
@pytest.mark.bwrap
async def test_past_the_cap_the_agents_idle_sandbox_ends_and_all_busy_is_refused(
    bwrap_mgr: SandboxManager,
) -> None:
    cfg = bwrap_config(PER_SESSION, extra="[tools.exec]\nmaxSandboxesPerAgent = 2\n")
    first = await prepare_exec(cfg, "main", "agent:main:k1", None, manager=bwrap_mgr)
    second = await prepare_exec(cfg, "main", "agent:main:k2", None, manager=bwrap_mgr)
    # another agent's: its own count
    other = await prepare_exec(cfg, "ops", "agent:ops:k1", None, manager=bwrap_mgr)
    third = await prepare_exec(cfg, "main", "agent:main:k3", None, manager=bwrap_mgr)
    running = {first.container, second.container, other.container, third.container}
    assert {n for n in running if bwrap.inspect(n).running} == {
        second.container,
        other.container,
        third.container,
    }
    # Every one of main's sandboxes runs a command: a new one is refused, nothing of main's is ended.
    bwrap_mgr.activity(second.container)(1)
    bwrap_mgr.activity(third.container)(1)
    with pytest.raises(
        ToolError, match=r"agent main has 2 sandboxes running commands.*maxSandboxesPerAgent = 2"
    ):
        await prepare_exec(cfg, "main", "agent:main:k4", None, manager=bwrap_mgr)
    assert bwrap.inspect(second.container).running and bwrap.inspect(third.container).running
    # one it has: no new sandbox
    again = await prepare_exec(cfg, "main", "agent:main:k2", None, manager=bwrap_mgr)
    assert again.container == second.container and not again.created


def test_on_a_shared_node_each_gateways_agent_has_its_own_count() -> None:
    """Tried: gateway B's `main` starting sandboxes on a node shared with gateway A until `main`'s cap: A's
    `main`'s idle sandboxes were ended to make room. The count is per owner (namespace + agent)."""
    a, b = "a" * 32 + "/", "b" * 32 + "/"
    rows = [
        _entry("a1", 1, key=a + "agent:main"),
        _entry("b1", 1, key=b + "agent:main"),
        _entry("b2", 2, key=b + "agent:main:s2"),
        _entry("bs", 1, key=b + "shared"),
        _entry("p", 1),  # the anonymous namespace's (a plain key)
    ]
    assert [e.containerName for e in agentcap.owned(rows, b + "main", besides="")] == ["b1", "b2"]
    assert [e.containerName for e in agentcap.owned(rows, a + "main", besides="")] == ["a1"]
    assert [e.containerName for e in agentcap.owned(rows, "main", besides="")] == ["p"]
