"""What an exec call carries and what it must satisfy before anything is decided: the input limits, the
per-call enums, who is calling, what the tool needs from its collaborators, and the prepared run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRecord
from engine.approvals.store import Use
from engine.config.model import Config
from engine.modes import ASKS, HOSTS, SECURITIES
from engine.policy.decision import Decision
from engine.principals import operator_key
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.sandbox.settings import is_sandboxed
from engine.tools.texts import FOLLOWUP_OUTPUT_CHARS, compact

# Inputs are capped at submission so no agent can blow up the operator's views (issue 9 item 14). Linux
# takes no single argument over 128 KiB (MAX_ARG_STRLEN) anyway; longer scripts belong in a file.
COMMAND_MAX_BYTES = 64 * 1024
ENV_MAX_BYTES = 64 * 1024
WORKDIR_MAX_BYTES = 4096
NODE_UNAVAILABLE = (
    "exec host=node is not available yet: remote nodes arrive in a later release. "
    "Use host=gateway (or host=auto) instead."
)


# The call's params an ask keeps on disk, so the next gateway can prepare the same run again.
RESUME_PARAMS = (
    "command", "workdir", "defaultWorkdir", "env", "host", "security", "ask", "node", "elevated", "pty",
    "background", "timeout", "yieldMs", "reason",
)  # fmt: skip

_ENUMS = {"host": HOSTS, "security": SECURITIES, "ask": ASKS}


def check_enums(call: Mapping[str, Any]) -> None:
    """A per-call host/security/ask the engine does not know is refused, as `policy check` refuses it:
    ignoring it would run the command under a policy the caller did not ask for."""
    for key, allowed in _ENUMS.items():
        value = call.get(key)
        if value is not None and value not in allowed:
            raise ToolError(f"invalid {key} {value!r} (expected {'|'.join(allowed)})")


def clamped(call: Mapping[str, Any], decision: Decision) -> list[str]:
    """Say so when a per-call security/ask was clamped by the policy (it may only tighten)."""
    notes = []
    for key, applied in (("security", decision.security), ("ask", decision.ask)):
        wanted = call.get(key)
        if wanted is not None and applied is not None and wanted != applied:
            notes.append(f"Note: {key}={wanted} was requested; the policy's {key}={applied} applies.")
    return notes


def agent_reason(value: str | None) -> str | None:
    """The agent's stated reason as the operator sees it: trimmed, at most 500 characters."""
    if value is None or not value.strip():
        return None
    return value.strip()[:500]


RUN_IDENTITY = ("instance", "scopeKey")  # what names an approval's run alone (engine.sessions.Session.is_run)


def note_run(
    approvals: ApprovalManager,
    record: ApprovalRecord,
    result: ToolResult,
    session_id: str | None = None,
    slot: dict[str, Any] | None = None,
    identity: Mapping[str, Any] | None = None,
) -> None:
    """Link the run to its approval (`slot`: a joined requester's): `approvals.status` and the decision
    history report it. The run keeps the identity its start was recorded with (`instance`, `scopeKey`):
    a requester has one run, and only that identity tells it from a later session under the same id."""
    d = result.details
    sid = session_id or d.get("sessionId")
    before = identity or (record.run if slot is None else slot.get("run")) or {}
    kept = {k: before[k] for k in RUN_IDENTITY if sid and before.get(k) is not None}
    approvals.note_run(
        record,
        {
            "sessionId": sid,
            **kept,
            "status": d.get("status"),
            "exitCode": d.get("exitCode"),
            "tail": compact(str(d.get("aggregated") or d.get("tail") or ""), FOLLOWUP_OUTPUT_CHARS),
            **({"reason": d["reason"]} if d.get("reason") else {}),
        },
        slot,
    )


def within(what: str, text: str, limit: int, hint: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ToolError(f"exec denied: {what} is {size} bytes, over the {limit}-byte limit ({hint})")


class Sessions(Protocol):
    """The part of engine.sessions.SessionManager the exec tool uses."""

    async def run(self, spec: Any) -> ToolResult: ...
    def new_id(self) -> str: ...
    def get(self, session_id: str, scope_key: str | None = None) -> Any: ...
    async def ready(self, session_id: str | None = None) -> None: ...


class Store(Protocol):
    def snapshot(self) -> Any: ...
    def entries(self, agent_id: str) -> Any: ...
    def record_uses(self, uses: Sequence[Use]) -> None: ...
    def persist_allow_always(self, agent_id: str, patterns: Any) -> Any: ...


class Events(Protocol):
    def enqueue(self, session_key: str, text: str) -> None: ...


# host=node: (command, call, ctx, the gateway's decision) -> result; the node's own policy decides there.
NodeRunner = Callable[[str, ExecRequest, "ExecContext", Decision], Any]


@dataclass
class ExecContext:
    """Who is calling: the agent, its session key (system-event queue and process scope)."""

    agent_id: str = "main"
    session_key: str = ""
    operator: bool = False  # the operator's own call: no agent's quota applies (engine.sessions.quota)
    # The operator's call naming no agent (fresh round 15 b): the agent is its policy only (main), and its
    # runs' private dirs and network namespace are the operator's own (engine.commands.hostprivate.space).
    # One naming an agent acts for it, in its places too (runner.gateway.handlers.common.agent_id).
    operators_own: bool = False
    # Which of the agent's clients calls (a connection): its decisions take turns with the agent's others'.
    caller: str = ""
    # The credential the caller proved itself with (principals.credential_id), "" for none (a Unix account,
    # the gateway token, the operator): an ask it made is run after a restart only while that still holds.
    credential: str = ""
    # The agent's credential generation when the call was taken up (engine.approvals.generations): an ask
    # this run makes after a revoke or rotation of its agent is refused. None: not stamped (the operator).
    generation: int | None = None
    # False once the caller has gone away (its connection closed): results then go out as system events.
    caller_alive: Callable[[], bool] = field(default=lambda: True, repr=False)
    # Told once the call starts waiting for a human ({approvalId, approvalSlug, expiresAtMs, command}), so
    # the caller can say so (the CLI on stderr, MCP as progress) instead of hanging silently.
    on_waiting: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)
    # The calling gateway's namespace on a node shared by several (`<fingerprint>/`, runner.node.gateways),
    # "" on a gateway and for an anonymous link: everything the node files for this call — its host
    # resources (private dirs, kept view, pids cgroup), its sandbox's scope, its allow-always entries and
    # grants — is keyed by `owner` (namespace + agent), so two gateways' agents of one name never share any
    # of it. Policy (config, the approvals file's policy fields) is still the agent's by name (agent_id).
    namespace: str = ""
    # The scope the run is filed under, when the caller decided it (a node: the gateway's filing of an
    # operator's run, under its namespace); "" derives it below.
    filed_under: str = ""

    @property
    def scope_key(self) -> str:
        """Whose the run is (its session, output, events, `process` verbs, durable records): the principal
        that runs it owns it. An operator's run is the operator's (principals.operator_key), whatever agent
        it names for policy; an agent's is its session key's, else the agent's own scope. Policy reads
        `agent_id` and `session_key`, never this."""
        if self.filed_under:
            return self.filed_under
        if self.operator:
            return operator_key(self.session_key)
        return self.session_key or f"agent:{self.agent_id}"

    @property
    def owner(self) -> str:
        """The id every per-agent resource and approval of this call is keyed by (namespace + agent)."""
        return self.namespace + self.agent_id


@dataclass
class Prepared:
    """Everything decided before a command may run."""

    command: str
    decision: Decision
    cwd: str
    env: dict[str, str] | None
    warnings: list[str] = field(default_factory=list)
    launcher: Any = None
    host: str = "gateway"
    shown_cwd: str | None = None  # the workdir as the agent named it, when `cwd` is its private copy's

    def command_to_run(self, *, approved: bool = False) -> str:
        """The command that will run where this is prepared (Decision.command_to_run)."""
        return self.decision.command_to_run(sandboxed=self.host == "sandbox", approved=approved)


def sandbox_available(config: Config, agent_id: str, session_key: str) -> bool:
    """A sandbox runtime applies: mode=all, or mode=non-main outside the agent's main session."""
    return is_sandboxed(config.sandbox_value(agent_id, "mode"), agent_id, session_key)
