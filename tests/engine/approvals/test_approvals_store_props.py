"""Property tests: normalising any v1 file either fails cleanly or is stable under a save/load cycle."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.approvals.store import ApprovalsFileError, normalize_approvals, parse_approvals

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
enum_like = st.one_of(
    st.sampled_from(["deny", "allowlist", "full", "off", "on-miss", "always", " FULL ", "none", ""]), junk
)
pattern = st.one_of(st.sampled_from(["/bin/ls", "/BIN/LS", "git", " ", "=command:0123456789abcdef"]), junk)
entry = st.one_of(
    pattern,
    st.fixed_dictionaries(
        {"pattern": pattern},
        optional={
            "id": st.one_of(st.sampled_from(["a", "b", ""]), junk),
            "argPattern": st.one_of(st.sampled_from(["^x", "(", " "]), junk),
            "source": st.one_of(st.just("allow-always"), junk),
            "lastUsedAt": junk,
            "lastUsedCommand": junk,
            "commandText": junk,
            "other": junk,
        },
    ),
    junk,
)
block = st.fixed_dictionaries(
    {},
    optional={
        "security": enum_like,
        "ask": enum_like,
        "askFallback": enum_like,
        "autoAllowSkills": st.one_of(st.booleans(), junk),
        "allowlist": st.lists(entry, max_size=5),
        "extra": junk,
    },
)
files = st.fixed_dictionaries(
    {"version": st.just(1)},
    optional={
        "socket": st.fixed_dictionaries(
            {}, optional={"path": st.text(max_size=8), "token": st.text(max_size=8)}
        ),
        "defaults": block,
        "agents": st.dictionaries(st.sampled_from(["main", "default", "*", "ops", ""]), block, max_size=4),
        "note": junk,
    },
)


@settings(max_examples=300, deadline=None)
@given(files)
def test_normalisation_is_idempotent_and_well_formed(raw: dict[str, Any]) -> None:
    first = normalize_approvals(raw, "f.json")
    saved = first.to_json()
    second = parse_approvals(json.dumps(saved), "f.json")
    assert second.to_json() == saved
    assert "default" not in first.agents
    ids = [e.id for b in first.agents.values() for e in b.allowlist]
    assert all(ids) and len(ids) == len(set(ids))
    for agent_id, b in first.agents.items():
        keys = [e.key for e in b.allowlist]
        assert len(keys) == len(set(keys))
        assert all(e.pattern and e.pattern == e.pattern.strip() for e in b.allowlist)
        view = first.agent(agent_id or "main")
        assert view.security in (None, "deny", "allowlist", "full")
        assert view.ask in (None, "off", "on-miss", "always")
        assert view.ask_fallback in (None, "deny", "allowlist", "full")
        assert view.auto_allow_skills in (None, True, False)


@settings(max_examples=300, deadline=None)
@given(junk)
def test_arbitrary_json_never_crashes(raw: Any) -> None:
    for candidate in (raw, {"version": 1, "agents": raw}, {"version": 1, "defaults": raw, "socket": raw}):
        try:
            parse_approvals(json.dumps(candidate), "f.json")
        except ApprovalsFileError as exc:
            assert exc.path == "f.json" and exc.reason
