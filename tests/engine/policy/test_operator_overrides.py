"""precedence.operator_overrides: the operator's own call (naming no agent) meets only keys of the
operator's scope, which no agent can write; an agent's keys, whoever set them, are that agent's only."""

from __future__ import annotations

from engine.policy.precedence import SessionOverrides, operator_overrides, overrides_for
from engine.principals import own_key

DENY = SessionOverrides(security="deny")
ALWAYS = SessionOverrides(ask="always")


def test_agent_mains_keys_never_reach_the_operators_own_call() -> None:
    table = {"agent:main": DENY, "agent:main:main": DENY}
    for key in ("", "main", "MAIN", "agent:main:main", "agent:main", "s1"):
        assert operator_overrides(table, key) is None, key
        assert overrides_for(table, "main", key) is not None  # agent main's own calls: locked down


def test_the_operators_own_keys_apply_field_by_field() -> None:
    table = {"operator": DENY, "operator:agent:main:s1": ALWAYS, "own": ALWAYS}
    assert operator_overrides(table, "") == DENY
    mine = operator_overrides(table, "agent:main:s1")
    assert mine is not None and (mine.security, mine.ask) == ("deny", "always")
    own = operator_overrides(table, "own")
    assert own is not None and (own.security, own.ask) == ("deny", "always")


def test_no_key_an_agent_can_name_is_the_operators() -> None:
    for key in ("operator", "operator:x", "own", "", "agent:ops:s"):
        assert own_key("main", key).startswith("agent:main") or own_key("main", key) == ""
