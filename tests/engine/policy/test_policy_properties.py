"""Property tests: a per-call value never broadens and the host approvals file never loosens."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.approvals.store import AgentApprovals
from engine.config.loader import load_config_text
from engine.modes import ASKS, SECURITIES, max_ask, min_security
from engine.policy.precedence import PolicyError, SessionOverrides, resolve_policy

_ORDER = {"deny": 0, "allowlist": 1, "full": 2}
_ASK = {"off": 0, "on-miss": 1, "always": 2}
maybe_sec = st.none() | st.sampled_from(SECURITIES)
maybe_ask = st.none() | st.sampled_from(ASKS)
maybe_host = st.none() | st.sampled_from(("auto", "sandbox", "gateway", "node"))
junk = st.sampled_from(["FULL", " full ", "none", "", "ALWAYS", "never", "Gateway", "ssh"])


def _toml(host: str | None, security: str | None, ask: str | None, fallback: str | None) -> str:
    lines = ["[tools.exec]"]
    for key, value in (("host", host), ("security", security), ("ask", ask), ("askFallback", fallback)):
        if value is not None:
            lines.append(f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(
    host=maybe_host,
    security=maybe_sec,
    ask=maybe_ask,
    fallback=maybe_sec,
    session=st.builds(SessionOverrides, host=st.none(), security=maybe_sec, ask=maybe_ask),
    file_sec=maybe_sec,
    file_ask=maybe_ask,
    file_fb=maybe_sec,
    param_sec=maybe_sec | junk,
    param_ask=maybe_ask | junk,
    sandbox=st.booleans(),
)
def test_params_only_tighten_and_file_never_broadens(
    host: str | None,
    security: str | None,
    ask: str | None,
    fallback: str | None,
    session: SessionOverrides,
    file_sec: str | None,
    file_ask: str | None,
    file_fb: str | None,
    param_sec: str | None,
    param_ask: str | None,
    sandbox: bool,
) -> None:
    config = load_config_text(_toml(host, security, ask, fallback), Path("/c.toml"))
    file_policy = AgentApprovals(
        security=file_sec, ask=file_ask, ask_fallback=file_fb, auto_allow_skills=None, allowlist=[]
    )
    params = {"security": param_sec, "ask": param_ask}
    try:
        without = resolve_policy(config, "main", {}, session, file_policy, sandbox)
        got = resolve_policy(config, "main", params, session, file_policy, sandbox)
    except PolicyError:
        return
    assert got.host == without.host
    # A per-call value only tightens / asks more than the same call without it.
    assert _ORDER[got.security] <= _ORDER[without.security]
    assert _ASK[got.ask] >= _ASK[without.ask]
    # askFallback never exceeds the effective security.
    assert _ORDER[got.ask_fallback] <= _ORDER[got.security]
    if not got.sandboxed:
        # The host approvals file is an upper bound on security and a lower bound on ask.
        if file_sec is not None:
            assert got.security == min_security(got.security, file_sec)
        if file_ask is not None:
            assert got.ask == max_ask(got.ask, file_ask)
        if file_fb is not None:
            assert _ORDER[got.ask_fallback] <= _ORDER[file_fb]
    # Every value is explained by a step of the trail.
    final = {"host": got.host, "security": got.security, "ask": got.ask, "askFallback": got.ask_fallback}
    for key, value in final.items():
        step = got.step(key)
        assert step is not None and step.value == value, (key, got.trail)
