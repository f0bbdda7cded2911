"""Exec policy: enum normalisation, the precedence chain with its explanation trail, /exec and /elevated."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine.modes import (
    max_ask,
    min_security,
    normalize_ask,
    normalize_elevated,
    normalize_host,
    normalize_security,
)
from engine.principals import OPERATOR_SCOPE, canonical_session, operator_key
from engine.results import ToolError

if TYPE_CHECKING:
    from engine.config.model import Config

# Layer names, as the trail and `policy check` print them.
LAYER_PARAM = "tool param"
LAYER_SESSION = "session override (/exec)"
LAYER_GLOBAL = "config tools.exec"
LAYER_FILE = "approvals file"
LAYER_BUILTIN = "built-in"
LAYER_ELEVATED = "elevated"
LAYER_CLAMP = "approvals file clamp"
LAYER_CAP = "askFallback cap"


@dataclass
class SessionOverrides:
    """Per-session values set by `/exec` and `/elevated`; never written to config."""

    host: str | None = None
    security: str | None = None
    ask: str | None = None
    node: str | None = None
    elevated: str | None = None  # off | on | ask | full

    def over(self, base: SessionOverrides | None) -> SessionOverrides:
        """These values on top of `base`'s (an agent-wide override under a session's own)."""
        if base is None:
            return self
        return SessionOverrides(
            **{k: v if v is not None else getattr(base, k) for k, v in vars(self).items()}
        )


def overrides_for(
    table: Mapping[str, SessionOverrides], agent_id: str, session_key: str
) -> SessionOverrides | None:
    """What applies to one call: `/exec` set on `agent:<id>` covers every call of that agent (CLI and
    MCP calls without a session too); a session's own override wins field by field."""
    agent_wide = table.get(f"agent:{agent_id}")
    session_key = canonical_session(agent_id, session_key)  # (every spelling of main is main's)
    own = table.get(session_key) if session_key and session_key != f"agent:{agent_id}" else None
    if own is None:
        return agent_wide
    return own.over(agent_wide)


def operator_overrides(table: Mapping[str, SessionOverrides], session_key: str) -> SessionOverrides | None:
    """What applies to the operator's own call (naming no agent: it runs under main's configured policy
    for want of one of its own). Only keys of the operator's own scope, `operator` for every such call and
    operator_key(its session key) on top, field by field: keys no agent can set (an agent's keys are all
    `agent:<self>…`, principals.own_key), so agent main's self-tightening `/exec security=deny` on
    `agent:main` or its main session stays its own (fresh round 18 b), and the operator's lockdown of
    agent main never refuses the operator."""
    wide = table.get(OPERATOR_SCOPE)
    key = operator_key(session_key)
    own = table.get(key) if key != OPERATOR_SCOPE else None
    if own is None:
        return wide
    return own.over(wide)


@dataclass
class PolicyStep:
    """One link of the explanation: which layer and key set a value."""

    layer: str
    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.layer}: {self.key} = {self.value}"

    def to_json(self) -> dict[str, str]:
        return {"layer": self.layer, "key": self.key, "value": self.value}


@dataclass
class EffectivePolicy:
    host: str  # effective host: sandbox | gateway | node
    security: str
    ask: str
    ask_fallback: str
    node: str | None
    elevated: str  # off | ask | full (the mode in force for this call)
    bypass_approvals: bool
    trail: list[PolicyStep] = field(default_factory=list)
    configured_host: str = "sandbox"
    requested_host: str | None = None
    sandboxed: bool = False  # host=sandbox with a sandbox runtime: the container is the boundary

    @property
    def direct(self) -> bool:
        """host=sandbox without a sandbox runtime: runs on the gateway machine (seed behaviour)."""
        return self.host == "sandbox" and not self.sandboxed

    def step(self, key: str) -> PolicyStep | None:
        """The last step that set `key` ("host", "security", "ask", "askFallback", "node")."""
        for step in reversed(self.trail):
            if _step_field(step) == key:
                return step
        return None


def _step_field(step: PolicyStep) -> str:
    tail = step.key.rsplit(".", 1)[-1].split()[-1]
    return tail.split("=")[0]


def target_allowed(configured: str, requested: str, sandbox_available: bool) -> bool:
    if requested == configured:
        return True
    if configured == "auto":
        return not (sandbox_available and requested in ("gateway", "node"))
    return False


def host_not_allowed_text(configured: str, requested: str, sandbox_available: bool) -> str:
    """Only hosts that really allow the override are named (`target_allowed` is the truth): auto never
    lets a sandboxed session out to the gateway or a node, so it is not offered there."""
    allowed = [h for h in (requested, "auto") if target_allowed(h, requested, sandbox_available)]
    options = " or ".join(dict.fromkeys(allowed))
    text = (
        f"exec host not allowed (requested {requested}; configured host is {configured}; "
        f"set tools.exec.host={options} to allow this override)."
    )
    if sandbox_available and requested in ("gateway", "node"):
        text += (
            " This session is sandboxed, and host=auto keeps a sandboxed session in its sandbox; "
            "to let the agent pick its host per call, set host=auto with sandbox.mode=off for it."
        )
    return text


def _named_node(params: Mapping[str, Any]) -> str | None:
    value = params.get("node")
    return value.strip() if isinstance(value, str) and value.strip() else None


def _sandboxes(configured: str, sandbox_available: bool) -> bool:
    """The configured host keeps this session in a sandbox (where a call's node= places that sandbox)."""
    return sandbox_available and configured in ("sandbox", "auto")


def node_not_allowed_text(node: str, host_step: PolicyStep, sandbox_available: bool) -> str:
    """A call named a node the configured host never runs on: say which setting, and its values that would."""
    hosts = [h for h in ("auto", "node") if target_allowed(h, "node", sandbox_available)]
    if host_step.layer == LAYER_SESSION:
        fix = " or ".join(f"/exec host={h}" for h in hosts)
    else:
        fix = f"{host_step.key} = " + " or ".join(f'"{h}"' for h in hosts)
    where = "built-in default" if host_step.layer == LAYER_BUILTIN else host_step.layer
    return (
        f'exec host not allowed for node={node}: {host_step.key} is "{host_step.value}" ({where}), which '
        f"runs nothing on a node; set {fix} to run a call that names a node there. Nothing ran."
    )


SANDBOX_REQUIRED_TEXT = (
    "exec host=sandbox requires a sandbox runtime for this session.\n"
    'Enable sandbox mode (`agents.defaults.sandbox.mode="non-main"` or `"all"`) '
    "or use host=auto/gateway/node."
)


def elevated_unavailable_text(
    sandboxed: bool, session_key: str | None = None, provider: str | None = None
) -> str:
    context = [
        p
        for p in (f"provider={provider}" if provider else "", f"session={session_key}" if session_key else "")
        if p
    ]
    lines = [
        f"elevated is not available right now (runtime={'sandboxed' if sandboxed else 'direct'}).",
        "Failing gates: enabled (tools.elevated.enabled / agents.list[].tools.elevated.enabled)",
        f"Context: {' '.join(context)}" if context else "",
        "Fix-it keys:",
        "- tools.elevated.enabled",
        "- tools.elevated.allowFrom.<provider>",
        "- agents.list[].tools.elevated.enabled",
        "- agents.list[].tools.elevated.allowFrom.<provider>",
    ]
    return "\n".join(line for line in lines if line)


class PolicyError(ToolError):
    """A call the policy refuses outright (reference texts); `step` names the layer and key at fault."""

    def __init__(self, message: str, step: PolicyStep) -> None:
        super().__init__(message)
        self.step = step


def deny_text(policy: EffectivePolicy) -> str:
    return f"exec denied: host={policy.host} security=deny"


def _param_may_only(
    trail: list[PolicyStep],
    key: str,
    current: str,
    requested: str | None,
    combine: Callable[[str, str], str],
    direction: str,
) -> str:
    """A tool param moves `key` only in `direction` (`combine` picks the stricter); a try the other
    way is recorded as ignored, so the explanation shows it was seen."""
    if requested is None:
        return current
    value = combine(current, requested)
    if value != current:
        trail.append(PolicyStep(LAYER_PARAM, key, value))
    elif requested != current:
        trail.append(PolicyStep(f"{LAYER_PARAM} (ignored: may only {direction})", key, current))
    return value


def resolve_policy(
    config: Config,
    agent_id: str = "main",
    params: dict[str, Any] | None = None,
    overrides: SessionOverrides | None = None,
    file_policy: Any | None = None,
    sandbox_available: bool = False,
    *,
    file_defaults: Any | None = None,
    session_key: str | None = None,
) -> EffectivePolicy:
    """Resolve host/security/ask/askFallback/node for one call, recording which layer set each.

    Chain: tool param → session override (/exec) → agent → global → approvals-file defaults → built-in.
    A per-call security only tightens and a per-call ask only asks more; the host approvals file
    clamps again and never broadens; askFallback is capped at the effective security.
    Raises PolicyError (a ToolError) with the reference texts for a disallowed host, a missing sandbox runtime
    or an elevated request while elevated is not enabled.

    Each step decides one thing, in this order: elevated, host, security and ask, the file's clamp, node.
    Elevation broadens security (and, at full, skips approvals) only when the operator's `/elevated`
    granted it, and never past an explicit `security=deny` (the operator's lockdown is applied last).
    """
    params = params or {}
    ov = overrides or SessionOverrides()
    layers = _Layers(
        config, config.agents.get(agent_id), file_defaults if file_defaults is not None else file_policy
    )
    trail: list[PolicyStep] = []
    mode, session_level = _elevated_mode(config, agent_id, ov, params, sandbox_available, session_key)
    host, route = _host(layers, ov, params, mode, session_level, sandbox_available, trail)
    sandboxed = host == "sandbox" and sandbox_available
    security, ask, ask_fallback, bypass = _security_and_ask(
        layers, ov, params, host, sandboxed, mode, session_level, trail
    )
    if not sandboxed and not bypass and file_policy is not None:
        security, ask, ask_fallback = _file_clamp(file_policy, security, ask, ask_fallback, trail)
    if min_security(ask_fallback, security) != ask_fallback:
        ask_fallback = security
        trail.append(PolicyStep(LAYER_CAP, "askFallback", ask_fallback))
    return EffectivePolicy(
        host=host,
        security=security,
        ask=ask,
        ask_fallback=ask_fallback,
        node=_node_binding(layers, ov, route.named, host, trail),
        elevated=mode,
        bypass_approvals=bypass,
        trail=trail,
        configured_host=route.configured,
        requested_host=route.requested,
        sandboxed=sandboxed,
    )


class _Layers:
    """Where a setting comes from below the call: the session's /exec, the agent's and the global config,
    then the approvals file's defaults."""

    def __init__(self, config: Config, agent: Any, file_policy: Any) -> None:
        self.config, self.agent, self.file_policy = config, agent, file_policy

    def layered(self, attr: str, camel: str, session_value: str | None) -> PolicyStep | None:
        if session_value is not None:
            return PolicyStep(LAYER_SESSION, f"/exec {camel}", session_value)
        agent = self.agent
        if agent is not None and agent.exec.get(attr) is not None:
            return PolicyStep(
                f"config agents.list[{agent.id}]",
                f"agents.list[{agent.index}].tools.exec.{camel}",
                str(agent.exec[attr]),
            )
        value = getattr(self.config.exec, attr)
        if value is not None:
            return PolicyStep(LAYER_GLOBAL, f"tools.exec.{camel}", str(value))
        return None

    def from_file(self, attr: str, camel: str, sandboxed: bool) -> PolicyStep | None:
        # The approvals file governs host exec; a real sandbox container is outside its reach.
        if self.file_policy is None or sandboxed:
            return None
        raw = getattr(self.file_policy, attr, None)
        value = normalize_ask(raw) if attr == "ask" else normalize_security(raw)
        return PolicyStep(LAYER_FILE, f"exec-approvals.json {camel}", value) if value else None


def _elevated_mode(
    config: Config,
    agent_id: str,
    ov: SessionOverrides,
    params: Mapping[str, Any],
    sandbox_available: bool,
    session_key: str | None,
) -> tuple[str, str | None]:
    """Elevated (reference §1.5 step 2): the per-call flag, else the session's /elevated level; with the
    session's level, for the trail."""
    enabled = config.elevated_enabled_for(agent_id)
    session_level = normalize_elevated(ov.elevated)
    param_elevated = params.get("elevated")
    if isinstance(param_elevated, bool):
        mode = ("full" if session_level == "full" else "ask") if param_elevated else "off"
        if mode != "off" and not enabled:
            raise PolicyError(
                elevated_unavailable_text(sandbox_available, session_key),
                PolicyStep(LAYER_ELEVATED, "tools.elevated.enabled", "false"),
            )
    else:
        mode = {"on": "ask", "ask": "ask", "full": "full"}.get(session_level or "off", "off")
        if not enabled:
            mode = "off"
    return mode, session_level


@dataclass
class _Route:
    configured: str  # the host the layers set
    requested: str | None  # the host the call asked for (a named node asks for node)
    named: str | None  # the node the call named


def _host(
    layers: _Layers,
    ov: SessionOverrides,
    params: Mapping[str, Any],
    mode: str,
    session_level: str | None,
    sandbox_available: bool,
    trail: list[PolicyStep],
) -> tuple[str, _Route]:
    """Where the command runs (reference §1.4), and how the call chose it."""
    host_step = layers.layered("host", "host", normalize_host(ov.host))
    if host_step is None:
        host_step = PolicyStep(LAYER_BUILTIN, "tools.exec.host", "sandbox")
    configured = host_step.value
    requested = normalize_host(params.get("host"))
    named = _named_node(params)
    if named is not None and requested == "auto":
        requested = None  # auto picks the named node, when the configured host lets a call pick
    if named is not None and requested is None and not _sandboxes(configured, sandbox_available):
        # A call that names a node runs on that node or not at all: an operator approving "node build"
        # must never have it run here. (A sandboxed session's node= puts its sandbox on that node.)
        if not target_allowed(configured, "node", sandbox_available):
            raise PolicyError(node_not_allowed_text(named, host_step, sandbox_available), host_step)
        requested = "node"
        host_step = PolicyStep(LAYER_PARAM, f"node={named} host", "node")
    elif requested is not None:
        if not target_allowed(configured, requested, sandbox_available):
            raise PolicyError(
                host_not_allowed_text(configured, requested, sandbox_available),
                PolicyStep(LAYER_PARAM, "host", requested),
            )
        host_step = PolicyStep(LAYER_PARAM, "host", requested)
    if named is not None and requested not in (None, "node", "sandbox"):
        raise PolicyError(
            f"exec host={requested} cannot run on node={named}: ask for host=node, or name no node to run "
            "here. Nothing ran.",
            PolicyStep(LAYER_PARAM, "host", requested),
        )
    trail.append(host_step)
    selected = requested or configured
    if mode != "off":
        selected = "node" if selected == "node" else "gateway"
        trail.append(PolicyStep(LAYER_ELEVATED, f"/elevated {session_level or 'on'} host", selected))
    host = selected
    if selected == "auto":
        host = "sandbox" if sandbox_available else "gateway"
        why = "sandbox runtime available" if sandbox_available else "no sandbox runtime"
        trail.append(PolicyStep(f"host=auto ({why})", "host", host))
    if host == "sandbox" and not sandbox_available and host_step.layer != LAYER_BUILTIN:
        raise PolicyError(SANDBOX_REQUIRED_TEXT, host_step)
    return host, _Route(configured, requested, named)


def _security_and_ask(
    layers: _Layers,
    ov: SessionOverrides,
    params: Mapping[str, Any],
    host: str,
    sandboxed: bool,
    mode: str,
    session_level: str | None,
    trail: list[PolicyStep],
) -> tuple[str, str, str, bool]:
    """security, ask, askFallback and whether approvals are bypassed: a call may only tighten; elevation
    raises security only as the operator granted it, and never past the operator's deny."""
    sec_step = layers.layered("security", "security", normalize_security(ov.security)) or layers.from_file(
        "security", "security", sandboxed
    )
    if sec_step is None:
        # Seeds: gateway and node default to deny. A real sandbox is its own boundary; the seed's
        # direct run (host=sandbox, sandbox mode off) is gated like any host exec, asking on a miss.
        builtin = "full" if sandboxed else ("allowlist" if host == "sandbox" else "deny")
        sec_step = PolicyStep(LAYER_BUILTIN, "tools.exec.security", builtin)
    trail.append(sec_step)
    security = _param_may_only(
        trail, "security", sec_step.value, normalize_security(params.get("security")), min_security, "tighten"
    )

    ask_step = layers.layered("ask", "ask", normalize_ask(ov.ask)) or layers.from_file(
        "ask", "ask", sandboxed
    )
    if ask_step is None:
        ask_step = PolicyStep(LAYER_BUILTIN, "tools.exec.ask", "on-miss")
    trail.append(ask_step)
    ask = _param_may_only(trail, "ask", ask_step.value, normalize_ask(params.get("ask")), max_ask, "ask more")

    bypass = _elevate(mode, session_level, sec_step, trail)
    if bypass is not None:
        security = "full"
        if bypass:
            ask = "off"

    fb_step = layers.layered("ask_fallback", "askFallback", None) or layers.from_file(
        "ask_fallback", "askFallback", sandboxed
    )
    if fb_step is None:
        fb_step = PolicyStep(LAYER_BUILTIN, "tools.exec.askFallback", "deny")
    trail.append(fb_step)
    return security, ask, fb_step.value, bool(bypass)


def _elevate(
    mode: str, session_level: str | None, sec_step: PolicyStep, trail: list[PolicyStep]
) -> bool | None:
    """What elevation does to security and ask: None leaves both as the layers set them; False raises
    security to full; True also turns ask off (approvals bypassed).

    The agent's own per-call `elevated: true` is a request for the host only (OpenClaw's mode ask): it
    never broadens security or loosens ask. Only the operator's `/elevated on|ask|full` on the session
    does, and an explicit `security=deny` (the operator's `/exec` or config) still wins over it: the
    requested effect first, the operator's clamp last, on this one path."""
    if mode == "off":
        return None
    if session_level in (None, "off"):
        trail.append(
            PolicyStep(f"{LAYER_ELEVATED} (agent's own request: host only)", "security", sec_step.value)
        )
        return None
    if sec_step.value == "deny" and sec_step.layer != LAYER_BUILTIN:
        trail.append(
            PolicyStep(f"{LAYER_ELEVATED} (ignored: {sec_step.key} = deny holds)", "security", "deny")
        )
        return None
    trail.append(PolicyStep(LAYER_ELEVATED, f"/elevated {session_level} security", "full"))
    if mode == "full":
        trail.append(PolicyStep(LAYER_ELEVATED, "/elevated full ask", "off"))
        return True
    return False


def _file_clamp(
    file_policy: Any, security: str, ask: str, ask_fallback: str, trail: list[PolicyStep]
) -> tuple[str, str, str]:
    """The host approvals file's clamp (reference §1.5 step 3): it may tighten, never broaden."""
    file_security = normalize_security(getattr(file_policy, "security", None))
    if file_security is not None and min_security(security, file_security) != security:
        security = file_security
        trail.append(PolicyStep(LAYER_CLAMP, "exec-approvals.json security", security))
    file_ask = normalize_ask(getattr(file_policy, "ask", None))
    if file_ask is not None and max_ask(ask, file_ask) != ask:
        ask = file_ask
        trail.append(PolicyStep(LAYER_CLAMP, "exec-approvals.json ask", ask))
    file_fb = normalize_security(getattr(file_policy, "ask_fallback", None))
    if file_fb is not None and min_security(ask_fallback, file_fb) != ask_fallback:
        ask_fallback = file_fb
        trail.append(PolicyStep(LAYER_CLAMP, "exec-approvals.json askFallback", ask_fallback))
    return security, ask, ask_fallback


def _node_binding(
    layers: _Layers, ov: SessionOverrides, named: str | None, host: str, trail: list[PolicyStep]
) -> str | None:
    """Per-call, session, agent, global. Only a node run (or a sandbox on a node) has one: a bound
    tools.exec.node must not label a gateway run "Node: build"."""
    if named is not None:
        trail.append(PolicyStep(LAYER_PARAM, "node", named))
        return named
    if host != "node":
        return None
    node_step = layers.layered("node", "node", ov.node.strip() if ov.node and ov.node.strip() else None)
    if node_step is None:
        return None
    trail.append(node_step)
    return node_step.value


def requires_approval(
    policy: EffectivePolicy, analysis_ok: bool, allowlist_satisfied: bool, durable: bool
) -> bool:
    """Reference §3.3: ask=always always asks; on-miss asks on an allowlist miss without durable trust."""
    if policy.bypass_approvals or policy.sandboxed:
        return False
    if policy.ask == "always":
        return True
    return (
        policy.ask == "on-miss"
        and policy.security == "allowlist"
        and not durable
        and (not analysis_ok or not allowlist_satisfied)
    )


# --------------------------------------------------------------------------- directives

_DIRECTIVE = re.compile(r"^\s*/(exec|elevated)(?=$|\s|:)(.*)$", re.IGNORECASE | re.DOTALL)
EXEC_OPTIONS = (
    "host=auto|sandbox|gateway|node, security=deny|allowlist|full, ask=off|on-miss|always, node=<id>"
)
_ELEVATED_EVENTS = {
    "full": "Elevated FULL - exec runs on host with auto-approval.",
    "ask": "Elevated ASK - exec runs on host; approvals may still apply.",
    "on": "Elevated ASK - exec runs on host; approvals may still apply.",
    "off": "Elevated OFF - exec stays in sandbox.",
}


def apply_directive(
    overrides: SessionOverrides,
    text: str,
    *,
    current: EffectivePolicy | None = None,
    elevated_enabled: bool | None = None,
    sandboxed: bool = False,
    session_key: str | None = None,
) -> tuple[SessionOverrides, str]:
    """Apply `/exec key=value…` or `/elevated <level>` to session overrides; return them and a reply.

    Bare `/exec` or `/elevated` reports the current values. Bad input raises ToolError with a clear
    message and changes nothing. `/exec reset` clears the session's exec overrides.
    """
    m = _DIRECTIVE.match(text)
    if m is None:
        raise ToolError("Not a directive. Use /exec key=value … or /elevated on|off|ask|full.")
    name, rest = m.group(1).lower(), m.group(2).strip()
    if rest.startswith(":"):
        rest = rest[1:].strip()
    tokens = rest.split()
    if name == "elevated":
        return _apply_elevated(overrides, tokens, elevated_enabled, sandboxed, session_key)
    if not tokens:
        return overrides, _current_exec_text(overrides, current)
    if [t.lower() for t in tokens] == ["reset"]:
        return replace(overrides, host=None, security=None, ask=None, node=None), "Exec overrides cleared."
    changes: dict[str, str] = {}
    for token in tokens:
        key, sep, value = _split_option(token)
        if not sep:
            raise ToolError(f"This /exec implementation accepts key=value pairs only. Use: {EXEC_OPTIONS}.")
        if key == "host":
            host = normalize_host(value.lower())  # typed by the operator: case is forgiven here
            if host is None:
                raise ToolError(
                    f'Unrecognized exec host "{value}". Valid hosts: auto, sandbox, gateway, node.'
                )
            changes["host"] = host
        elif key == "security":
            security = normalize_security(value.lower())  # typed by the operator: case is forgiven here
            if security is None:
                raise ToolError(f'Unrecognized exec security "{value}". Valid: deny, allowlist, full.')
            changes["security"] = security
        elif key == "ask":
            ask = normalize_ask(value.lower())  # typed by the operator: case is forgiven here
            if ask is None:
                raise ToolError(f'Unrecognized exec ask "{value}". Valid: off, on-miss, always.')
            changes["ask"] = ask
        elif key == "node":
            if not value:
                raise ToolError("Exec node requires a value.")
            changes["node"] = value
        else:
            raise ToolError(f'Unrecognized exec option "{key}". Use: {EXEC_OPTIONS}.')
    updated = replace(overrides, **changes)
    summary = ", ".join(f"{k}={v}" for k, v in changes.items())
    return updated, f"Exec defaults set for this session ({summary})."


def _split_option(token: str) -> tuple[str, bool, str]:
    positions = [p for p in (token.find("="), token.find(":")) if p != -1]
    if not positions:
        return token.lower(), False, ""
    idx = min(positions)
    return token[:idx].strip().lower(), True, token[idx + 1 :].strip()


def _current_exec_text(overrides: SessionOverrides, current: EffectivePolicy | None) -> str:
    if current is not None:
        host, security, ask, node = current.host, current.security, current.ask, current.node
    else:
        host, security, ask, node = (
            overrides.host or "(inherit)",
            overrides.security or "(inherit)",
            overrides.ask or "(inherit)",
            overrides.node,
        )
    node_label = f"node={node}" if node else "node=(unset)"
    return (
        f"Current exec defaults: host={host}, security={security}, ask={ask}, {node_label}.\n"
        f"Options: {EXEC_OPTIONS}."
    )


def _apply_elevated(
    overrides: SessionOverrides,
    tokens: list[str],
    enabled: bool | None,
    sandboxed: bool,
    session_key: str | None,
) -> tuple[SessionOverrides, str]:
    if not tokens:
        level = overrides.elevated or "off"
        return overrides, f"Current elevated level: {level}.\nOptions: on, off, ask, full."
    raw = " ".join(tokens)
    chosen = normalize_elevated(raw.lower())  # typed by the operator: case is forgiven here
    if chosen is None:
        raise ToolError(f'Unrecognized elevated level "{raw}". Valid levels: off, on, ask, full.')
    if chosen != "off" and enabled is False:
        raise ToolError(elevated_unavailable_text(sandboxed, session_key))
    return replace(overrides, elevated=chosen), _ELEVATED_EVENTS[chosen]
