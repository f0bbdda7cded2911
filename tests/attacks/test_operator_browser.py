"""The operator's browsing is its own: a `browser` call naming an agent never uses that agent's browser.

An operator's `browser` call names an agent for policy (its sandbox settings, its tool policy), as an
operator's `exec` does. Before, it then drove that agent's own browser: the page the operator opened (a
logged-in page, its cookies, its history) stayed in the agent's profile and tabs for the agent to read,
and what the agent had planted there (its page, its scripts, its cookies) acted on the operator's call.
Now the principal that calls owns the browser it uses (principals.operator_scope, as exec files the
operator's runs under principals.operator_key): the operator's calls use a browser of the operator's own,
which no agent's call can name, list or drive.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from engine.config.loader import load_config_text
from engine.principals import OPERATOR_SCOPE, is_operators, operator_scope, own_key, owns_key
from engine.sandbox import agentcap
from engine.sandbox.browser import browser_layout
from engine.sandbox.registry import RegistryEntry
from engine.sandbox.settings import resolve_settings
from tests.helpers.browser import browser_image, browser_state
from tests.helpers.gateway import connect, gateway

pytestmark = [pytest.mark.docker, pytest.mark.slow]
__all__ = ["browser_image", "browser_state"]  # fixtures


def _page(title: str) -> str:
    return "data:text/html," + quote(f"<!doctype html><title>{title}</title><p id=s>{title}</p>")


PLANTED = _page("planted-by-the-agent")
SECRET = _page("operator-secret-session")
WHERE = {"action": "evaluate", "expression": "document.title + ' ' + history.length"}


async def test_an_operators_browser_call_naming_an_agent_shares_nothing_with_it(browser_state: Path) -> None:
    async with gateway(browser_state):
        op = await connect(browser_state, "console")
        agent = await connect(browser_state, "agent", operator=False)  # agent main
        try:
            # The agent plants a page in its browser first.
            mine = await agent.request("browser", {"action": "navigate", "url": PLANTED})
            agent_browser = mine["details"]["containerName"]

            # (b) The operator's call naming the agent does not land on what the agent planted.
            seen = await op.request("browser", {"agentId": "main", **WHERE})
            assert "planted-by-the-agent" not in seen["text"], seen
            assert seen["details"]["containerName"] != agent_browser

            # (a) What the operator's call leaves (its page, its history) is nowhere the agent can read.
            ops = await op.request("browser", {"agentId": "main", "action": "navigate", "url": SECRET})
            ops_browser = ops["details"]["containerName"]
            assert ops_browser != agent_browser
            # The same with a session key the operator names: still its own, never the agent's session's.
            keyed = await op.request("browser", {"agentId": "main", "sessionKey": "agent:main:main", **WHERE})
            assert keyed["details"]["containerName"] == ops_browser, keyed
            assert "operator-secret-session" in keyed["text"]  # the operator's own browser, kept as left

            after = await agent.request("browser", WHERE)
            assert "operator-secret-session" not in after["text"], after
            assert "planted-by-the-agent" in after["text"]  # its own page, as it left it
            assert after["details"]["containerName"] == agent_browser
            # Nor with every key the agent may name (its own namespace is all it can reach).
            for key in ("operator", f"{OPERATOR_SCOPE}:agent:main", "agent:main:main", "main"):
                other = await agent.request("browser", {"sessionKey": key, **WHERE})
                assert "operator-secret-session" not in other["text"], (key, other)
                assert other["details"]["containerName"] != ops_browser

            # The agent never lists the operator's browser (its page's URL and title are in a row).
            rows = (await agent.request("browser.status", {}))["browsers"]
            assert ops_browser not in {r["containerName"] for r in rows}, rows
            assert all("operator-secret" not in r["title"] + r["url"] for r in rows), rows
            # The operator sees both, its own filed under its scope.
            every = {r["containerName"]: r for r in (await op.request("browser.status", {}))["browsers"]}
            assert every[ops_browser]["sessionKey"].startswith(f"{OPERATOR_SCOPE}:"), every
            assert agent_browser in every
        finally:
            await agent.close()
            await op.close()


@pytest.mark.parametrize("scope", ["agent", "session", "shared"])
@pytest.mark.parametrize("key", ["", "main", "s1", "agent:main:main", "agent:x:s", "operator", "operator:x"])
def test_no_key_an_agent_sends_names_the_operators_browser(scope: str, key: str, state_dir: Path) -> None:
    """Whatever key an agent sends, its browser's scope is never the operator's; the operator's never an
    agent's, whatever agent and key it names, and it counts against no agent's cap."""
    cfg = load_config_text(f'[agents.defaults.sandbox]\nmode = "all"\nscope = "{scope}"\n')
    for agent in ("main", "x", "operator"):
        settings = resolve_settings(cfg, agent)
        theirs = browser_layout(settings, agent, own_key(agent, key) or f"agent:{agent}:main")
        ours = browser_layout(settings, agent, key or f"agent:{agent}:main", operator=True)
        assert not is_operators(theirs.scope_key) and is_operators(ours.scope_key)
        assert ours.name != theirs.name and ours.workspace_dir != theirs.workspace_dir
        assert not any(owns_key(a, ours.scope_key) for a in ("main", "x", "operator"))
        assert operator_scope(ours.scope_key) == ours.scope_key  # idempotent
        entry = RegistryEntry(ours.name, ours.scope_key, 1, 1, "img", agentId=agent)
        assert agentcap.owner_of(entry) is None
