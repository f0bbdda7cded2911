"""One ask for approval and the record of its life: the shapes the approval manager queues and decides."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine import ostext
from engine.approvals.decisions import DECISIONS
from engine.approvals.grants import GrantLimits
from engine.approvals.schema import OPERATOR_PRINCIPAL
from engine.errors import ExecHostError

# How many requesters a view, an event or a decision line names; `count`/`requesterCount` say how many.
SHOWN_REQUESTERS = 8
NOT_UTF8 = (
    "a path or name here is not UTF-8: it is shown as bash would quote its bytes, $'…' with each byte that "
    "is not UTF-8 as \\xNN"
)
# Who asked, when it was the operator (ApprovalRequest.asker): no proof key is this (they hold `>`).
OPERATOR_ASKER = "operator"


class ApprovalError(ExecHostError):
    """A resolve that cannot be applied; `code` is machine-readable, str() is the reference text."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def env_hash(env: Mapping[str, str] | None) -> str:
    """sha256 over the sorted (key, value) pairs, as OpenClaw binds an approval to its env."""
    pairs = sorted((env or {}).items())
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class ApprovalRequest:
    """What a human is asked to approve; identical requests (all fields equal) coalesce."""

    command: str
    cwd: str
    host: str = "gateway"
    agent_id: str = "main"
    session_key: str = ""
    security: str = "allowlist"
    ask: str = "on-miss"
    ask_fallback: str = "deny"
    allowed_decisions: tuple[str, ...] = DECISIONS
    resolved_path: str | None = None
    node_id: str | None = None
    env_hash: str = ""
    # A node's relayed ask: the node-side approval it answers. Part of the identity, so two asks from a
    # node (even for the same command) are two records, each decided once, never one for the other.
    node_approval_id: str | None = None
    # The env overrides the command gets beyond the sanitised base, keys and values: the approver sees them.
    env: tuple[tuple[str, str], ...] = ()
    # The digests of the files it runs (Decision.content.key()): an ask for other bytes never coalesces.
    content_key: str = ""
    # The policy decision behind the ask (Decision.to_json()): shown to the approver, not part of identity.
    decision_json: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    warnings: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # The agent's own words on why it runs this (the `reason` param): shown, never trusted.
    agent_reason: str | None = field(default=None, compare=False, hash=False)
    # A node's ask: the node's name in this gateway's config, what the operator knows it by (node_id,
    # the id it proved on the link, is the identity; the name is display, set from the link too).
    node_name: str | None = field(default=None, compare=False, hash=False)
    # A sandbox's connection waiting for a name ("name:port", engine.sandbox.egress), not a command.
    egress: str | None = None
    # Whose ask it is on a node shared by several gateways (ExecContext.owner: `<namespace><agent>`), ""
    # elsewhere: part of the question, so one gateway's human never answers another gateway's agent's ask.
    owner: str = ""
    # The principal that asked (fresh round 16 b): `operator` (OPERATOR_ASKER) for the operator's calls,
    # whatever agent they name, else the agent (its owner); "" on an ask from before it was kept. The
    # agent above is whose *policy* decides; this is *who* asked: part of the requester's identity and the
    # key of its share of pending asks, so the operator's call and an agent's identical call are never one
    # requester. (The proof that made a caller its agent is the record's `proofs`, not this.)
    asker: str = ""

    def __post_init__(self) -> None:
        # The record owns its text (fresh round 17 b): a path the gateway read from the agent's tree that is
        # not UTF-8 enters it here in its one exact, showable form (engine.ostext), so no view, journal line,
        # decision log line or frame of it can fail to encode, whichever code made the ask.
        changed = False
        for name in ("command", "cwd", "resolved_path", "agent_reason", "node_name", "egress"):
            text = getattr(self, name)
            if text is not None and not text.isascii() and ostext.holds_surrogate(text):
                object.__setattr__(self, name, ostext.shown(text))
                changed = True
        for name in ("env", "decision_json", "warnings"):
            value = getattr(self, name)
            clean = ostext.shown_json(value)
            if clean is not value:
                object.__setattr__(self, name, tuple(map(tuple, clean)) if name == "env" else clean)
                changed = True
        if changed:
            object.__setattr__(self, "warnings", (*self.warnings, NOT_UTF8))

    @property
    def principal(self) -> str:
        """Whose share of pending asks this ask counts in: the operator's own (OPERATOR_PRINCIPAL) for the
        operator's call, else its owner where it has one, else its agent."""
        return share(self, self.asker)

    def question(self) -> ApprovalRequest:
        """What makes two asks one question for the operator: everything but who asked (the principal,
        the session, a node's own approval id). Asks equal here wait as one record; one decision answers
        them all, each requester's run its own principal's."""
        return replace(self, session_key="", node_approval_id=None, asker="")

    def who(self) -> tuple[str, str, str | None]:
        """This ask's requester: the principal that asked, its session, a node's own approval id."""
        return (self.asker, self.session_key, self.node_approval_id)

    def requester(self) -> dict[str, Any]:
        return {
            **({"principal": self.asker} if self.asker else {}),  # who asked (absent: nothing stamped)
            "sessionKey": self.session_key,
            "host": self.host,
            "nodeId": self.node_id,
            "nodeName": self.node_name,
            "nodeApprovalId": self.node_approval_id,
            "atMs": now_ms(),
        }

    def to_json(self) -> dict[str, Any]:
        d = self.decision_json
        segments = d.get("segments") or []
        return {
            "command": self.command,
            "cwd": self.cwd,
            "host": self.host,
            "agentId": self.agent_id,
            "sessionKey": self.session_key,
            "security": self.security,
            "ask": self.ask,
            "askFallback": self.ask_fallback,
            "allowedDecisions": list(self.allowed_decisions),
            "resolvedPath": self.resolved_path,
            "nodeId": self.node_id,
            "nodeName": self.node_name,
            "nodeApprovalId": self.node_approval_id,
            "envKeys": [k for k, _ in self.env],
            "env": dict(self.env),
            "analysisOk": d.get("analysisOk"),
            "analysisReason": d.get("analysisReason"),
            "segments": segments,
            "allowAlwaysPatterns": list(d.get("allowAlwaysPatterns") or []),
            "contentDigests": list(d.get("contentDigests") or []),
            "warnings": list(self.warnings),
            "agentReason": self.agent_reason,
            "egress": self.egress,
            "decision": d or None,
        }


def share(request: ApprovalRequest, asker: str) -> str:
    """The share of pending asks an ask by `asker` on `request` counts in: the operator's own, never
    filled by an agent, else the agent's (its owner on a shared node)."""
    return OPERATOR_PRINCIPAL if asker == OPERATOR_ASKER else request.owner or request.agent_id


def who_of(entry: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """A requester entry's identity (ApprovalRequest.who); an entry from before principals were kept
    has none ("")."""
    return (str(entry.get("principal") or ""), entry.get("sessionKey") or "", entry.get("nodeApprovalId"))


@dataclass
class ApprovalRecord:
    id: str
    request: ApprovalRequest
    created_at_ms: int
    expires_at_ms: int
    decision: str | None = None
    resolved_by: str | None = None
    resolved_at_ms: int | None = None
    consumed: set[tuple[str, str, str | None]] = field(default_factory=set)  # requesters whose run was taken
    count: int = 1  # identical requests coalesced into this one
    # Who asked this question, one entry per coalesced ask (sessions, nodes): shown, and in the history.
    requesters: list[dict[str, Any]] = field(default_factory=list)
    grant_id: str | None = None  # the grant an allow-always with limits makes (chosen with the decision)
    reason: str | None = None  # the approver's note on a deny, passed back to the agent
    # What the approval led to, set by whoever ran it: sessionId, status, exitCode, tail.
    run: dict[str, Any] | None = None
    # The caller stopped waiting (Ctrl-C, a closed MCP call): approving runs it detached, result in events.
    requester_gone: bool = False
    # What the next gateway needs to run this ask as approved after a crash (engine.approvals.durable):
    # the call's params, the caller, and what was approved. None: an ask that cannot outlive its gateway.
    resume: dict[str, Any] | None = field(default=None, repr=False)
    # Each later requester coalesced into this ask (another session asking the same question): its own
    # resume data and its own run, {"sessionKey", "nodeApprovalId", "resume", "run"}, so a crash loses
    # none of the runs one decision promised. `resume` and `run` above are the first requester's.
    joined: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # allow-always with limits (--for/--uses/this session): a grant instead of a permanent entry.
    grant: GrantLimits | None = None
    future: asyncio.Future[str | None] = field(repr=False, kw_only=True)
    # Its agent was revoked after the approval: a run not started yet never starts (revoke_agent).
    revoked: bool = field(default=False, kw_only=True)
    # request.question(), computed once: the coalescing key is looked up at register and at the decision.
    question: ApprovalRequest | None = field(default=None, repr=False, compare=False, kw_only=True)
    # The oldest credential generation any of its requesters' runs was authorized under
    # (engine.approvals.generations), None when none was stamped (the operator's, a restored ask's: those
    # are settled by the credential their resume names). A revoke or rotation that makes it stale settles
    # the ask at once, whatever kind it is (a command, an egress name, a node's): nobody can approve it.
    generation: int | None = field(default=None, compare=False, kw_only=True)
    # Asked by the operator's own run where no resume says so (a node's relayed ask for it): `operators`.
    by_operator: bool = field(default=False, compare=False, kw_only=True)
    # The proofs other than a credential that made its requesters the agent (a uid mapping, the gateway
    # token alone), each at the oldest generation one was stamped under: a config change that cuts one off
    # settles the ask as a revoke would (ApprovalManager.end_proofs).
    proofs: dict[str, int] = field(default_factory=dict, compare=False, kw_only=True)

    def slot(
        self, session_key: str | None, node_approval_id: str | None = None, asker: str | None = None
    ) -> dict[str, Any] | None:
        """The joined requester's entry for this caller, or None for the first requester (whose resume
        data and run are the record's own). `asker`: the principal that asked (ApprovalRequest.asker), so
        two principals' calls from one session key are two requesters; None: any principal."""
        if asker is not None and (asker, session_key or "", node_approval_id) == self.request.who():
            return None
        for entry in self.joined:
            if (entry.get("sessionKey"), entry.get("nodeApprovalId")) != (session_key, node_approval_id):
                continue
            if asker is None or str(entry.get("principal") or "") == asker:
                return entry
        return None

    @property
    def operators(self) -> bool:
        """Only the operator's own calls asked it (every requester's resume says so): no agent's ask,
        whatever agent they named for policy, so no agent is shown it (the principal that runs owns it)."""
        if self.by_operator and not self.joined:
            return True
        made = [self.resume, *(entry.get("resume") for entry in self.joined)]
        return self.resume is not None and all((r or {}).get("operator") is True for r in made)

    @property
    def cursor(self) -> str:
        """Sorts like creation order (ids break ties) and stays valid after the record is gone."""
        return f"{self.created_at_ms:015d}:{self.id}"

    @property
    def slug(self) -> str:
        return self.id[:8]

    @property
    def resolved(self) -> bool:
        return self.resolved_at_ms is not None

    def view(self) -> dict[str, Any]:
        """ApprovalView: what the console and `approvals pending` show."""
        return {
            "id": self.id,
            "slug": self.slug,
            "createdAtMs": self.created_at_ms,
            "expiresAtMs": self.expires_at_ms,
            "status": "pending" if not self.resolved else (self.decision or "expired"),
            "resolvedBy": self.resolved_by,
            "resolvedAtMs": self.resolved_at_ms,
            "reason": self.reason,
            "run": self.run,
            "requesterGone": self.requester_gone,
            "count": self.count,
            "requesterCount": len(self.requesters),
            "requesters": self.requesters[:SHOWN_REQUESTERS],
            "grant": self.grant.to_json() if self.grant else None,
            # The one session a "this session only" grant would belong to; None: that choice is refused.
            "sessionOwner": session_owner(self),
            **self.request.to_json(),
            **({"operator": True} if self.operators else {}),
        }


def unsettled(record: ApprovalRecord) -> bool:
    """Worth keeping on disk: still waiting, or approved and its run not started yet. Only asks the
    gateway can run again (with resume data) are kept; a node's relayed ask is the node's to keep."""
    if record.resume is None:
        return False
    if not record.resolved:
        return True
    if record.decision not in ("allow-once", "allow-always"):
        return False
    # Not run yet, or said to be starting (the next gateway finds out which: engine.tools.resume), for the
    # first requester or any that joined.
    runs = [record.run, *(entry.get("run") for entry in record.joined)]
    return any(run is None or run.get("status") == "starting" for run in runs)


NO_SESSION = (
    "'this session only' needs an ask from one session: this one came from a call with no session key (an "
    "`exechost exec`, an MCP server started without --session), and a grant bound to no session would cover "
    "every sessionless call of agent {agent}; choose a duration or a number of uses instead"
)
SEVERAL_SESSIONS = (
    "'this session only' needs an ask from one session: {count} sessions wait on this one, and a grant "
    "belongs to one of them; choose a duration or a number of uses instead"
)


def no_session_reason(record: ApprovalRecord) -> str:
    """Why 'this session only' is refused for `record` (session_owner found none)."""
    keys = {str(r.get("sessionKey") or "") for r in record.requesters}
    if "" in keys or not keys:
        return NO_SESSION.format(agent=record.request.agent_id)
    return SEVERAL_SESSIONS.format(count=len(keys))


def session_owner(record: ApprovalRecord) -> str | None:
    """The one session a 'this session only' grant on `record` belongs to: the session key every asker
    named; None when an asker named none (an ownerless key is every sessionless call's) or two differ."""
    keys = {str(r.get("sessionKey") or "") for r in record.requesters} or {record.request.session_key}
    key = keys.pop() if len(keys) == 1 else ""
    return key or None


def now_ms() -> int:
    return int(time.time() * 1000)
