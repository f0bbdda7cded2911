"""The one decision path: `policy check` and `exec` both decide here, so the check says what exec does.

Everything the decision depends on is read here: the call's host/security/ask/node/elevated, the workdir
(with exec's $HOME fallback), the env the agent sets, the live grants, the session's overrides, one
approvals-file snapshot, and the sandbox refusal a container create would give.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.approvals.grants import GrantStore
from engine.approvals.store import ApprovalsFileError
from engine.commands.hostenv import sanitize_host_env
from engine.config.model import Config
from engine.policy.decision import ApprovalsSource, Decision, evaluate
from engine.policy.precedence import (
    PolicyError,
    SessionOverrides,
    operator_overrides,
    overrides_for,
    resolve_policy,
)
from engine.results import ToolError
from engine.sandbox import with_sandbox_refusal
from engine.sessions.launcher import home_workdir, host_workdir, workdir_warning
from engine.tools.exec_host import host_outside, private_source
from engine.tools.exec_request import (
    ENV_MAX_BYTES,
    WORKDIR_MAX_BYTES,
    check_enums,
    sandbox_available,
    within,
)


@dataclass
class Decided:
    """A decision and what it was decided against: the host cwd and the warnings about it."""

    decision: Decision
    cwd: str
    env: dict[str, str] | None  # the env the agent sets (validated)
    call: dict[str, Any]  # the per-call policy params
    cwd_warnings: list[str] = field(default_factory=list)  # the workdir fallback (host runs only)
    shown_cwd: str | None = None  # the workdir as named, when `cwd` is the agent's private copy of it


def call_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """The env the agent sets (typed by the request), within ENV_MAX_BYTES."""
    if env is None:
        return None
    if env:
        within("env", "".join(k + v for k, v in env.items()), ENV_MAX_BYTES, "pass data in files")
    return dict(env)


def checked_workdir(raw: Any, warnings: list[str]) -> str:
    """The call's workdir checked (a string path within WORKDIR_MAX_BYTES), then the one host fallback
    rule (engine.sessions.launcher.host_workdir: $HOME with the reference warning)."""
    if raw is not None and raw != "":
        if not isinstance(raw, str) or "\x00" in raw:
            raise ToolError("workdir must be a string path")
        within("workdir", raw, WORKDIR_MAX_BYTES, "no path is that long")
    return host_workdir(raw or None, warnings)


def _private_workdir(
    config: Config,
    agent_id: str,
    workdir: str | None,
    decision: Decision,
    owner: str | None = None,
    *,
    operator: bool = False,
) -> tuple[str, list[str]] | None:
    """A gateway-host run's workdir in a private dir (engine.commands.hostprivate) is in the agent's own
    copy, never the host's: that copy's path here (the view names it as asked), with the $HOME fallback
    when the agent has no such directory. None for any other run."""
    policy = decision.policy
    if not workdir or policy is None or policy.sandboxed or policy.host == "node":
        return None
    source = private_source(config, agent_id, workdir, owner, operator=operator)
    if source is None:
        return None
    if os.path.isdir(source):
        return source, []
    fallback = home_workdir()
    return fallback, [workdir_warning(workdir, fallback)]


def decide(
    command: str,
    call: Mapping[str, Any],
    env: Mapping[str, str] | None,
    *,
    config: Config,
    agent_id: str,
    session_key: str,
    overrides: Mapping[str, SessionOverrides],
    store: ApprovalsSource,
    grants: GrantStore | None,
    workdir: str | None = None,
    owner: str | None = None,
    operator: bool = False,
) -> Decided:
    """Decide `command` as exec will run it (blocking: reads files; call it off the event loop).

    `call` is the per-call policy (a request's `policy_params()`), `env` the env the agent sets; `workdir`
    is the workdir (exec's `workdir` or `defaultWorkdir`, `policy check`'s `cwd`). `grants=None` decides
    without live grants. `owner` keys the host resources the run's view uses (ExecContext.owner), the
    operator's own for an `operator` call naming no agent (ExecContext.operators_own: the agent is its
    policy only, engine.commands.hostprivate.space).
    """
    env = call_env(env)
    call = dict(call)
    check_enums(call)
    cwd_warnings: list[str] = []
    cwd = checked_workdir(workdir, cwd_warnings)
    # A grant is its owner's (on a shared node a gateway's agent's, ExecContext.owner), never the name's.
    live = [] if grants is None else grants.entries(owner or agent_id, session_key or None)
    # The operator's own call meets only the operator's own overrides, never ones an agent set on itself.
    ruling = (
        operator_overrides(overrides, session_key)
        if operator
        else overrides_for(overrides, agent_id, session_key)
    )

    def decide_in(cwd: str) -> Decision:
        decision = evaluate(
            command,
            config=config,
            agent_id=agent_id,
            params=call,
            overrides=ruling,
            store=store,
            cwd=cwd,
            sandbox_available=sandbox_available(config, agent_id, session_key),
            session_key=session_key or None,
            env_overrides=env,
            grants=live,
            # globs list what the view shows
            outside=lambda: host_outside(config, agent_id, cwd, owner, own=operator),
            owner=owner,  # the private dirs its paths are read in: the run's own (ExecContext.owner)
            operator=operator,
        )
        return with_sandbox_refusal(decision, config, agent_id)

    decision = decide_in(cwd)
    shown: str | None = None
    private = _private_workdir(config, agent_id, workdir, decision, owner, operator=operator)
    if private is not None:
        # decided again where the run will be: in the agent's own copy of /tmp (or the like)
        cwd, cwd_warnings = private
        decision = decide_in(cwd)
        shown = os.path.abspath(os.path.expanduser(workdir or "")) if not cwd_warnings else None
    policy = decision.policy
    if decision.verdict != "deny" and policy is not None and not policy.sandboxed and policy.host != "node":
        # An env override a host run refuses (LD_PRELOAD, PATH, ...) is refused here, with exec's text.
        sanitize_host_env(
            os.environ, env, block_path_overrides=True, inherit=config.exec_for(agent_id).inherit_env
        )
    return Decided(decision=decision, cwd=cwd, env=env, call=call, cwd_warnings=cwd_warnings, shown_cwd=shown)


def input_refused_now(
    *,
    config: Config,
    agent_id: str,
    session_key: str,
    overrides: Mapping[str, SessionOverrides],
    store: ApprovalsSource,
    unless_full: str = "",
) -> str:
    """Why the agent may not type into its running sessions under today's policy, '' when it may
    (blocking: reads the approvals file). A session's own input gate is decided when it starts
    (RunSpec.input_refused); this one is decided at every write, so an operator's lockdown since
    (`/exec security=deny` or the config) reaches the shells already running: keys fed to a shell are
    commands, and a locked-down agent runs none."""
    try:
        approvals = store.snapshot()
    except ApprovalsFileError as exc:  # fail closed, as exec does
        return f"the approvals file cannot be read ({exc})"
    try:
        policy = resolve_policy(
            config,
            agent_id,
            {},
            overrides_for(overrides, agent_id, session_key),
            approvals.agent(agent_id),
            sandbox_available(config, agent_id, session_key),
            file_defaults=approvals.defaults,
            session_key=session_key or None,
        )
    except PolicyError as exc:
        return f"its exec policy refuses it now ({exc})"
    if policy.security == "deny":
        step = policy.step("security")
        where = f" ({step.layer}: {step.key})" if step is not None else ""
        return f"its exec policy is now security=deny{where}; the operator may still type"
    if unless_full and policy.security != "full" and not policy.bypass_approvals:
        # The session started unasked under security=full (or elevated): that policy is gone.
        return (
            f"it started under security=full and the agent's policy is now security={policy.security}: "
            f"{unless_full}; the operator may still type"
        )
    return ""
