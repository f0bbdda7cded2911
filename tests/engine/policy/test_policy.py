"""Policy: normalisation, min/max, host targets, the precedence chain, file clamp, elevated, directives."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approvals.decisions import allowed_decisions
from engine.approvals.store import AgentApprovals, PolicyBlock
from engine.config.loader import load_config, load_config_text
from engine.config.model import Config
from engine.modes import (
    max_ask,
    min_security,
    normalize_ask,
    normalize_elevated,
    normalize_host,
    normalize_security,
)
from engine.policy.precedence import (
    SANDBOX_REQUIRED_TEXT,
    EffectivePolicy,
    PolicyError,
    SessionOverrides,
    apply_directive,
    deny_text,
    elevated_unavailable_text,
    requires_approval,
    resolve_policy,
)
from engine.results import ToolError


def cfg(text: str = "") -> Config:
    return load_config_text(text, Path("/cfg/config.toml"))


def file_policy(
    security: str | None = None, ask: str | None = None, ask_fallback: str | None = None
) -> AgentApprovals:
    return AgentApprovals(
        security=security, ask=ask, ask_fallback=ask_fallback, auto_allow_skills=None, allowlist=[]
    )


GATEWAY = '[tools.exec]\nhost = "gateway"\n'


# --------------------------------------------------------------------------- enums


@pytest.mark.parametrize(
    ("fn", "raw", "expected"),
    [
        (normalize_host, " gateway ", None),
        (normalize_host, "NODE", None),
        (normalize_host, "Auto", None),
        (normalize_host, "gateway", "gateway"),
        (normalize_security, "full", "full"),
        (normalize_ask, "on-miss", "on-miss"),
        (normalize_elevated, "on", "on"),
        (normalize_host, "ssh", None),
        (normalize_host, "", None),
        (normalize_host, None, None),
        (normalize_host, 3, None),
        (normalize_security, "FULL", None),
        (normalize_security, " allowlist\t", None),
        (normalize_security, "none", None),
        (normalize_ask, "On-Miss", None),
        (normalize_ask, "maybe", None),
        (normalize_ask, "never", None),
        (normalize_elevated, " ON ", None),
        (normalize_elevated, "yes", None),
    ],
)
def test_normalisation(fn: object, raw: object, expected: str | None) -> None:
    assert fn(raw) == expected  # type: ignore[operator]


def test_min_security_and_max_ask_tables() -> None:
    assert min_security("deny", "full") == "deny"
    assert min_security("full", "allowlist") == "allowlist"
    assert min_security("allowlist", "allowlist") == "allowlist"
    assert min_security("full", "full") == "full"
    assert max_ask("off", "always") == "always"
    assert max_ask("on-miss", "off") == "on-miss"
    assert max_ask("always", "on-miss") == "always"


# --------------------------------------------------------------------------- built-in defaults (seeds)


def test_builtin_defaults_direct_run_when_sandbox_off() -> None:
    p = resolve_policy(cfg(), "main")
    assert (p.host, p.sandboxed, p.direct) == ("sandbox", False, True)
    assert (p.security, p.ask, p.ask_fallback) == ("allowlist", "on-miss", "deny")
    assert p.step("host") is not None and p.step("host").layer == "built-in"  # type: ignore[union-attr]


def test_builtin_gateway_security_is_deny() -> None:
    p = resolve_policy(cfg(GATEWAY), "main")
    assert (p.host, p.security, p.ask, p.ask_fallback) == ("gateway", "deny", "on-miss", "deny")
    assert deny_text(p) == "exec denied: host=gateway security=deny"
    node = resolve_policy(cfg('[tools.exec]\nhost = "node"\n'), "main")
    assert (node.host, node.security) == ("node", "deny")
    assert deny_text(node) == "exec denied: host=node security=deny"


def test_real_sandbox_is_its_own_boundary() -> None:
    p = resolve_policy(cfg(), "main", sandbox_available=True)
    assert (p.host, p.sandboxed, p.direct) == ("sandbox", True, False)
    assert requires_approval(p, analysis_ok=False, allowlist_satisfied=False, durable=False) is False


# --------------------------------------------------------------------------- host targets (§1.4)


def test_auto_resolves_by_sandbox_runtime() -> None:
    c = cfg('[tools.exec]\nhost = "auto"\n')
    assert resolve_policy(c, "main", sandbox_available=True).host == "sandbox"
    p = resolve_policy(c, "main", sandbox_available=False)
    assert p.host == "gateway" and p.configured_host == "auto"


def test_requested_host_rules_and_texts() -> None:
    auto = cfg('[tools.exec]\nhost = "auto"\n')
    assert resolve_policy(auto, "main", {"host": "gateway"}).host == "gateway"
    assert resolve_policy(auto, "main", {"host": "node"}).host == "node"
    assert resolve_policy(auto, "main", {"host": "sandbox"}, sandbox_available=True).host == "sandbox"
    with pytest.raises(PolicyError) as info:
        resolve_policy(auto, "main", {"host": "gateway"}, sandbox_available=True)
    assert str(info.value) == (
        "exec host not allowed (requested gateway; configured host is auto; "
        "set tools.exec.host=gateway to allow this override). This session is sandboxed, and host=auto "
        "keeps a sandboxed session in its sandbox; to let the agent pick its host per call, set host=auto "
        "with sandbox.mode=off for it."
    )
    # Issue 22: the hint names only what really allows the override (it said "node or auto", and auto
    # still refused); following it works.
    with pytest.raises(PolicyError) as info:
        resolve_policy(cfg(GATEWAY), "main", {"host": "node"}, sandbox_available=True)
    assert "set tools.exec.host=node to allow this override)." in str(info.value)
    with pytest.raises(PolicyError):
        resolve_policy(auto, "main", {"host": "node"}, sandbox_available=True)
    node = cfg('[tools.exec]\nhost = "node"\n')
    assert resolve_policy(node, "main", {"host": "node"}, sandbox_available=True).host == "node"
    with pytest.raises(ToolError) as info:
        resolve_policy(cfg(GATEWAY), "main", {"host": "node"})
    assert str(info.value) == (
        "exec host not allowed (requested node; configured host is gateway; "
        "set tools.exec.host=node or auto to allow this override)."
    )
    with pytest.raises(ToolError) as info:
        resolve_policy(cfg('[tools.exec]\nhost = "node"\n'), "main", {"host": "gateway"})
    assert str(info.value) == (
        "exec host not allowed (requested gateway; configured host is node; "
        "set tools.exec.host=gateway or auto to allow this override)."
    )
    # Same as configured is always allowed; an invalid requested host is "not given".
    assert resolve_policy(cfg(GATEWAY), "main", {"host": "GATEWAY"}).host == "gateway"
    assert resolve_policy(cfg(GATEWAY), "main", {"host": "ssh"}).host == "gateway"


def test_builtin_sandbox_rejects_gateway_override() -> None:
    with pytest.raises(PolicyError) as info:
        resolve_policy(cfg(), "main", {"host": "gateway"})
    assert "configured host is sandbox" in str(info.value)
    assert info.value.step.key == "host"


def test_explicit_sandbox_without_runtime_fails_closed() -> None:
    with pytest.raises(PolicyError) as info:
        resolve_policy(cfg('[tools.exec]\nhost = "sandbox"\n'), "main")
    assert str(info.value) == SANDBOX_REQUIRED_TEXT
    assert str(info.value).startswith("exec host=sandbox requires a sandbox runtime for this session.\n")
    with pytest.raises(PolicyError):
        resolve_policy(cfg(), "main", {"host": "sandbox"})
    with pytest.raises(PolicyError):
        resolve_policy(cfg(), "main", overrides=SessionOverrides(host="sandbox"))


# --------------------------------------------------------------------------- precedence (§1.5, §3.2)

LAYERED = """
[tools.exec]
host = "gateway"
security = "full"
ask = "off"
askFallback = "full"

[[agents.list]]
id = "ops"
tools.exec.security = "allowlist"
tools.exec.ask = "on-miss"
"""


def test_global_then_agent_then_session() -> None:
    c = cfg(LAYERED)
    p = resolve_policy(c, "main")
    assert (p.security, p.ask) == ("full", "off")
    assert p.step("security").layer == "config tools.exec"  # type: ignore[union-attr]
    p = resolve_policy(c, "ops")
    assert (p.security, p.ask) == ("allowlist", "on-miss")
    step = p.step("security")
    assert step is not None and step.layer == "config agents.list[ops]"
    assert step.key == "agents.list[0].tools.exec.security"
    p = resolve_policy(c, "ops", overrides=SessionOverrides(security="full", ask="always"))
    assert (p.security, p.ask) == ("full", "always")
    assert p.step("security").layer == "session override (/exec)"  # type: ignore[union-attr]


def test_session_override_may_broaden_config_but_file_clamps() -> None:
    # /exec is the operator's own session setting (reference precedence); the host file still clamps.
    c = cfg(LAYERED)
    p = resolve_policy(
        c, "ops", overrides=SessionOverrides(security="full"), file_policy=file_policy(security="allowlist")
    )
    assert p.security == "allowlist"
    assert p.step("security").layer == "approvals file clamp"  # type: ignore[union-attr]


def test_tool_param_only_tightens_security() -> None:
    c = cfg(LAYERED)
    assert resolve_policy(c, "main", {"security": "allowlist"}).security == "allowlist"
    assert resolve_policy(c, "main", {"security": "deny"}).security == "deny"
    p = resolve_policy(c, "ops", {"security": "full"})
    assert p.security == "allowlist"
    assert any("ignored" in s.layer for s in p.trail)
    assert resolve_policy(c, "ops", {"security": "FULL"}).security == "allowlist"
    assert resolve_policy(c, "main", {"security": "bogus"}).security == "full"


def test_tool_param_only_asks_more() -> None:
    c = cfg(LAYERED)
    p = resolve_policy(c, "main", {"ask": "always"})
    assert p.ask == "always" and p.step("ask").layer == "tool param"  # type: ignore[union-attr]
    assert resolve_policy(c, "ops", {"ask": "off"}).ask == "on-miss"
    assert resolve_policy(c, "ops", {"ask": "always"}).ask == "always"


def test_approvals_file_defaults_fill_unset_config() -> None:
    c = cfg(GATEWAY)
    defaults = PolicyBlock(security="allowlist", ask="always", ask_fallback="allowlist")
    p = resolve_policy(
        c, "main", file_policy=file_policy("allowlist", "always", "allowlist"), file_defaults=defaults
    )
    assert (p.security, p.ask, p.ask_fallback) == ("allowlist", "always", "allowlist")
    assert p.step("security").layer == "approvals file"  # type: ignore[union-attr]
    # Config wins over the file's defaults for the configured value...
    p = resolve_policy(cfg(LAYERED), "main", file_defaults=defaults)
    assert (p.security, p.ask) == ("full", "off")


def test_file_defaults_fallback_then_agent_clamp() -> None:
    # Reference §1.5: the fallback comes from the file's defaults; the clamp uses the agent's resolved view.
    defaults = PolicyBlock(security="full", ask="off")
    agent_view = file_policy(security="allowlist", ask="on-miss")
    p = resolve_policy(cfg(GATEWAY), "main", file_policy=agent_view, file_defaults=defaults)
    assert (p.security, p.ask) == ("allowlist", "on-miss")
    assert [s.layer for s in p.trail if s.layer == "approvals file clamp"] == ["approvals file clamp"] * 2


def test_file_clamp_never_broadens() -> None:
    c = cfg('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n')
    p = resolve_policy(c, "main", file_policy=file_policy("full", "off", "full"))
    assert (p.security, p.ask, p.ask_fallback) == ("allowlist", "on-miss", "deny")
    p = resolve_policy(c, "main", file_policy=file_policy("deny", "always", "deny"))
    assert (p.security, p.ask) == ("deny", "always")


def test_ask_fallback_capped_at_security() -> None:
    c = cfg('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\naskFallback = "full"\n')
    p = resolve_policy(c, "main")
    assert p.ask_fallback == "allowlist"
    assert p.step("askFallback").layer == "askFallback cap"  # type: ignore[union-attr]
    p = resolve_policy(c, "main", {"security": "deny"})
    assert p.ask_fallback == "deny"
    # The file can lower askFallback but never raise it.
    c2 = cfg('[tools.exec]\nhost = "gateway"\nsecurity = "full"\naskFallback = "allowlist"\n')
    raised = resolve_policy(c2, "main", file_policy=file_policy(ask_fallback="full"))
    assert raised.ask_fallback == "allowlist"
    assert resolve_policy(c2, "main", file_policy=file_policy(ask_fallback="deny")).ask_fallback == "deny"


def test_sandboxed_host_skips_file_clamp() -> None:
    p = resolve_policy(cfg(), "main", file_policy=file_policy("deny", "always"), sandbox_available=True)
    assert p.sandboxed and p.security == "full"


def test_node_binding_precedence() -> None:
    c = cfg(
        '[tools.exec]\nhost = "node"\nnode = "global-box"\n[[agents.list]]\nid = "ops"\n'
        'tools.exec.node = "ops-box"\n'
    )
    assert resolve_policy(c, "main").node == "global-box"
    assert resolve_policy(c, "ops").node == "ops-box"
    assert resolve_policy(c, "ops", overrides=SessionOverrides(node="sess-box")).node == "sess-box"
    p = resolve_policy(c, "ops", {"node": " call-box "}, SessionOverrides(node="sess-box"))
    assert p.node == "call-box"


# --------------------------------------------------------------------------- elevated

ELEVATED = (
    '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
    "[tools.elevated]\nenabled = true\n"
)


def test_elevated_full_bypasses_approvals() -> None:
    p = resolve_policy(
        cfg(ELEVATED),
        "main",
        overrides=SessionOverrides(elevated="full"),
        file_policy=file_policy("deny", "always"),
    )
    assert (p.host, p.security, p.ask, p.elevated) == ("gateway", "full", "off", "full")
    assert p.bypass_approvals is True
    assert requires_approval(p, False, False, False) is False


def test_elevated_on_and_param() -> None:
    c = cfg(ELEVATED)
    p = resolve_policy(c, "main", overrides=SessionOverrides(elevated="on"))
    assert (p.host, p.security, p.ask, p.elevated) == ("gateway", "full", "on-miss", "ask")
    assert p.bypass_approvals is False
    # Elevated ask still honours the host file: it may tighten.
    p = resolve_policy(
        c, "main", overrides=SessionOverrides(elevated="ask"), file_policy=file_policy("allowlist")
    )
    assert p.security == "allowlist"
    assert resolve_policy(c, "main", {"elevated": True}).elevated == "ask"
    assert resolve_policy(c, "main", {"elevated": True}, SessionOverrides(elevated="full")).elevated == "full"
    assert resolve_policy(c, "main", {"elevated": False}, SessionOverrides(elevated="full")).elevated == "off"
    # Elevated moves a sandbox-configured agent to the gateway, a node-bound one stays on its node.
    sb = cfg("[tools.elevated]\nenabled = true\n")
    assert resolve_policy(sb, "main", {"elevated": True}, sandbox_available=True).host == "gateway"
    node = cfg('[tools.exec]\nhost = "node"\n[tools.elevated]\nenabled = true\n')
    assert resolve_policy(node, "main", {"elevated": True}).host == "node"


def test_an_agents_own_elevated_moves_only_the_host() -> None:
    """Without the operator's `/elevated`, the agent's per-call `elevated: true` never broadens security
    or loosens ask (OpenClaw's mode ask changes only the host): an allowlist miss still asks."""
    p = resolve_policy(cfg(ELEVATED), "main", {"elevated": True})
    assert (p.host, p.security, p.ask, p.elevated) == ("gateway", "allowlist", "on-miss", "ask")
    assert p.bypass_approvals is False and requires_approval(p, True, False, False) is True
    assert any("agent's own request" in step.layer for step in p.trail)
    off = resolve_policy(cfg(ELEVATED), "main", {"elevated": True}, SessionOverrides(elevated="off"))
    assert off.security == "allowlist"


def test_the_operators_deny_holds_over_elevated() -> None:
    """An explicit security=deny (the operator's `/exec` or the config) wins over any elevation; only the
    built-in default (not a lockdown) is lifted by the operator's `/elevated`."""
    for level in ("on", "full"):
        p = resolve_policy(
            cfg(ELEVATED), "main", {"elevated": True}, SessionOverrides(security="deny", elevated=level)
        )
        assert (p.security, p.bypass_approvals) == ("deny", False)
    locked = cfg('[tools.exec]\nhost = "gateway"\nsecurity = "deny"\n[tools.elevated]\nenabled = true\n')
    p = resolve_policy(locked, "main", overrides=SessionOverrides(elevated="full"))
    assert (p.security, p.bypass_approvals) == ("deny", False)
    builtin = cfg('[tools.exec]\nhost = "gateway"\n[tools.elevated]\nenabled = true\n')
    assert resolve_policy(builtin, "main", overrides=SessionOverrides(elevated="on")).security == "full"


def test_elevated_not_enabled() -> None:
    expected = (
        "elevated is not available right now (runtime=direct).\n"
        "Failing gates: enabled (tools.elevated.enabled / agents.list[].tools.elevated.enabled)\n"
        "Fix-it keys:\n"
        "- tools.elevated.enabled\n"
        "- tools.elevated.allowFrom.<provider>\n"
        "- agents.list[].tools.elevated.enabled\n"
        "- agents.list[].tools.elevated.allowFrom.<provider>"
    )
    with pytest.raises(PolicyError) as info:
        resolve_policy(cfg(GATEWAY), "main", {"elevated": True})
    assert str(info.value) == expected
    assert "Context: session=s1" in elevated_unavailable_text(True, "s1")
    assert "(runtime=sandboxed)" in elevated_unavailable_text(True)
    # A session level with elevated disabled (say, after a config change) simply does not apply.
    p = resolve_policy(cfg(GATEWAY), "main", overrides=SessionOverrides(elevated="full"))
    assert p.elevated == "off" and p.security == "deny"
    # Per-agent enable overrides the global switch, both ways.
    c = cfg(GATEWAY + '[[agents.list]]\nid = "ops"\ntools.elevated.enabled = true\n')
    assert resolve_policy(c, "ops", {"elevated": True}).elevated == "ask"
    with pytest.raises(PolicyError):
        resolve_policy(c, "main", {"elevated": True})


# --------------------------------------------------------------------------- requiresApproval (§3.3)


def _policy(security: str, ask: str) -> EffectivePolicy:
    return EffectivePolicy(
        host="gateway",
        security=security,
        ask=ask,
        ask_fallback="deny",
        node=None,
        elevated="off",
        bypass_approvals=False,
    )


@pytest.mark.parametrize(
    ("security", "ask", "ok", "sat", "durable", "expected"),
    [
        ("full", "off", False, False, False, False),
        ("full", "on-miss", False, False, False, False),
        ("full", "always", True, True, True, True),
        ("allowlist", "always", True, True, True, True),
        ("allowlist", "on-miss", True, True, False, False),
        ("allowlist", "on-miss", True, False, False, True),
        ("allowlist", "on-miss", False, True, False, True),
        ("allowlist", "on-miss", True, False, True, False),
        ("allowlist", "off", True, False, False, False),
        ("deny", "on-miss", True, False, False, False),
    ],
)
def test_requires_approval(
    security: str, ask: str, ok: bool, sat: bool, durable: bool, expected: bool
) -> None:
    assert requires_approval(_policy(security, ask), ok, sat, durable) is expected


def test_allowed_decisions() -> None:
    assert allowed_decisions("always") == ("allow-once", "deny")
    assert allowed_decisions("on-miss") == ("allow-once", "allow-always", "deny")
    assert allowed_decisions("off") == ("allow-once", "allow-always", "deny")


# --------------------------------------------------------------------------- directives


def test_exec_directive_sets_overrides() -> None:
    text = "/exec host=gateway security=allowlist ask=ALWAYS node=box"
    ov, reply = apply_directive(SessionOverrides(), text)
    assert ov == SessionOverrides(host="gateway", security="allowlist", ask="always", node="box")
    assert reply == (
        "Exec defaults set for this session (host=gateway, security=allowlist, ask=always, node=box)."
    )
    ov2, _ = apply_directive(ov, "/exec: ask:on-miss")
    assert ov2.ask == "on-miss" and ov2.host == "gateway"
    ov3, reply = apply_directive(ov2, "/exec reset")
    assert ov3 == SessionOverrides() and reply == "Exec overrides cleared."


def test_exec_directive_bad_values_change_nothing() -> None:
    start = SessionOverrides(host="gateway")
    for text, message in (
        ("/exec host=ssh", 'Unrecognized exec host "ssh". Valid hosts: auto, sandbox, gateway, node.'),
        ("/exec security=none", 'Unrecognized exec security "none". Valid: deny, allowlist, full.'),
        ("/exec ask=never", 'Unrecognized exec ask "never". Valid: off, on-miss, always.'),
        ("/exec node=", "Exec node requires a value."),
    ):
        with pytest.raises(ToolError) as info:
            apply_directive(start, text)
        assert str(info.value) == message
    with pytest.raises(ToolError, match="key=value pairs only"):
        apply_directive(start, "/exec gateway")
    with pytest.raises(ToolError, match='Unrecognized exec option "colour"'):
        apply_directive(start, "/exec colour=red")
    with pytest.raises(ToolError, match="Not a directive"):
        apply_directive(start, "/execute host=gateway")
    # A valid option before a bad one is not applied either.
    with pytest.raises(ToolError):
        apply_directive(start, "/exec ask=always host=bogus")
    assert start == SessionOverrides(host="gateway")


def test_bare_exec_shows_current() -> None:
    _, reply = apply_directive(SessionOverrides(ask="always"), "/exec")
    assert reply.startswith(
        "Current exec defaults: host=(inherit), security=(inherit), ask=always, node=(unset)."
    )
    policy = resolve_policy(cfg(GATEWAY), "main")
    _, reply = apply_directive(SessionOverrides(), "  /EXEC  ", current=policy)
    assert reply.splitlines()[0] == (
        "Current exec defaults: host=gateway, security=deny, ask=on-miss, node=(unset)."
    )
    assert "Options: host=auto|sandbox|gateway|node" in reply


def test_elevated_directive() -> None:
    ov, reply = apply_directive(SessionOverrides(), "/elevated full", elevated_enabled=True)
    assert ov.elevated == "full" and reply == "Elevated FULL - exec runs on host with auto-approval."
    ov, reply = apply_directive(ov, "/elevated off", elevated_enabled=False)
    assert ov.elevated == "off" and reply == "Elevated OFF - exec stays in sandbox."
    _, reply = apply_directive(SessionOverrides(elevated="ask"), "/elevated")
    assert reply == "Current elevated level: ask.\nOptions: on, off, ask, full."
    with pytest.raises(ToolError) as info:
        apply_directive(SessionOverrides(), "/elevated sudo", elevated_enabled=True)
    assert str(info.value) == 'Unrecognized elevated level "sudo". Valid levels: off, on, ask, full.'
    with pytest.raises(ToolError) as info:
        apply_directive(SessionOverrides(), "/elevated on", elevated_enabled=False, session_key="s9")
    assert str(info.value).startswith("elevated is not available right now (runtime=direct).")
    assert "Context: session=s9" in str(info.value)


def test_session_overrides_feed_resolution_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[tools.exec]\nhost = "auto"\n[tools.elevated]\nenabled = true\n')
    c = load_config(path)
    ov, _ = apply_directive(SessionOverrides(), "/exec host=gateway security=allowlist ask=always")
    p = resolve_policy(c, "main", overrides=ov)
    assert (p.host, p.security, p.ask) == ("gateway", "allowlist", "always")
    ov, _ = apply_directive(ov, "/elevated full", elevated_enabled=c.elevated_enabled_for("main"))
    p = resolve_policy(c, "main", overrides=ov)
    assert (p.security, p.ask, p.bypass_approvals) == ("full", "off", True)
