"""The `exec` tool end to end: target → policy → env → approvals → run the enforced command → result."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from engine import fairpool
from engine.approvals.grants import GrantStore
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalError, ApprovalRecord, session_owner
from engine.approvals.store import ApprovalsFileError, Use
from engine.commands.allowlist import identity_problem
from engine.commands.hostenv import host_path, prepend_left_out, sanitize_host_env
from engine.commands.hostoutside import HostViewError
from engine.commands.stdindata import input_refusal
from engine.commands.verified import StaleContent
from engine.config import nodekeys
from engine.config.model import Config
from engine.errors import InvalidInput
from engine.modes import min_security
from engine.policy.decision import Decision
from engine.policy.precedence import SessionOverrides
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.tools.decide import Decided, decide
from engine.tools.exec_asks import (
    ask_request,
    asker,
    denied_result,
    finished_text,
    pending_result,
    policy_now_denies,
    resume_data,
    saved_under,
    waiting_data,
)
from engine.tools.exec_request import (
    COMMAND_MAX_BYTES,
    NODE_UNAVAILABLE,
    Events,
    ExecContext,
    NodeRunner,
    Prepared,
    Sessions,
    Store,
    clamped,
    note_run,
    sandbox_available,
    within,
)
from engine.tools.exec_run import ExecRunner
from engine.tools.uses import UseStamps

log = logging.getLogger("exechost.exec")

__all__ = ["COMMAND_MAX_BYTES", "ExecContext", "ExecTool", "sandbox_available"]


class ExecTool(ExecRunner):
    """One per gateway; `await tool.run(call, ctx)` returns the tool result or raises ToolError."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        sessions: Sessions,
        approvals: ApprovalManager,
        store: Store,
        events: Events,
        has_approver: Callable[[], bool],
        overrides: Mapping[str, SessionOverrides],
        wait_session: Callable[[str, str], Any] | None = None,
        config_problem: Callable[[], str | None] = lambda: None,
        grants: GrantStore | None = None,
    ) -> None:
        self._config = config
        self._config_problem = config_problem
        self.sessions = sessions
        self.approvals = approvals
        self.store = store
        self.grants = grants
        self.events = events
        self.has_approver = has_approver
        self.overrides = overrides
        # wait_session(session_id, scope_key) -> awaitable ToolResult of the finished session.
        self._wait_session = wait_session
        self._background: set[asyncio.Task[Any]] = set()
        self._uses = UseStamps(self.store.record_uses)
        self.node_runner: NodeRunner | None = None  # set by the gateway when nodes are configured
        # Set with it: raises ToolError for a node query naming no configured node (`unknown node: x
        # (known: …)`), checked before any policy so a typo is never reported as a host setting.
        self.node_known: Callable[[str], object] | None = None

    # -- entry point

    async def run(self, call: ExecRequest, ctx: ExecContext) -> ToolResult:
        prepared = await self._prepare(call, ctx)
        decision = prepared.decision
        if decision.verdict == "deny":
            raise ToolError(decision.reason)
        if prepared.host == "node" and self.node_runner is not None:
            # The gateway's policy only tightens (it rides along); the node decides and asks itself.
            return await self.node_runner(prepared.command, call, ctx, decision)
        if decision.verdict == "allow" and decision.grant_ids and not await self._use_grants(decision):
            # A grant ran out (or expired, or was revoked) since the decision: decide again without it.
            prepared = await self._prepare(call, ctx, use_grants=False)
            decision = prepared.decision
            if decision.verdict == "deny":
                raise ToolError(decision.reason)
        if decision.verdict == "allow":
            self._record_use(prepared, ctx)
            await self._still_as_decided(prepared)
            try:
                return await self._run(
                    prepared,
                    call,
                    ctx,
                    prepared.command_to_run(),
                    input_refused=_input_refused(prepared),
                    input_refused_unless_full=_input_refused_unless_full(prepared),
                )
            except StaleContent as exc:
                raise ToolError(f"exec denied: {exc}; ask again") from None
            except HostViewError as exc:
                raise ToolError(f"exec denied: {exc}") from None
        return await self._ask(prepared, call, ctx)

    async def _use_grants(self, decision: Decision) -> bool:
        """Take one use of every grant the allow leans on, atomically (two runs never exceed the limit)."""
        if self.grants is None:
            return False
        try:
            return await fairpool.offload(
                fairpool.blocking, functools.partial(self.grants.consume, decision.grant_ids)
            )
        except OSError as exc:
            log.warning("could not count a grant use: %s", exc)
            return False

    # -- preparation

    async def _prepare(self, call: ExecRequest, ctx: ExecContext, *, use_grants: bool = True) -> Prepared:
        command = call.command
        if command is None or not command.strip():
            raise ToolError("Provide a command to start.")
        if "\x00" in command:
            raise ToolError("exec denied: the command contains a NUL byte")
        within("the command", command, COMMAND_MAX_BYTES, "write longer scripts to a file and run that")
        config = self._config()
        problem = self._config_problem()
        notices = [f"Warning: {problem}"] if problem else []
        # defaultWorkdir: the calling CLI/MCP process's cwd, used on the host when no workdir is given.
        if call.node and call.node.strip() and self.node_known is not None:
            self.node_known(call.node)
        decided = await self._decide(call, ctx, config, use_grants=use_grants)
        decision, cwd, env_param, call_params = decided.decision, decided.cwd, decided.env, decided.call
        host_warnings = decided.cwd_warnings
        sandboxed = decision.policy is not None and decision.policy.sandboxed
        warnings = [] if sandboxed else host_warnings  # the container maps its own workdir
        warnings += [w for w in decision.warnings if w not in warnings]
        warnings += clamped(call_params, decision) + notices
        prepared = Prepared(command=command, decision=decision, cwd=cwd, env=None, warnings=warnings)
        prepared.shown_cwd = decided.shown_cwd
        if decision.verdict == "deny":
            return prepared
        policy = decision.policy
        assert policy is not None
        # A sandbox on a node (per-call node=, or the agent's sandbox.node): that node's runner creates it.
        on_node = policy.sandboxed and (call.node or config.sandbox_value(ctx.agent_id, "node"))
        if policy.host == "node" or on_node:
            if self.node_runner is None:
                raise ToolError(NODE_UNAVAILABLE)
            prepared.host = "node"
            return prepared
        if policy.sandboxed:
            await self._prepare_sandbox(prepared, config, ctx, dict(env_param or {}), call.workdir)
            return prepared
        prepared.host = "gateway"
        sanitized = sanitize_host_env(
            os.environ,
            env_param,
            block_path_overrides=True,
            inherit=config.exec_for(ctx.agent_id).inherit_env,
        )
        env = dict(sanitized.env)
        prepared.warnings += sanitized.warnings
        nodekeys.drop_hidden_agent(env, nodekeys.hidden_paths(config.nodes.values()))
        env["OPENCLAW_CLI"] = "1"
        env["OPENCLAW_SHELL"] = "exec"
        prepend = config.exec_for(ctx.agent_id).path_prepend
        if prepend:
            env["PATH"] = host_path(env.get("PATH", ""), prepend)
            prepared.warnings += prepend_left_out(prepend)
        prepared.env = env
        return prepared

    async def _decide(
        self, call: ExecRequest, ctx: ExecContext, config: Config, *, use_grants: bool
    ) -> Decided:
        """Decide the call under the config, overrides, approvals file and grants in force now."""
        decide_now = functools.partial(
            decide,
            call.command or "",
            call.policy_params(),
            call.env,
            config=config,
            agent_id=ctx.agent_id,
            session_key=ctx.session_key,
            overrides=self.overrides,
            store=self.store,
            grants=self.grants if use_grants else None,
            workdir=call.workdir or call.default_workdir,
            owner=ctx.owner,
            operator=ctx.operators_own,
        )
        try:
            # The grants file is read in the same worker-thread hop as the decision: one hop per exec. The
            # pool serves principals in turn, so one agent's burst does not queue the others (fairpool); on a
            # shared node each gateway's agent is a principal of its own (ExecContext.owner).
            return await fairpool.decisions.run(
                fairpool.queue_of(ctx.operator, ctx.owner), decide_now, ctx.caller
            )
        except ApprovalsFileError as exc:
            # Fail closed: a broken approvals file can neither allow nor be silently ignored.
            raise ToolError(f"exec denied: {exc}") from None

    async def _today(self, call: ExecRequest, ctx: ExecContext) -> Decision | None:
        """The call decided again under today's policy, when its ask is answered or expires: what the
        operator changed since the ask (config, `/exec`, the approvals file) applies to it. None when it
        can no longer be decided at all (which refuses, as a deny does)."""
        try:
            return (await self._decide(call, ctx, self._config(), use_grants=False)).decision
        except (ToolError, InvalidInput) as exc:
            log.info("an approved call can no longer be decided: %s", exc)
            return None

    async def _prepare_sandbox(
        self, prepared: Prepared, config: Config, ctx: ExecContext, env: dict[str, str], workdir: Any
    ) -> None:
        from engine.sandbox import prepare_exec  # docker-py loads only when a sandbox is used

        # The raw workdir: prepare_exec maps it into the container (a host path means nothing there).
        sx = await prepare_exec(
            config,
            ctx.agent_id,
            ctx.session_key,
            workdir if isinstance(workdir, str) else None,
            namespace=ctx.namespace,
        )
        prepared.launcher = sx.launcher
        prepared.cwd = sx.cwd
        prepared.warnings += list(getattr(sx, "warnings", []) or [])
        prepared.env = env
        prepared.host = "sandbox"

    def _record_use(self, prepared: Prepared, ctx: ExecContext) -> None:
        """Stamp lastUsedAt on the allowlist entries that let this command through."""
        if prepared.decision.policy is None or prepared.decision.policy.sandboxed:
            return
        # The decision names the exact entry that matched: two entries may share a pattern and differ
        # only in argPattern, so looking them up by pattern could stamp the wrong one.
        now = int(time.time() * 1000)
        for seg in prepared.decision.segments:
            entry_id = seg.get("entryId")
            if seg.get("satisfiedBy") == "allowlist" and entry_id:
                path = seg.get("resolvedPath")
                self._uses.add(Use(ctx.owner, entry_id, prepared.command, path, now))  # (its block's)

    # -- approvals

    async def _ask(self, prepared: Prepared, call: ExecRequest, ctx: ExecContext) -> ToolResult:
        request = ask_request(prepared, ctx, call)
        resume = resume_data(prepared, call, ctx)
        while True:
            try:
                record, created = self.approvals.register(request, resume=resume, generation=ctx.generation)
            except ApprovalError as exc:
                raise ToolError(str(exc)) from None
            if not self.has_approver():
                # Two-phase: answer now, decide later; the run or denial reaches the agent as a system event.
                if created:
                    self._spawn(self._detached(record, prepared, call, ctx))
                await self.approvals.durable()  # "pending" is a promise: the ask is on disk first
                return pending_result(record, prepared)
            if ctx.on_waiting is not None:
                # Telling the caller it waits on this ask is a promise that the ask outlives us: on disk
                # first (the approvers were told at register; their decision waits for the disk anyway).
                await self.approvals.durable()
                # The session says whose run to follow when the ask is shared (ApprovalRecord.slot).
                ctx.on_waiting(waiting_data(record) | {"sessionKey": ctx.session_key})
            outcome = asyncio.ensure_future(self._approved_run(record, prepared, call, ctx))
            try:
                result = await asyncio.shield(outcome)
            except asyncio.CancelledError:
                # The caller went away: the gateway still owns the approval and the run; report via events.
                outcome.add_done_callback(
                    lambda t, rec=record: self._report_orphan(t, rec, prepared, ctx)  # type: ignore[misc]
                )
                raise
            if result is not None:
                if not ctx.caller_alive():
                    self._report_orphan(outcome, record, prepared, ctx)
                return result
            # Coalesced allow-once already used by the other caller: ask again for this run.

    async def _approved_run(
        self,
        record: ApprovalRecord,
        prepared: Prepared,
        call: ExecRequest,
        ctx: ExecContext,
        *,
        detached: bool = False,
    ) -> ToolResult | None:
        """The one approved-run path: wait for the operator, re-check, run what was approved, link the run
        to its ask. Returns the run's (or the denial's) result; None when an allow-once was already used.
        Reporting is the caller's: the foreground call returns it, a detached one reports it as an event."""
        answer = await self.approvals.wait(record)
        changed = today = None
        if answer in ("allow-once", "allow-always", None):
            changed = await self._changed(prepared)
            today = await self._today(call, ctx)
        verdict = self._verdict(record, answer, prepared, ctx, changed, today)
        if verdict is None:
            return None
        allowed, reason, command = verdict
        slot = record.slot(ctx.session_key, asker=asker(ctx))
        if not allowed:
            denied = denied_result(record, prepared, reason)
            # What it led to: a caller that reconnects reads it.
            note_run(self.approvals, record, denied, slot=slot)
            return denied
        session_id, instance = await self._starting(record, prepared, ctx, slot)
        if record.revoked:  # revoked while its start was written down: it never starts
            denied = denied_result(record, prepared, "agent revoked")
            note_run(self.approvals, record, denied, slot=slot)
            return denied
        try:
            result = await self._run(
                prepared, call, ctx, command, detached=detached, session_id=session_id, instance=instance
            )
        except StaleContent as exc:
            denied = denied_result(record, prepared, f"approval-stale: {exc}")
            note_run(self.approvals, record, denied, slot=slot)
            return denied
        except HostViewError as exc:  # the approved run cannot be given its view: it never started
            denied = denied_result(record, prepared, str(exc))
            note_run(self.approvals, record, denied, slot=slot)
            return denied
        identity = {"instance": instance, "scopeKey": ctx.scope_key}
        note_run(self.approvals, record, result, slot=slot, identity=identity)
        return result

    async def _starting(
        self, record: ApprovalRecord, prepared: Prepared, ctx: ExecContext, slot: dict[str, Any] | None = None
    ) -> tuple[str, str]:
        """Say on disk which session this approval's run starts as, before it starts: a gateway that dies
        mid-run must not leave an "approved, not yet run" ask for the next one to run a second time (the
        first copy is adopted under that id: engine.tools.resume). The real outcome replaces it. `slot`:
        the run is a joined requester's (ApprovalRecord.slot), kept with its entry. Returns the id and the
        run's instance: the id alone names whatever session holds it later, the instance only this run
        (with its scope: every lookup of the run checks both, `Session.is_run`)."""
        session_id = self.sessions.new_id()
        instance = secrets.token_hex(6)
        if (record.run if slot is None else slot.get("run")) is None:
            run = {
                "sessionId": session_id,
                "instance": instance,
                "scopeKey": ctx.scope_key,
                "status": "starting",
                "host": prepared.host,
            }
            self.approvals.note_run(record, run, slot)
        await self.approvals.durable()
        problem = self.approvals.durable_problem(record)
        if problem is not None:
            # The note did not reach the disk (a full disk: an agent's sandbox can fill it): started now, a
            # crash would leave "approved, never started" for the next gateway to run a second time. It
            # never starts; in memory it is over, so no later note brings it back (fresh round 8 o).
            failed = {"sessionId": None, "status": "failed", "reason": f"not started: {problem}"}
            self.approvals.note_run(record, failed, slot)
            raise ToolError(
                f"the approved command was not started: its start could not be recorded ({problem})"
            )
        return session_id, instance

    async def _still_as_decided(self, prepared: Prepared) -> None:
        """Refuse when an executable or the cwd is no longer the file that was decided on (a re-pointed
        link, a replaced binary): what runs must be what was shown (reference §5.4 approval hardening)."""
        problem = await self._changed(prepared)
        if problem is not None:
            raise ToolError(f"exec denied: {problem}; ask again")

    @staticmethod
    async def _changed(prepared: Prepared) -> str | None:
        """What changed since the decision: an executable, the cwd or a file run from the tree (None off
        the host: the container's files are not the host's). The tree's re-vet reads files the agent can
        replace (a FIFO for `.git/HEAD`): in a worker thread, as the decision was, never on the loop."""
        if prepared.host == "sandbox":
            return None
        d = prepared.decision
        problem = identity_problem(d.identity)  # stats only: no read that can wait on a writer
        if problem is not None or d.tree is None or d.tree.vets_nothing:
            return problem
        return await fairpool.offload(fairpool.blocking, d.tree_problem)

    def _verdict(
        self,
        record: ApprovalRecord,
        decision: str | None,
        prepared: Prepared,
        ctx: ExecContext,
        changed: str | None,
        today: Decision | None,
    ) -> tuple[bool, str, str] | None:
        """(allowed, denial reason, command to run); None when an allow-once was already consumed.
        `changed`: what _changed found since the decision; `today`: the call decided again now (both
        found by the caller, off the loop)."""
        d = prepared.decision
        if decision == "deny":
            return False, "user-denied", prepared.command
        if record.revoked:  # approved, then its agent was revoked before the run started
            return False, "agent revoked", prepared.command
        if decision in ("allow-once", "allow-always", None) and changed is not None:
            return False, f"approval-stale: {changed}", prepared.command
        denied = policy_now_denies(today)
        if denied is not None:  # the operator locked it down since the ask: no answer runs it
            return False, f"approval-stale: {denied}", prepared.command
        assert today is not None
        approved = prepared.command_to_run(approved=True)
        if decision == "allow-once":
            if not self.approvals.consume_allow_once(record, ctx.session_key, None, asker(ctx)):
                return None
            return True, "", approved
        if decision == "allow-always":
            patterns = d.allow_always_patterns
            if record.grant is not None:
                # A yes with limits: the same patterns, in the grants file, until they run out (never
                # the permanent file, even when the grant cannot be saved). Once per record, by the id
                # the decision journaled: the asks coalesced into it, and a restart, make the same one.
                # No id: a decision journaled by an older gateway, which may have made its grant
                # already; it runs this once and grants nothing more.
                try:
                    if self.grants is None:
                        raise RuntimeError("no grant store")
                    if record.grant_id is None:
                        log.warning("approval %s: its grant's id was never journaled; not granted", record.id)
                        return True, "", approved
                    self.grants.ensure(
                        record.grant_id,
                        saved_under(ctx),  # the gateway's agent's on a shared node, never every gateway's
                        patterns,
                        prepared.command,
                        record.grant,
                        # The session the decision found every asker in, not whichever of them runs
                        # first: none (a sessionless ask) makes no session grant (GrantStore.ensure).
                        session_key=session_owner(record) or "",
                        granted_by=record.resolved_by or "operator",
                    )
                except Exception as exc:
                    log.warning("could not save grant %s: %s", patterns, exc)
            elif patterns:
                try:
                    # Under its owner (on a shared node, the gateway's namespace and agent): one gateway's
                    # human's allow-always is never another gateway's agent's of that name; the operator's
                    # own ask's under the operator's own key, which no agent's decision reads.
                    self.store.persist_allow_always(saved_under(ctx), patterns)
                except Exception as exc:
                    log.warning("could not persist allow-always patterns %s: %s", patterns, exc)
            return True, "", approved
        # Expired (or gateway shutdown): askFallback decides (reference §3.11 table), the stricter of the
        # one frozen at ask time and today's: the operator may have taken the fallback away since.
        fallback = min_security(record.request.ask_fallback, today.ask_fallback or "deny")
        if fallback == "full":
            return True, "", approved
        if fallback == "allowlist":
            if d.analysis_ok and d.allowlist_satisfied and d.enforced_command:
                return True, "", prepared.command_to_run()
            return False, "approval-timeout (allowlist-miss)", prepared.command
        return False, "approval-timeout", prepared.command

    # -- detached (post-approval) runs

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _detached(
        self, record: ApprovalRecord, prepared: Prepared, call: ExecRequest, ctx: ExecContext
    ) -> None:
        """Wait for the decision, run detached, and report with a follow-up system event."""
        try:
            try:
                result = await self._approved_run(record, prepared, call, ctx, detached=True)
            except (ToolError, OSError) as exc:
                log.warning("approved command failed to start: %s", exc)
                self._emit(ctx, f"Exec denied (gateway id={record.id}, spawn-failed): {prepared.command}")
                return
            if result is None:
                return
            if result.details.get("status") == "running" and self._wait_session is not None:
                sid = str(result.details.get("sessionId", ""))
                result = await self._wait_session(sid, ctx.scope_key)
                note_run(
                    self.approvals,
                    record,
                    result,
                    session_id=sid,
                    slot=record.slot(ctx.session_key, asker=asker(ctx)),
                )
                result.details.setdefault("sessionId", sid)
            self._report(ctx, record, result)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("detached exec for approval %s failed", record.id)

    def _report(self, ctx: ExecContext, record: ApprovalRecord, result: ToolResult) -> None:
        """Tell the agent what its approved call led to, as a system event (the denial, or the run)."""
        if result.details.get("status") == "denied":
            self._emit(ctx, result.text)
        else:
            self._emit(ctx, finished_text(record, str(result.details.get("sessionId", "")), result))

    def _emit(self, ctx: ExecContext, text: str) -> None:
        self.events.enqueue(ctx.scope_key, text)  # the run's owner's queue (the operator's own, for its run)

    def _report_orphan(
        self,
        task: asyncio.Future[ToolResult | None],
        record: ApprovalRecord,
        prepared: Prepared,
        ctx: ExecContext,
    ) -> None:
        """The foreground caller disconnected mid-approval: tell the agent what happened anyway."""
        if task.cancelled() or task.exception() is not None:
            return
        result = task.result()
        if result is not None:
            self._report(ctx, record, result)

    async def close(self) -> None:
        await self._uses.close()
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _input_refused(prepared: Prepared) -> str:
    """Why the agent may not type into this run, allowed without a human (engine.commands.stdindata): on
    the host under an allowlist, the keys and stdin it writes later are input no entry described. A
    sandboxed run, `security=full` and elevated runs allow any input, as they allow any command."""
    policy = prepared.decision.policy
    if prepared.host != "gateway" or policy is None or policy.security != "allowlist":
        return ""
    if policy.bypass_approvals:
        return ""
    return input_refusal(prepared.decision.segments)


def _input_refused_unless_full(prepared: Prepared) -> str:
    """What _input_refused would say had the run started under an allowlist, for a host run that
    `security=full` or elevation let start unasked: its input is open only while that policy lasts
    (engine.tools.decide.input_refused_now); a move to allowlist closes it as it would close a new run."""
    policy = prepared.decision.policy
    if prepared.host != "gateway" or policy is None or _input_refused(prepared):
        return ""
    if policy.security != "full" and not policy.bypass_approvals:
        return ""
    return input_refusal(prepared.decision.segments)
