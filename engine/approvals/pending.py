"""Pending exec approvals: register, coalesce, resolve by id or prefix, expire (DESIGN §7, ref §3.11)."""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from engine.approvals import generations as stamps
from engine.approvals.decisions import USAGE, normalize_decision
from engine.approvals.generations import Generations
from engine.approvals.grants import GrantLimits, new_grant_id
from engine.approvals.request import (
    ApprovalError,
    ApprovalRecord,
    ApprovalRequest,
    no_session_reason,
    now_ms,
    session_owner,
    unsettled,
    who_of,
)
from engine.approvals.room import (
    MAX_PENDING,
    MAX_PENDING_PER_AGENT,
    ApprovalRoom,
)

DEFAULT_TIMEOUT_MS = 1_800_000  # DEFAULT_EXEC_APPROVAL_TIMEOUT_MS
RESOLVED_GRACE_MS = 15_000  # RESOLVED_ENTRY_GRACE_MS: late waiters still find a resolved record
NOT_FOUND = "unknown or expired approval id"
AMBIGUOUS = "ambiguous approval id prefix; use the full id"
REVOKED = "agent revoked"
ALWAYS_UNAVAILABLE = "allow-always is unavailable because the effective policy requires approval every time"
# Issue 27 §5: the policy would offer allow-always, but the binder could not prove every code source bound.
ALWAYS_UNBOUND = (
    "allow-always is unavailable because not every file this command runs could be bound by content; "
    "allow-once runs it this time"
)


HISTORY_SIZE = 500  # decided approvals remembered for `approvals.status|history` (commands ≤ 64 KiB each)


Listener = Callable[[str, ApprovalRecord], None]
"""Called with ("requested" | "updated" | "resolved" | "ran", record); "updated": an identical ask was
coalesced (or its caller went away); "ran": `record.run` now says what the approval led to."""


class ApprovalManager(ApprovalRoom):
    """All pending approvals of one gateway, bound to the running event loop."""

    def __init__(
        self,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        grace_ms: int = RESOLVED_GRACE_MS,
        max_per_agent: int = MAX_PENDING_PER_AGENT,
        max_total: int = MAX_PENDING,
    ) -> None:
        self.timeout_ms = timeout_ms
        self.grace_ms = grace_ms
        self.max_per_agent = max_per_agent
        self.max_total = max_total
        self._records: dict[str, ApprovalRecord] = {}
        # Indexes over _records, so nothing per ask scans every record still in its grace window (a burst
        # of a thousand asks made each one walk a thousand decided records, twice).
        self._open: dict[str, ApprovalRecord] = {}  # not yet decided
        # Requesters waiting on them, per agent and in all (the queue caps, without a scan).
        self._open_per_agent: dict[str, int] = {}
        self._open_requesters = 0
        self._maybe_unsettled: dict[str, ApprovalRecord] = {}  # may still need to be on disk
        self._by_request: dict[ApprovalRequest, str] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._listeners: list[Listener] = []
        # Awaited before a decision is acted upon and before an ask is reported pending: the gateway
        # sets it to its durable writer's barrier (what was decided or asked is on disk first).
        self.barrier: Callable[[], Awaitable[None]] | None = None
        self.decided_barrier: Callable[[ApprovalRecord], Awaitable[None]] | None = None  # its decision
        # Why this record's latest state is not on disk (None: the write that held it succeeded). A barrier
        # returns either way; what must not go ahead unrecorded (a run's start) asks here after it. Per
        # record, never "the last write": a later write of other asks succeeding says nothing of this one.
        self.durable_problem: Callable[[ApprovalRecord], str | None] = lambda _record: None
        # Decided approvals, newest last: what became of each (decision history, `approvals.status`).
        self._history: deque[ApprovalRecord] = deque(maxlen=HISTORY_SIZE)
        # Bumped by every revoke and rotation: an ask from a run that began before is refused (register).
        self.generations = Generations()
        self.generations.listen(self._settle_stale)  # whoever bumps it (a revoke, a rotation, a node's)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, kind: str, record: ApprovalRecord) -> None:
        for listener in list(self._listeners):
            listener(kind, record)

    # -- registration

    def register(
        self,
        request: ApprovalRequest,
        timeout_ms: int | None = None,
        resume: dict[str, Any] | None = None,
        generation: int | None = None,
    ) -> tuple[ApprovalRecord, bool]:
        """(record, new_requester). The same question still pending returns that record: new_requester
        is True when this ask comes from someone not yet waiting on it (another session, another node
        approval), who then gets their own run from the one decision; False for a repeat. `generation`:
        the agent's credential generation its run began under; an older one than now is refused
        (AGENT_REVOKED): the agent was revoked or rotated since, and nothing that run asks is filed."""
        stamp = stamps.stamped()  # the call's own stamp: the proof its caller presented (None: none to note)
        proof = stamp.proof if stamp is not None and stamp.agent == request.agent_id else ""
        proof_generation = stamp.proof_generation if stamp is not None else 0
        if self.generations.stale(request.agent_id, generation) or self.generations.proof_ended(
            proof, proof_generation, live=True
        ):
            raise ApprovalError(
                "AGENT_REVOKED",
                f"exec denied: agent {request.agent_id} was revoked (or its credential rotated) after this "
                "run began; nothing it asks from then on is filed",
            )
        question = request.question()
        existing_id = self._by_request.get(question)
        if existing_id is not None:
            existing = self._records.get(existing_id)
            if existing is not None and not existing.resolved:
                existing.count += 1
                # Who asked, with the principal: the operator's call and an agent's from the same session
                # key (both sessionless) are two requesters, each shown, counted and run as its own.
                who = request.who()
                new = all(who_of(r) != who for r in existing.requesters)
                if new:
                    self._check_room(request)  # a join is one more ask waiting
                    existing.generation = _oldest(existing.generation, generation)
                    if proof:
                        kept = existing.proofs.get(proof, proof_generation)
                        existing.proofs[proof] = min(kept, proof_generation)
                    existing.requesters.append(request.requester())
                    self._joined_one(request)
                    if resume is not None and existing.resume is not None:
                        existing.joined.append(
                            {
                                **({"principal": request.asker} if request.asker else {}),
                                "sessionKey": request.session_key,
                                "nodeApprovalId": request.node_approval_id,
                                "resume": resume,
                                "run": None,
                            }
                        )
                self._notify("updated", existing)
                return existing, new
        self._check_fits(request)
        self._check_room(request)
        loop = asyncio.get_running_loop()
        ttl = self.timeout_ms if timeout_ms is None else timeout_ms
        now = now_ms()
        record = ApprovalRecord(
            id=str(uuid.uuid4()),
            request=request,
            created_at_ms=now,
            expires_at_ms=now + ttl,
            resume=resume,
            requesters=[request.requester()],
            future=loop.create_future(),
            question=question,
            generation=generation,
            proofs={proof: proof_generation} if proof else {},
        )
        self._records[record.id] = record
        self._opened(record)
        self._maybe_unsettled[record.id] = record
        self._by_request[question] = record.id
        self._timers[record.id] = loop.call_later(ttl / 1000, self._expire, record.id)
        self._notify("requested", record)
        return record, True

    def restore(
        self,
        approval_id: str,
        request: ApprovalRequest,
        *,
        created_at_ms: int,
        expires_at_ms: int,
        count: int = 1,
        requester_gone: bool = False,
        decision: str | None = None,
        resolved_by: str | None = None,
        resolved_at_ms: int | None = None,
        reason: str | None = None,
        resume: dict[str, Any] | None = None,
        requesters: list[dict[str, Any]] | None = None,
        grant: GrantLimits | None = None,
        grant_id: str | None = None,
        run: dict[str, Any] | None = None,
        joined: list[dict[str, Any]] | None = None,
    ) -> ApprovalRecord:
        """An ask the previous gateway left (same id, same expiry). Still waiting: it is pending again
        and expires when it would have (at once if that moment passed while no gateway ran). Already
        approved: it comes back decided, for its run to start."""
        loop = asyncio.get_running_loop()
        record = ApprovalRecord(
            id=approval_id,
            request=request,
            created_at_ms=created_at_ms,
            expires_at_ms=expires_at_ms,
            count=count,
            requester_gone=requester_gone,
            reason=reason,
            resume=resume,
            requesters=list(requesters) if requesters else [request.requester()],
            grant=grant,
            grant_id=grant_id,
            run=run,
            joined=[dict(entry) for entry in joined or [] if isinstance(entry, dict)],
            future=loop.create_future(),
            question=request.question(),
        )
        self._records[record.id] = record
        self._maybe_unsettled[record.id] = record
        if decision is not None and resolved_at_ms is not None:
            record.decision, record.resolved_by, record.resolved_at_ms = decision, resolved_by, resolved_at_ms
            record.future.set_result(decision)
            self._history.append(record)
            return record
        self._opened(record)
        self._by_request[record.question or request] = record.id
        delay = max(0.0, (expires_at_ms - now_ms()) / 1000)
        self._timers[record.id] = loop.call_later(delay, self._expire, record.id)
        self._notify("requested", record)
        return record

    def records(self) -> list[ApprovalRecord]:
        """Every record still held (pending, and decided ones within their grace window)."""
        return list(self._records.values())

    def unsettled_records(self) -> list[ApprovalRecord]:
        """The records worth keeping on disk (`unsettled`), in arrival order. A
        record once settled stays settled (decided, then run), so it leaves the index for good."""
        keep = []
        for record in list(self._maybe_unsettled.values()):
            if unsettled(record):
                keep.append(record)
            else:
                del self._maybe_unsettled[record.id]
        return keep

    def revoke_agent(self, agent_id: str) -> int:
        """The agent was revoked: what it asked before is not run after (`revoke_record` on each of its
        asks), and its runs in flight ask nothing more (a new generation). The number of asks it touched."""
        self.generations.bump(agent_id)
        touched = 0
        for record in [*self._open.values(), *self._maybe_unsettled.values()]:
            if record.request.agent_id == agent_id:
                touched += self.revoke_record(record)
        return touched

    def revoke_credential(self, agent_id: str, credential: str) -> int:
        """One credential of the agent no longer holds (rotated away): what was asked with it is settled
        as a revoke settles it (`revoke_record`), as the next gateway's restore would settle it. The number
        of asks or runs it ended. Its runs in flight ask nothing more (a new generation): a rotation is done
        because the old token leaked, and a run begun before it may be the leaker's. Every ask stamped with
        an older generation is settled too, whatever it carries (an egress ask has no resume to name the
        credential): the generation, not the ask's kind, says which credential authorized it."""
        ending = self.generations.current(agent_id) + 1  # settled first, counted here; then the bump
        touched = 0
        for record in [*self._open.values(), *self._maybe_unsettled.values()]:
            if record.request.agent_id != agent_id:
                continue
            made = [record.resume, *(entry.get("resume") for entry in record.joined)]
            named = any((r or {}).get("credential") == credential for r in made)
            if named or (record.generation is not None and record.generation < ending):
                touched += self.revoke_record(record)
        self.generations.bump(agent_id)
        return touched

    def _settle_stale(self, agent_id: str) -> None:
        """A bump: every ask of the agent stamped with an older generation is settled there and then."""
        for record in [*self._open.values(), *self._maybe_unsettled.values()]:
            if record.request.agent_id == agent_id and self.stale(record):
                self.revoke_record(record)

    def stale(self, record: ApprovalRecord) -> bool:
        """Whether a requester of `record` ran under a generation its agent's revoke or rotation ended, or
        under a proof the config has cut off since (decided against the config now)."""
        return self.generations.stale(record.request.agent_id, record.generation) or any(
            self.generations.proof_ended(key, gen, live=True) for key, gen in record.proofs.items()
        )

    def end_proofs(self, holds: Callable[[str], bool]) -> int:
        """The config changed: the proofs it cut off (an unmapped account, `anonymous = "none"`) end, and
        every ask made under one is settled as a revoke settles it (denied; approved, never started). Only
        the approvals' own settling hears it: the agent's credential and its other callers stand."""
        touched = 0
        for agent_id in set(self.generations.end_proofs(holds)):
            for record in [*self._open.values(), *self._maybe_unsettled.values()]:
                if record.request.agent_id == agent_id and self.stale(record):
                    touched += self.revoke_record(record)
        return touched

    def credentials_named(self) -> set[tuple[str, str]]:
        """(agent, credential id) of every credential an ask not yet over was made with (its requesters'
        resume data): the gateway compares each with the files at a recheck, so a credential removed on
        disk ends what it asked even when no connection of it is left (GatewayServer.recheck)."""
        named = set()
        for record in [*self._open.values(), *self._maybe_unsettled.values()]:
            if record.revoked or (record.resolved and record.decision not in ("allow-once", "allow-always")):
                continue
            for made in [record.resume, *(entry.get("resume") for entry in record.joined)]:
                credential = str((made or {}).get("credential") or "")
                if credential:
                    named.add((str((made or {}).get("agentId") or record.request.agent_id), credential))
        return named

    def revoke_record(self, record: ApprovalRecord) -> int:
        """Whoever asked was revoked (live, or while no gateway ran: engine.tools.resume): a pending ask is
        denied (reason "agent revoked"), and a run approved but not started yet is noted as denied, so
        neither this gateway nor the next (the note is on disk) starts it. How many asks or runs it ended."""
        if not record.resolved:
            record.reason = REVOKED
            self._finish(record, "deny", "revoke")
            return 1
        if record.decision not in ("allow-once", "allow-always"):
            return 0
        touched = 0
        record.revoked = True
        denied = {"status": "denied", "reason": REVOKED}
        if record.run is None:
            self.note_run(record, dict(denied))
            touched += 1
        for entry in record.joined:
            if entry.get("run") is None:
                self.note_run(record, dict(denied), entry)
                touched += 1
        return touched

    def requester_gone(self, approval_id: str) -> None:
        """The caller that waited for this ask went away; approvers are told (an "updated" event)."""
        record = self._records.get(approval_id)
        if record is not None and not record.resolved and not record.requester_gone:
            record.requester_gone = True
            self._notify("updated", record)

    def requester_back(self, approval_id: str) -> None:
        """The caller is waiting again (it reconnected after its gateway went away and follows the ask):
        approvers stop being told it left."""
        record = self._records.get(approval_id)
        if record is not None and not record.resolved and record.requester_gone:
            record.requester_gone = False
            self._notify("updated", record)

    async def wait(self, record: ApprovalRecord) -> str | None:
        """The decision, or None when the request expired; returned once it is recorded on disk."""
        decision = await asyncio.shield(record.future)
        if self.decided_barrier is not None:
            await self.decided_barrier(record)
        return decision

    async def durable(self) -> None:
        """Wait until what was asked and decided so far is on disk (no-op without a durable store)."""
        if self.barrier is not None:
            await self.barrier()

    # -- resolution

    def get(self, id_or_prefix: str) -> ApprovalRecord:
        """Exact id (pending or within the grace window), else a unique case-insensitive prefix of a
        pending id."""
        key = (id_or_prefix or "").strip()
        if not key:
            raise ApprovalError("APPROVAL_NOT_FOUND", NOT_FOUND)
        exact = self._records.get(key) or self._records.get(key.lower())
        if exact is not None:
            return exact
        low = key.lower()
        hits = [r for r in self._open.values() if r.id.lower().startswith(low)]
        if len(hits) > 1:
            raise ApprovalError("APPROVAL_AMBIGUOUS", AMBIGUOUS)
        if not hits:
            raise ApprovalError("APPROVAL_NOT_FOUND", NOT_FOUND)
        return hits[0]

    def resolve(
        self,
        id_or_prefix: str,
        decision: str,
        resolved_by: str = "operator",
        reason: str | None = None,
        grant: GrantLimits | None = None,
    ) -> tuple[ApprovalRecord, bool]:
        """(record, applied). A second resolve of the same record is ignored (applied=False).
        `grant` limits an allow-always (a duration, a number of uses, this session only)."""
        normalized = normalize_decision(decision)
        if normalized is None:
            raise ApprovalError("APPROVAL_BAD_DECISION", USAGE)
        record = self.get(id_or_prefix)
        if not record.resolved and self.stale(record):  # (settled at the bump; never approvable after it)
            self.revoke_record(record)
        if record.resolved:
            return record, False
        if normalized not in record.request.allowed_decisions:
            # The reference text names the policy; when the policy offers allow-always (ask is not
            # `always`), what withheld it was the content binder, and the text must say so.
            unbound = normalized == "allow-always" and record.request.ask != "always"
            raise ApprovalError(
                "APPROVAL_ALLOW_ALWAYS_UNAVAILABLE", ALWAYS_UNBOUND if unbound else ALWAYS_UNAVAILABLE
            )
        if grant is not None and normalized != "allow-always":
            raise ApprovalError("APPROVAL_BAD_DECISION", "limits (--for/--uses/--session) need allow-always")
        if grant is not None and grant.session_only and session_owner(record) is None:
            raise ApprovalError("APPROVAL_NO_SESSION", no_session_reason(record))
        if reason:
            record.reason = " ".join(str(reason).split())[:500]
        record.grant = grant
        # Chosen now and journaled with the decision, before anyone makes the grant (GrantStore.ensure):
        # a crash between the two makes this grant again, never a second one.
        record.grant_id = new_grant_id() if grant is not None else None
        self._finish(record, normalized, resolved_by)
        return record, True

    def withdraw(self, approver_key: str) -> int:
        """The asker identified by `approver_key` (a node or socket approval id) stopped waiting: a
        pending record only it was waiting on ends undecided; the number of records ended."""
        ended = 0
        for record in list(self._open.values()):
            keys = {r["nodeApprovalId"] for r in record.requesters}
            if keys == {approver_key}:
                self._finish(record, None, "withdrawn")
                ended += 1
        return ended

    def _expire(self, approval_id: str) -> None:
        record = self._records.get(approval_id)
        if record is not None and not record.resolved:
            self._finish(record, None, "expired")

    def _finish(self, record: ApprovalRecord, decision: str | None, resolved_by: str) -> None:
        record.decision = decision
        record.resolved_by = resolved_by
        record.resolved_at_ms = now_ms()
        self._closed(record)
        self._history.append(record)
        timer = self._timers.pop(record.id, None)
        if timer is not None:
            timer.cancel()
        question = record.question or record.request.question()
        if self._by_request.get(question) == record.id:
            del self._by_request[question]
        if not record.future.done():
            record.future.set_result(decision)
        loop = asyncio.get_running_loop()
        self._timers[record.id] = loop.call_later(self.grace_ms / 1000, self._forget, record.id)
        self._notify("resolved", record)

    def _forget(self, approval_id: str) -> None:
        self._timers.pop(approval_id, None)
        self._records.pop(approval_id, None)
        self._maybe_unsettled.pop(approval_id, None)

    def note_run(
        self, record: ApprovalRecord, run: dict[str, Any], slot: dict[str, Any] | None = None
    ) -> None:
        """Link the run an approval led to (session id, status): `approvals.status` and history show it.
        `slot`: a joined requester's run (ApprovalRecord.slot), kept with its entry and on disk."""
        if slot is not None:
            slot["run"] = run
        else:
            record.run = run
        self._notify("ran", record)

    def consume_allow_once(
        self,
        record: ApprovalRecord,
        session_key: str | None = None,
        node_approval_id: str | None = None,
        asker: str | None = None,
    ) -> bool:
        """True once per requester of an allow-once decision: one approval answers every ask that waited
        on it (another session's, another node approval's, another principal's), each runs once, and
        nothing after that. `asker`: the principal that asked (None: the record's first)."""
        if record.decision != "allow-once":
            return False
        who = (
            record.request.asker if asker is None else asker,
            record.request.session_key if session_key is None else session_key,
            node_approval_id if session_key is not None else record.request.node_approval_id,
        )
        asked = {who_of(r) for r in record.requesters} or {who}
        if who not in asked or who in record.consumed:
            return False
        record.consumed.add(who)
        return True

    # -- views

    def history(self, agent_id: str | None = None) -> list[ApprovalRecord]:
        """Decided approvals (newest first), of one agent or all."""
        rows = [r for r in reversed(self._history) if agent_id is None or r.request.agent_id == agent_id]
        return rows

    def lookup(self, id_or_prefix: str, agent_id: str | None = None) -> ApprovalRecord | None:
        """A pending or decided approval by id or unique prefix (8-char slugs included), else None.
        `agent_id`: among that agent's approvals only, so another agent's ask never makes a prefix of
        one's own ambiguous (an oracle for the other agent's ids: fresh round 8 o)."""
        key = (id_or_prefix or "").strip().lower()
        if not key:
            return None
        known = {r.id: r for r in self._history} | self._records
        if agent_id is not None:  # the agent's own asks: never the operator's that named it for policy
            known = {i: r for i, r in known.items() if r.request.agent_id == agent_id and not r.operators}
        if key in known:
            return known[key]
        hits = [r for rid, r in known.items() if rid.startswith(key)]
        return hits[0] if len(hits) == 1 else None

    def pending(self, after: str | None = None) -> list[ApprovalRecord]:
        """Oldest first; with `after` (a record's `cursor`), only those that come after it."""
        rows = sorted(self._open.values(), key=lambda r: r.cursor)
        return rows if after is None else [r for r in rows if r.cursor > after]

    def suspend(self) -> None:
        """Stop every timer and leave every ask as it is (a gateway stopping whose asks are kept on disk
        for the next one): nobody is answered, nothing falls back."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._listeners.clear()

    def close(self) -> None:
        """Expire everything (gateway shutdown): waiters see None and apply askFallback."""
        for record in list(self._open.values()):
            self._finish(record, None, "shutdown")
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


def _oldest(a: int | None, b: int | None) -> int | None:
    """The older of two stamps (None: unstamped, the other stands)."""
    return b if a is None else a if b is None else min(a, b)
