"""`system.run` (reference §5.4): a gateway's command decided by this node's own policy, run and answered."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from engine.commands.rawcommand import format_exec_command
from engine.errors import InvalidInput
from engine.nodes.wire import NodeEvent
from engine.principals import key_owner
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.sessions import SessionManager
from engine.tools.exec import ExecContext, ExecTool
from runner.node import gateways
from runner.node.approvals import CURRENT_RUN, RelayedApprovals
from runner.node.quota import GATEWAY_BUDGET
from runner.node.revoke import Revoked
from runner.node.runs import RunLedger

OUTPUT_CAP = 1_000_000  # characters of the merged output in one system.run result (the tail is kept)
SPLIT_CAP = 200_000  # characters of stdout and of stderr kept apart per run (reference OUTPUT_CAP)
EVENT_OUTPUT_CAP = 20_000  # reference §5.5: exec.finished carries the last 20k
SHELL_WRAPPERS = {("/bin/sh", "-lc"), ("sh", "-lc"), ("/bin/sh", "-c"), ("sh", "-c"), ("/bin/bash", "-lc")}
MIN_BUDGET = 1 << 20  # the least maxOutputBytesPerAgent a config may say (engine.config.schema)
ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
SCOPE = re.compile(r"^[A-Za-z0-9_.:@-]{1,160}$")  # `operator:` and a session key (principals.operator_key)


def _streams(details: dict[str, Any], merged: str) -> dict[str, str]:
    """stdout and stderr apart as the reference answers them, `... (truncated)` on the one that ends it."""
    stdout, stderr = details.get("stdout"), details.get("stderr")
    if not isinstance(stdout, str) or not isinstance(stderr, str):  # not kept apart: all of it is stdout
        return {"stdout": merged[-OUTPUT_CAP:], "stderr": ""}
    if details.get("streamsTruncated"):
        if stderr:
            stderr += "\n... (truncated)"
        else:
            stdout += "\n... (truncated)"
    return {"stdout": stdout, "stderr": stderr}


class RunError(Exception):
    def __init__(self, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra or {}


def command_text(argv: Any, raw: Any) -> str:
    """The shell text to decide and run; refuses argv/rawCommand that disagree (RAW_COMMAND_MISMATCH)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise RunError("INVALID_REQUEST", "INVALID_REQUEST: command must be a non-empty array of strings")
    if any("\x00" in a for a in argv):
        raise RunError("INVALID_REQUEST", "INVALID_REQUEST: command contains a NUL byte")
    payload = argv[2] if len(argv) == 3 and (argv[0], argv[1]) in SHELL_WRAPPERS else None
    if raw is not None and (not isinstance(raw, str) or raw not in (format_exec_command(argv), payload)):
        raise RunError("RAW_COMMAND_MISMATCH", "INVALID_REQUEST: rawCommand does not match command")
    if payload is not None:
        return payload
    import shlex

    return shlex.join(argv)


class SystemRun:
    """The node's `system.run`: the gateway's runs decided by the node's exec tools (the sandbox one for a
    command the gateway sandboxed), recorded in the run ledger, their ends told as events."""

    def __init__(
        self,
        tool: ExecTool,
        sandbox_tool: ExecTool,
        sessions: SessionManager,
        runs: RunLedger,
        approvals: RelayedApprovals,
        emit: Callable[[NodeEvent], Awaitable[None]],
        runs_in_flight: dict[str, list[tuple[str, str]]],
        revoked: Revoked | None = None,
    ) -> None:
        self.tool = tool
        self.sandbox_tool = sandbox_tool
        self.sessions = sessions
        self.runs = runs
        self.approvals = approvals
        self._emit = emit
        # owner (namespace + agent) -> (the gateway's namespace, its run id) of the runs running here
        self.runs_in_flight = runs_in_flight
        self.revoked = revoked  # the gateways' revoked credentials (agent.revoke): their runs refused

    def _refused(self, agent_id: str, p: dict[str, Any]) -> bool:
        ns = gateways.CURRENT_GATEWAY.get()
        return self.revoked is not None and self.revoked.refused(ns, agent_id, p.get("credential"))

    async def run(self, p: dict[str, Any]) -> dict[str, Any]:
        text = command_text(p.get("command"), p.get("rawCommand"))
        agent_id = p.get("agentId") or "main"
        session_key = p.get("sessionKey") or "node"
        run_id = p.get("runId") or ""
        for label, value in (("agentId", agent_id), ("sessionKey", session_key), ("runId", run_id or "x")):
            if not isinstance(value, str) or not ID.match(value):
                raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: bad {label}")
        if self._refused(agent_id, p):
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: agent {agent_id} was revoked")
        if not run_id:
            return await self._run(p, text, agent_id, session_key, run_id)
        # Filed under the gateway's namespace as everything else here: another gateway's run of the same id
        # (a run id is the gateway's to choose) is never this one, nor told of by `runs.status`.
        ledger_id = gateways.CURRENT_GATEWAY.get() + run_id
        self.runs.began(ledger_id)
        outcome: dict[str, Any] = {"state": "failed", "message": "node error"}
        try:
            answer = await self._run(p, text, agent_id, session_key, run_id)
            sid = answer.get("sessionId")
            running = answer.get("status") == "running" and isinstance(sid, str)
            outcome = {"state": "running-session", "sessionId": sid} if running else {"state": "ended"}
            return answer
        except RunError as exc:
            # A denial was told by its exec.denied event; any other refusal only by this answer.
            denied = str(exc).startswith("SYSTEM_RUN_DENIED")
            outcome = {"state": "ended"} if denied else {"state": "failed", "message": str(exc)[:500]}
            raise
        finally:
            self.runs.answered(ledger_id, outcome)

    async def _run(
        self, p: dict[str, Any], text: str, agent_id: str, session_key: str, run_id: str
    ) -> dict[str, Any]:
        background = p.get("background") is True
        sandboxed = p.get("sandbox") is True
        params: dict[str, Any] = {"command": text, "yieldMs": 120_000, "background": background}
        if sandboxed:
            params["host"] = "sandbox"  # in a container on this node's Docker, shaped by its settings
        if p.get("pty") is True:
            params["pty"] = True  # a terminal on the node: send-keys/paste/write reach it through `process`
        # The gateway's effective policy rides along as per-call values: they can only tighten here.
        for key in ("security", "ask"):
            if p.get(key) is not None:
                params[key] = p[key]
        if isinstance(p.get("cwd"), str) and p["cwd"]:
            params["workdir"] = p["cwd"]
        if p.get("env") is not None:
            params["env"] = p["env"]
        timeout_ms = p.get("timeoutMs")
        if isinstance(timeout_ms, (int, float)) and not isinstance(timeout_ms, bool) and timeout_ms > 0:
            params["timeout"] = max(1, int(timeout_ms // 1000))
        # The scope is the gateway's (its sessionKey, else the agent's): `process` there finds these sessions.
        try:
            call = ExecRequest.decode(params)
        except InvalidInput as exc:
            raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: {exc}") from None
        # Filed under the gateway's key (runner.node.gateways): another gateway's agent of the same name
        # finds nothing of it; its events go only to this gateway's link, in its own terms.
        ns = gateways.CURRENT_GATEWAY.get()
        own = p.get("sessionKey") or ""
        # Everything else it files (host resources, its sandbox, allow-always entries, grants) is the
        # gateway's agent's too: keyed by namespace and agent, as its sessions are (ExecContext.owner);
        # policy is still the agent's by name.
        # The gateway's filing of its operator's own run (ExecContext.scope_key): that gateway's, no agent's.
        filed = p.get("scopeKey")
        if filed is not None and (not isinstance(filed, str) or not SCOPE.match(filed) or key_owner(filed)):
            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: bad scopeKey (an ownerless key)")
        ctx = ExecContext(
            agent_id=agent_id,
            session_key=ns + (own or f"agent:{agent_id}") if ns else own,
            namespace=ns,
            filed_under=ns + filed if filed else "",
        )
        session_key = ns + session_key
        suppress = bool(p.get("suppressNotifyOnExit"))
        budget = p.get("maxOutputBytes")
        if budget is not None and (type(budget) is not int or budget < MIN_BUDGET):
            raise RunError(
                "INVALID_REQUEST", f"INVALID_REQUEST: maxOutputBytes must be an int >= {MIN_BUDGET}"
            )
        budget_token = GATEWAY_BUDGET.set(budget)  # the gateway's budget for its agent only tightens ours
        token = CURRENT_RUN.set(run_id)
        in_flight = self.runs_in_flight.setdefault(ctx.owner, [])
        mine = (ns, run_id)
        in_flight.append(mine)  # (its sandbox's egress asks go as part of it: runner.node.egress)
        try:
            result = await (self.sandbox_tool if sandboxed else self.tool).run(call, ctx)
        except ToolError as exc:
            await self._event_denied(session_key, run_id, text, str(exc), suppress)
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {exc}") from None
        finally:
            CURRENT_RUN.reset(token)
            GATEWAY_BUDGET.reset(budget_token)
            in_flight.remove(mine)
            if not in_flight:
                self.runs_in_flight.pop(ctx.owner, None)
        details = result.details
        if details.get("status") == "denied":
            reason = str(details.get("reason") or "denied")
            await self._event_denied(session_key, run_id, text, reason, suppress)
            # A human's (or the clock's) denial, apart from a policy refusal: the gateway answers it as a
            # denied result (exit 11), with the operator's own words when they gave some.
            extra = {"denied": reason}
            record = self.approvals.lookup(str(details.get("approvalId") or ""))
            said = record.reason if record is not None else None
            if said:
                extra["operatorReason"] = said
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {reason}", extra)
        if details.get("status") == "running" and self._refused(agent_id, p):
            # Its agent's revoke came while this run was decided: what it started ends with the rest.
            session = self.sessions.get(str(details.get("sessionId") or ""))
            if session is not None:
                self.sessions.request_kill(session)
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: agent {agent_id} was revoked")
        if details.get("status") == "running" and background:
            return {
                "status": "running",
                "sessionId": details.get("sessionId"),
                "pid": details.get("pid"),
                "text": result.text,
            }
        if details.get("status") == "running":
            result = await self._wait(str(details.get("sessionId") or ""), ctx.scope_key, result)
            details = result.details
        return await self._finished(result, session_key, run_id, text, suppress)

    async def _wait(self, session_id: str, scope_key: str, result: ToolResult) -> ToolResult:
        session = self.sessions.get(session_id, scope_key)
        if session is None:
            return result
        await session.done.wait()
        details: dict[str, Any] = {
            "status": "completed" if session.exit_code == 0 else "failed",
            "exitCode": session.exit_code,
            "timedOut": session.timed_out,
            "aggregated": session.output.aggregated(),
            "cwd": session.cwd,
        }
        streams = session.output.streams()
        if streams is not None:
            details["stdout"], details["stderr"], details["streamsTruncated"] = streams
        return ToolResult("", details)

    async def _finished(
        self, result: ToolResult, session_key: str, run_id: str, text: str, suppress: bool
    ) -> dict[str, Any]:
        d = result.details
        output = str(d.get("aggregated") or "")
        exit_code = d.get("exitCode")
        # The local result appends its exit note; the node reports the code as a field instead.
        note = f"(Command exited with code {exit_code})"
        if output.endswith(note):
            output = output[: -len(note)].rstrip("\n")
        timed_out = bool(d.get("timedOut"))
        payload = {
            "exitCode": exit_code,
            "timedOut": timed_out,
            "success": exit_code == 0 and not timed_out,
            # Reference fields apart; `output` is both merged as they were read, which the gateway
            # shows the agent (the reference's `stdout || stderr` would hide stderr whenever stdout exists).
            **_streams(d, output),
            "output": output if len(output) <= OUTPUT_CAP else output[-OUTPUT_CAP:],
            "error": None if d.get("status") == "completed" else (result.text if not output else None),
            "durationMs": d.get("durationMs"),
            "cwd": d.get("cwd"),
        }
        event = {
            "sessionKey": session_key,
            "runId": run_id,
            "host": "node",
            "command": text,
            "exitCode": exit_code,
            "timedOut": timed_out,
            "success": payload["success"],
            "output": output[-EVENT_OUTPUT_CAP:],
            "suppressNotifyOnExit": suppress,
        }
        await self._emit(NodeEvent("exec.finished", event))
        return payload

    async def _event_denied(
        self, session_key: str, run_id: str, text: str, reason: str, suppress: bool
    ) -> None:
        payload = {
            "sessionKey": session_key,
            "runId": run_id,
            "host": "node",
            "command": text,
            "reason": reason,
            "suppressNotifyOnExit": suppress,
        }
        await self._emit(NodeEvent("exec.denied", payload))
