"""One decision per command: policy + analysis + allowlist + approvals file → allow, ask or deny, and why."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.approvals.decisions import allowed_decisions
from engine.commands import hostprivate, makevars, viewpaths
from engine.commands.allowlist import (
    ALLOW_ALWAYS_SOURCE,
    DEFAULT_SAFE_BINS,
    AllowlistEntry,
    AllowlistResult,
    Identity,
    SafeBinProfile,
    allow_always_patterns,
    approval_binding,
    command_hash_pattern,
    enforced_command,
    evaluate_allowlist,
    has_durable_approval,
    identity,
    pinned_command,
)
from engine.commands.analysis import HEREDOC_WARNING, CommandAnalysis, analyze_command
from engine.commands.boundfiles import ContentBinding
from engine.commands.content import bind
from engine.commands.expansion import Expansion, expand
from engine.commands.hostenv import foreign_env_keys, host_path, own_environ
from engine.commands.hostoutside import NOTHING_OUTSIDE, Outside
from engine.commands.treecode import TreeVet, found_reason, sandbox_roots, tree_vet, unbound_findings
from engine.config.model import Config
from engine.errors import InvalidInput
from engine.policy.precedence import (
    EffectivePolicy,
    PolicyError,
    PolicyStep,
    SessionOverrides,
    deny_text,
    requires_approval,
    resolve_policy,
)
from engine.policy.privatebinds import private_binds
from engine.policy.warncap import FOUND_WARNINGS, capped_warnings, content_warnings
from engine.results import ToolError
from engine.statefs import state_dir

if TYPE_CHECKING:
    from engine.approvals.schema import ApprovalsFile


class ApprovalsSource(Protocol):
    """What evaluate reads the approvals file through (engine.approvals.store.ApprovalsStore)."""

    def snapshot(self) -> ApprovalsFile: ...


@dataclass
class Decision:
    """What `exechost policy check` prints and the gateway acts on."""

    command: str
    agent_id: str
    host: str | None
    security: str | None
    ask: str | None
    ask_fallback: str | None
    node: str | None
    analysis_ok: bool
    analysis_reason: str | None
    allowlist_satisfied: bool
    durable: bool
    requires_approval: bool
    # The policy's verdict: allow | ask | deny. (The operator's answer to an ask is ApprovalRecord.decision:
    # allow-once | allow-always | deny.) On the wire it stays "decision".
    verdict: str
    reason: str
    decided_by: PolicyStep
    segments: list[dict[str, Any]] = field(default_factory=list)
    enforced_command: str | None = None
    # What a human approval runs: the same pinned rendering for a plain chain (None: the raw text runs),
    # and the identity of every executable and the cwd, re-checked just before the run.
    pinned_command: str | None = None
    identity: Identity = ()
    # The sha256 of every file it executes or reads as code (engine.commands.content), checked again at the
    # spawn, where agent-writable ones run from sealed copies (engine.commands.verified). None off the host.
    content: ContentBinding | None = None
    allowed_decisions: tuple[str, ...] = ()
    allow_always_patterns: list[str] = field(default_factory=list)
    policy: EffectivePolicy | None = None
    warnings: list[str] = field(default_factory=list)
    tree: TreeVet | None = None  # what was vetted in the tree, re-vetted just before the spawn

    def tree_problem(self) -> str | None:
        """Whether a file the command would run from the tree changed since this decision."""
        return self.tree.problem() if self.tree is not None else None

    grant_ids: tuple[str, ...] = ()  # the grants an allow leans on: one use is taken from each per run

    def command_to_run(self, *, sandboxed: bool, approved: bool = False) -> str:
        """The command that will run. Inside a sandbox the host's resolved paths mean nothing: the text as
        given. On a host: what a human `approved` is the pinned rendering they saw (the raw text when the
        command is not a plain chain: it was shown, and approved, as text); an allow runs the enforced
        rendering, or for a durable exact-command approval the pinned one that was approved."""
        if sandboxed:
            return self.command
        if approved:
            return self.pinned_command or self.command
        if self.enforced_command is not None:
            return self.enforced_command
        return (self.pinned_command if self.durable else None) or self.command

    def to_json(self) -> dict[str, Any]:
        policy = self.policy
        return {
            "command": self.command,
            "agentId": self.agent_id,
            "host": self.host,
            "security": self.security,
            "ask": self.ask,
            "askFallback": self.ask_fallback,
            "node": self.node,
            "elevated": policy.elevated if policy else "off",
            "sandboxed": policy.sandboxed if policy else False,
            "analysisOk": self.analysis_ok,
            "analysisReason": self.analysis_reason,
            "allowlistSatisfied": self.allowlist_satisfied,
            "durable": self.durable,
            "requiresApproval": self.requires_approval,
            "decision": self.verdict,
            "reason": self.reason,
            "decidedBy": self.decided_by.to_json(),
            "segments": self.segments,
            "enforcedCommand": self.enforced_command,
            "pinnedCommand": self.pinned_command,
            "contentDigests": self.content.to_json() if self.content is not None else [],
            "allowedDecisions": list(self.allowed_decisions),
            "allowAlwaysPatterns": self.allow_always_patterns,
            "warnings": self.warnings,
            "grantIds": list(self.grant_ids),
            "trail": [step.to_json() for step in policy.trail] if policy else [],
        }


def evaluate(
    command: str,
    *,
    config: Config,
    agent_id: str = "main",
    params: dict[str, Any] | None = None,
    overrides: SessionOverrides | None = None,
    store: ApprovalsSource | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    sandbox_available: bool = False,
    session_key: str | None = None,
    env_overrides: Mapping[str, str] | None = None,
    grants: Sequence[AllowlistEntry] = (),
    outside: Callable[[], Outside] | None = None,
    owner: str | None = None,
    operator: bool = False,
) -> Decision:
    """Decide one command. `store` is read once (one consistent snapshot of the approvals file).

    Three steps, each deciding one thing: the policy that applies (resolve_policy), what the command is
    found to be under it (`_examine`: allowlist, tree, env, content, durable approvals), and the verdict
    those findings lead to (`_verdict`). Policy errors (host not allowed, sandbox required, elevated
    unavailable) come back as a deny whose reason is the reference text; an unreadable approvals file
    raises ApprovalsFileError.
    """
    if not command.strip():
        raise ToolError("Provide a command to start.")
    if cwd is not None and "\x00" in cwd:  # the OS would refuse it mid-decision ("embedded null byte")
        raise InvalidInput("cwd contains a NUL byte")
    approvals = store.snapshot() if store is not None else None
    # The file's entries are the owner's (a gateway's agent on a shared node: ExecContext.owner).
    file_policy = approvals.agent(agent_id, owner) if approvals is not None else None
    file_defaults = approvals.defaults if approvals is not None else None
    entries = approvals.entries(agent_id, owner) if approvals is not None else []
    if operator and approvals is not None:  # the operator's own call: what it allowed itself, too
        entries = [*entries, *approvals.operators_entries()]
    entries = [*entries, *grants]  # live grants (allow-always with limits) match after the file's entries

    analysis = analyze_command(command)
    try:
        policy = resolve_policy(
            config,
            agent_id,
            params,
            overrides,
            file_policy,
            sandbox_available,
            file_defaults=file_defaults,
            session_key=session_key,
        )
    except PolicyError as exc:
        return _refused_by_policy(command, agent_id, analysis, exc)
    on_host = not policy.sandboxed and policy.host != "node"
    expansion = _expansion(command, analysis, policy, cwd or os.getcwd(), outside)
    if expansion is not None:
        analysis = analyze_command(expansion.text)
    examined = expansion.text if expansion is not None else command  # bound as the words that run
    found = _examine(
        examined,
        analysis,
        policy,
        config,
        agent_id,
        entries,
        grants,
        cwd or os.getcwd(),
        env,
        env_overrides,
        private_binds(config, agent_id, owner, operator=operator) if on_host else (),
    )
    if expansion is not None:
        _decide_expanded(found, expansion)
    verdict, reason, step = _verdict(policy, found)
    if expansion is not None and verdict != "deny" and found.pinned is None and not policy.sandboxed:
        verdict, reason, step = "deny", _UNRENDERED, policy.step("ask")
    return _decision(command, agent_id, policy, found, verdict, reason, step, expanded=expansion is not None)


# Issue 27 §5: what a human approves is bound whole, or refused; an expanded command that cannot be run
# as its rendering would run the pattern again.
_UNRENDERED = (
    "exec denied: the shell expands its words from the directory, and the expansion cannot be run as decided"
)


def _expansion(
    command: str,
    analysis: CommandAnalysis,
    policy: EffectivePolicy,
    cwd: str,
    outside: Callable[[], Outside] | None,
) -> Expansion | None:
    """A host command left unanalysed only for a glob or `$PWD` (engine.commands.expansion): what the
    shell expands it to now, in the run's host view (`outside`: what the agent's view covers and hides),
    when that is a command the analysis understands."""
    if analysis.ok or policy.sandboxed or policy.host == "node":
        return None  # a sandbox or a node expands against its own files
    if analysis.reason not in ("glob", "variable expansion"):
        return None
    expansion = expand(command, cwd, outside=outside() if outside is not None else NOTHING_OUTSIDE)
    return expansion if expansion is not None and analyze_command(expansion.text).ok else None


def _decide_expanded(f: _Findings, expansion: Expansion) -> None:
    """An expanded command always asks (the pattern may match otherwise later, and nobody granted the
    files it matches now), runs its rendering of the words shown, and is never saved to run unasked."""
    f.satisfied = False
    f.durable = False
    f.enforced = None
    f.warnings.insert(0, expansion.warning())


def _refused_by_policy(command: str, agent_id: str, analysis: CommandAnalysis, exc: PolicyError) -> Decision:
    return Decision(
        command=command,
        agent_id=agent_id,
        host=None,
        security=None,
        ask=None,
        ask_fallback=None,
        node=None,
        analysis_ok=analysis.ok,
        analysis_reason=analysis.reason,
        allowlist_satisfied=False,
        durable=False,
        requires_approval=False,
        verdict="deny",
        reason=str(exc),
        decided_by=exc.step,
        segments=[_segment_json(s.argv, None, None, None, None, None) for s in analysis.segments],
    )


@dataclass
class _Findings:
    """What the command was found to be under its policy, before any verdict."""

    analysis: CommandAnalysis
    result: AllowlistResult
    vetted: TreeVet | None  # host runs: code the command would run from a tree the agent can write
    found: list[Any]  # (vetted.found)
    foreign_env: list[str]  # env keys the agent sets that are not inert
    elsewhere: list[str]  # words naming another file in the run's view than the decision reads
    satisfied: bool  # the allowlist holds every segment, and nothing above asks
    binding: str  # what an allow-always is bound to (cwd, env, tree, content)
    content: ContentBinding | None
    durable: bool  # a durable allow-always approval covers it
    enforced: str | None
    pinned: str | None
    identity: Identity
    grants_used: tuple[str, ...]
    warnings: list[str]


def _examine(
    command: str,
    analysis: CommandAnalysis,
    policy: EffectivePolicy,
    config: Config,
    agent_id: str,
    entries: list[AllowlistEntry],
    grants: Sequence[AllowlistEntry],
    cwd: str,
    env: Mapping[str, str] | None,
    env_overrides: Mapping[str, str] | None,
    private: tuple[tuple[str, str], ...] = (),
) -> _Findings:
    exec_cfg = config.exec_for(agent_id)
    run_env = own_environ() if env is None else dict(env)
    warnings: list[str] = []
    if not analysis.ok and "heredoc" in (analysis.reason or "") and not policy.sandboxed:
        warnings.append(HEREDOC_WARNING)
    if policy.host == "node":
        warnings.append("Executables resolved on this machine; the node resolves them against its own PATH.")
    elif not policy.sandboxed and ("PATH" in run_env or exec_cfg.path_prepend):
        run_env["PATH"] = host_path(run_env.get("PATH", ""), exec_cfg.path_prepend)
    safe_bins = frozenset(exec_cfg.safe_bins) if exec_cfg.safe_bins is not None else DEFAULT_SAFE_BINS
    result = evaluate_allowlist(
        analysis,
        entries,
        cwd=cwd,
        env=run_env,
        safe_bins=safe_bins,
        safe_bin_profiles=_profiles(exec_cfg.safe_bin_profiles),
        # the agent's own copies of its private dirs are in the state dir, and are the run's own files
        own=hostprivate.agent_dir(os.path.realpath(state_dir()), agent_id) if private else "",
    )
    # Issue 18 part 3: a host program that would run code from a tree the agent can write (a repository
    # config key not known inert, a Makefile, package.json scripts) is never satisfied by the allowlist:
    # it asks, naming the file, and an allow-always holds only for that file's content.
    roots = sandbox_roots(config.sandbox_value(agent_id, "workspace_root"))
    on_host = not policy.sandboxed and policy.host != "node"
    vetted = tree_vet(analysis, result, cwd, roots, exec_cfg.tree_safe) if on_host else None
    found = list(vetted.found) if vetted is not None else []
    # One line per finding is unbounded (each key of a 780 KB .git/config): the first few, then a count,
    # so the warnings after them (env, binding) still show.
    warnings += capped_warnings(list(dict.fromkeys(f.warning() for f in found)), FOUND_WARNINGS)
    # Issue 27 §3: env the agent sets is influence the operator never granted an allowlist entry; only
    # inert keys ride along unasked. Any other key makes the command ask (the ask shows the env), and an
    # allow-always saves only the exact command bound to that env (approval_binding hashes it).
    gated = on_host and policy.security == "allowlist" and not policy.bypass_approvals
    foreign_env = foreign_env_keys(env_overrides, exec_cfg.inert_env) if gated else []
    if foreign_env:
        warnings.append(
            f"Warning: the agent sets env {', '.join(foreign_env)}: not on the inert list "
            "(tools.exec.inertEnv) or with a value not shaped like its kind (a locale, zone or terminal "
            "name), so the command cannot run unasked."
        )
    made = makevars.foreign(vetted, exec_cfg.inert_env) if gated else []  # make's exported variables
    if made:
        warnings.append(makevars.warning(made))
        foreign_env += [f"{name} (make's command line)" for name in made]
    # Fresh round 10 c: the decision reads the paths a command names on the host, the run in its view,
    # where the agent's private dirs (its /tmp, ...) are its own copies. A word that reaches another file
    # there than here (by its text or through a link) names what nobody vetted: it asks, never saved.
    elsewhere = viewpaths.diverging(private, viewpaths.words_of(analysis, programs(result), command), cwd)
    if elsewhere:
        warnings.insert(0, viewpaths.warning(elsewhere))
    satisfied = analysis.ok and result.satisfied and not found and not foreign_env and not elsewhere
    binding = approval_binding(analysis, cwd, env_overrides)
    if vetted is not None and vetted.binding:
        binding += "\n" + vetted.binding
    loose = unbound_findings(vetted.binding) if vetted is not None else []
    if loose:
        warnings.append(
            f"Warning: {loose[0]}{f' (and {len(loose) - 1} more)' if len(loose) > 1 else ''} holds code "
            "exechost cannot bind to its bytes (a tree the program reads as it likes, a directory, a file "
            "that is not regular or is too large): allow-always is not offered."
        )
    content = None
    # Bound wherever a human or an allowlist decides; `security=full` without ask=always and elevated full
    # allow any bytes anyway (nothing was shown to bind them to).
    unbound = policy.bypass_approvals or (policy.security == "full" and policy.ask != "always")
    if not policy.sandboxed and policy.host != "node" and not unbound:
        # The env the run gets: the agent's keys too (its CDPATH leads a `cd` where the binder never looks).
        agents = {k: v for k, v in (env_overrides or {}).items() if k.upper() != "PATH"}  # PATH: refused
        content = bind(
            analysis,
            result,
            cwd,
            {**run_env, **agents},
            command=command,
            in_view=viewpaths.reader(private, cwd) if private else None,
        )
        warnings += capped_warnings(content_warnings(content, result), FOUND_WARNINGS)
        if content.durable_text():
            binding += "\n" + content.durable_text()  # an exact-command approval binds those bytes too
    durable = not elsewhere and (
        (not loose and has_durable_approval(command, entries, binding))
        or (not found and not foreign_env and _durable_by_entries(analysis, result, entries))
    )
    return _Findings(
        analysis=analysis,
        result=result,
        vetted=vetted,
        found=found,
        foreign_env=foreign_env,
        elsewhere=elsewhere,
        satisfied=satisfied,
        binding=binding,
        content=content,
        durable=durable,
        enforced=enforced_command(analysis, result) if satisfied else None,
        pinned=pinned_command(analysis, result),
        identity=identity(result, cwd),
        grants_used=_grants_used(command, binding, result, grants) if grants else (),
        warnings=warnings,
    )


def _verdict(policy: EffectivePolicy, f: _Findings) -> tuple[str, str, PolicyStep | None]:
    """allow | ask | deny, why, and the policy step that decided it."""
    analysis, result, found, foreign_env = f.analysis, f.result, f.found, f.foreign_env
    needs = requires_approval(policy, analysis.ok, f.satisfied, f.durable)
    sec_step, ask_step = policy.step("security"), policy.step("ask")
    if policy.sandboxed:
        if policy.security == "deny":
            return "deny", deny_text(policy), sec_step
        inside = "runs inside the sandbox container; exec approvals do not apply there"
        return "allow", inside, policy.step("host")
    if policy.bypass_approvals:
        elevated = next((s for s in policy.trail if s.layer == "elevated"), None)
        return "allow", "elevated full: runs on the host with approvals bypassed", elevated
    if policy.security == "deny":
        return "deny", deny_text(policy), sec_step
    where = "runs direct on the gateway (sandbox mode off); " if policy.direct else ""
    if needs and policy.ask == "always":
        return "ask", f"{where}ask=always: every command needs approval", ask_step
    if policy.security == "full":
        return "allow", f"{where}security=full: every command is allowed", sec_step
    # security = allowlist
    if needs:
        by_tree = found and analysis.ok and result.satisfied
        miss = found_reason(found) if by_tree else _miss_reason(analysis, result)
        if foreign_env and analysis.ok and result.satisfied and not found:
            miss = f"the agent sets env keys that are not inert ({', '.join(foreign_env)})"
        if f.elsewhere and analysis.ok and result.satisfied and not found and not foreign_env:
            miss = viewpaths.REASON
        return "ask", f"{where}{miss}; ask=on-miss asks", ask_step
    if f.durable and not f.satisfied:
        step = PolicyStep("approvals file", "allow-always", "durable")
        return "allow", f"{where}durable allow-always approval for this command", step
    if f.satisfied and f.enforced is None:
        f.warnings.append(
            "Warning: allowlist auto-execution is unavailable on linux; explicit approval is required."
        )
        if policy.ask != "off":
            return "ask", f"{where}the enforced command could not be built", ask_step
        return "deny", "exec denied: allowlist miss", ask_step
    if f.satisfied:
        return "allow", f"{where}every segment is satisfied: {_hits(result)}", _allowlist_step(result)
    if found and analysis.ok and result.satisfied:
        return "deny", f"exec denied: {found_reason(found)}", ask_step
    if f.elsewhere and analysis.ok and result.satisfied:
        return "deny", f"exec denied: {viewpaths.REASON}", ask_step
    if foreign_env and analysis.ok and result.satisfied:
        return "deny", f"exec denied: env keys that are not inert ({', '.join(foreign_env)})", ask_step
    return "deny", "exec denied: allowlist miss", ask_step


def _decision(
    command: str,
    agent_id: str,
    policy: EffectivePolicy,
    f: _Findings,
    verdict: str,
    reason: str,
    step: PolicyStep | None,
    *,
    expanded: bool = False,
) -> Decision:
    """The decision, with what an ask offers (allow-always and the patterns it would save)."""
    content = f.content
    offered = allowed_decisions(policy.ask) if verdict == "ask" else ()
    if expanded or f.elsewhere:  # decided on files now (or not on the run's): approved once, never saved
        offered = tuple(d for d in offered if d != "allow-always")
    if (content is not None and not content.proven) or (f.vetted and unbound_findings(f.vetted.binding)):
        # Issue 27 §5: allow-always only when the binder proved every code source bound (content.py), and
        # every file a host tool takes code from in the agent's tree is bound by its bytes (treecode).
        offered = tuple(d for d in offered if d != "allow-always")
    always = "allow-always" in offered
    patterns = allow_always_patterns(command, f.analysis, f.result, f.binding) if always else []
    writable = content is not None and any(p in content.writable_paths for p in patterns)
    if always and (f.found or f.foreign_env or writable):
        # A path the agent can write would allow any bytes it puts there, and a program's path would
        # allow it in any tree: save the command bound to this cwd, env and the tree's named files.
        patterns = [command_hash_pattern(command, f.binding)]
    return Decision(
        command=command,
        agent_id=agent_id,
        host=policy.host,
        security=policy.security,
        ask=policy.ask,
        ask_fallback=policy.ask_fallback,
        node=policy.node,
        analysis_ok=f.analysis.ok,
        analysis_reason=f.analysis.reason,
        allowlist_satisfied=f.satisfied,
        durable=f.durable,
        requires_approval=verdict == "ask",
        verdict=verdict,
        reason=reason,
        decided_by=step or PolicyStep("policy", "", verdict),
        segments=[
            _segment_json(m.argv, m.resolved_path, m.satisfied_by, m.matched_pattern, m.entry_id, m.reason)
            for m in f.result.segments
        ],
        enforced_command=f.enforced,
        pinned_command=f.pinned,
        identity=f.identity,
        content=content,
        allowed_decisions=offered,
        allow_always_patterns=patterns,
        policy=policy,
        warnings=capped_warnings(f.warnings),
        tree=f.vetted,
        grant_ids=f.grants_used if verdict == "allow" else (),
    )


def _segment_json(
    argv: tuple[str, ...],
    resolved: str | None,
    satisfied_by: str | None,
    pattern: str | None,
    entry_id: str | None,
    reason: str | None,
) -> dict[str, Any]:
    # entryId names the exact allowlist entry that matched, so callers record use of that entry
    # (two entries can share a pattern and differ in argPattern).
    return {
        "argv": list(argv),
        "resolvedPath": resolved,
        "satisfiedBy": satisfied_by,
        "matchedPattern": pattern,
        "entryId": entry_id,
        "reason": reason,
    }


def _profiles(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, SafeBinProfile] | None:
    """Config safeBinProfiles → SafeBinProfile (config validated them already)."""
    return {name: SafeBinProfile.from_config(spec) for name, spec in raw.items()} or None


def _grants_used(
    command: str, binding: str, result: AllowlistResult, grants: Sequence[AllowlistEntry]
) -> tuple[str, ...]:
    """The grants this decision leans on (a use is taken from each when it runs)."""
    ids = {m.entry_id for m in result.segments if m.entry_id and m.entry_id.startswith("grant:")}
    ids |= {g.id for g in grants if g.id and has_durable_approval(command, [g], binding)}
    return tuple(sorted(i.removeprefix("grant:") for i in ids if i))


def _durable_by_entries(
    analysis: CommandAnalysis, result: AllowlistResult, entries: list[AllowlistEntry]
) -> bool:
    """Reference §3.3 (b): analysis ok and every segment matched an allow-always entry."""
    if not analysis.ok or not result.segments:
        return False
    always = {e.id for e in entries if e.id is not None and e.source == ALLOW_ALWAYS_SOURCE}
    return all(m.entry_id is not None and m.entry_id in always for m in result.segments)


def _miss_reason(analysis: CommandAnalysis, result: AllowlistResult) -> str:
    if not analysis.ok:
        return f"analysis failed closed ({analysis.reason or 'unparseable'})"
    for match in result.segments:
        if match.satisfied_by is None:
            name = match.resolved_path or (match.argv[0] if match.argv else "?")
            why = match.reason if match.reason and match.reason != "allowlist miss" else "no matching entry"
            return f"allowlist miss: {name} ({why})"
    return "allowlist miss"


def _hits(result: AllowlistResult) -> str:
    parts = []
    for match in result.segments:
        name = match.argv[0] if match.argv else "?"
        what = match.satisfied_by
        if match.matched_pattern:
            what = f"{what} {match.matched_pattern}"
        parts.append(f"{name} ({what})")
    return ", ".join(parts)


def _allowlist_step(result: AllowlistResult) -> PolicyStep:
    patterns = [m.matched_pattern or m.satisfied_by or "" for m in result.segments]
    sources = sorted({m.satisfied_by or "" for m in result.segments})
    return PolicyStep("allowlist", "+".join(sources), ", ".join(dict.fromkeys(patterns)))


def programs(result: AllowlistResult) -> list[str]:
    """Every program path resolved for a command (its wrappers', an `sh -c` payload's): each is run by
    its name in the run's view."""
    found: list[str] = []
    for m in result.segments:
        found += [p for p in (m.resolved_path, m.named_path, *m.wrapper_paths) if p]
        if m.inner is not None:
            found += programs(m.inner)
    return found
