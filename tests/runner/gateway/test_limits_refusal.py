"""limits.refusal, the connection admission rule, as a table: the operator's last slots, each agent's own
share, and the newcomers' share no group of agents past the floor can take (fresh round 18 b)."""

from __future__ import annotations

from runner.gateway import limits

SHARED = limits.MAX_CONNECTIONS - limits.OPERATOR_SLOTS - limits.NEWCOMER_SLOTS


def _agents(**held: int) -> list[tuple[bool, str]]:
    return [(False, agent) for agent, n in held.items() for _ in range(n)]


def test_agents_past_the_floor_share_the_first_slots_and_a_newcomer_still_gets_in() -> None:
    full = _agents(a1=60, a2=60, a3=60, a4=SHARED - 180)
    assert len(full) == SHARED
    assert limits.refusal(False, "a1", full) is not None  # past the floor: the shared slots are gone
    assert limits.refusal(False, "ops", full) is None  # holding none: a newcomers' slot
    with_three = full + _agents(ops=limits.NEWCOMER_FLOOR - 1)
    assert limits.refusal(False, "ops", with_three) is None
    assert limits.refusal(False, "ops", with_three + _agents(ops=1)) is not None  # at the floor


def test_the_newcomers_slots_end_where_the_operators_begin() -> None:
    newcomers = limits.NEWCOMER_SLOTS // limits.NEWCOMER_FLOOR
    taken = _agents(a1=64, a2=64, a3=64, a4=SHARED - 192) + _agents(
        **{f"n{i}": limits.NEWCOMER_FLOOR for i in range(newcomers)}
    )
    assert len(taken) == limits.MAX_CONNECTIONS - limits.OPERATOR_SLOTS
    assert limits.refusal(False, "late", taken) is not None  # holding none, and still the operator's
    operators = [(True, "main")] * (limits.OPERATOR_SLOTS - 1)
    assert limits.refusal(True, "main", taken + operators) is None
    assert limits.refusal(True, "main", taken + operators + [(True, "main")]) is not None


def test_one_agent_never_holds_more_than_its_own() -> None:
    assert limits.refusal(False, "a1", _agents(a1=limits.MAX_PER_AGENT)) is not None
    assert limits.refusal(False, "a1", _agents(a1=limits.MAX_PER_AGENT - 1)) is None
