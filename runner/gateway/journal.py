"""The approvals on disk, written in groups off the loop: the decision history (who decided what, what it led
to) and the pending-asks journal (what the next gateway asks again). A decision is acted upon once it is
on disk (`decided_barrier`); a restart takes up what the files hold (`restorable_asks`)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from engine.approvals.durable import PENDING_NAME, PendingFile, StoredAsk
from engine.approvals.groupwrite import GroupWriter
from engine.approvals.history import (
    HISTORY_DIR,
    DecisionLog,
    HistoryError,
    decision_line,
    encode_entry,
    run_line,
)
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRecord, unsettled
from engine.sessions.registry import Session

log = logging.getLogger("exechost.gateway")

APPROVED = ("allow-once", "allow-always")


class ApprovalJournal:
    """Two group writers, so a decision's line never waits behind a pending write's fsyncs."""

    def __init__(self, state_dir: Path, approvals: ApprovalManager) -> None:
        self.approvals = approvals
        # Every decision on disk (who, what, what it led to): `approvals history` across restarts.
        self.history = DecisionLog(state_dir / HISTORY_DIR)
        # session id -> (its approval, the run's instance), end not written
        self._history_sessions: dict[str, tuple[str, str | None]] | None = None
        # Asks not yet settled, on disk: the next gateway asks them again (same id, same expiry).
        self.pending_file = PendingFile(state_dir / PENDING_NAME)
        self.history_writer = GroupWriter("decision history", self._write_history_lines)
        # The asks that changed since the last batch; journaled (one line each) when the batch is taken.
        self._pending_dirty: dict[str, ApprovalRecord] = {}
        self._pending_ids: set[str] = set()  # asks the files hold as unsettled
        # Asks a run's outcome settled, held back until that outcome's history line is on disk (record)
        self._after_history: dict[str, ApprovalRecord] = {}
        self._settling: set[asyncio.Task[None]] = set()
        # (journal lines, new snapshot, the asks they hold)
        self._pending_out: tuple[list[bytes], bytes | None, set[str]] = ([], None, set())
        # Asks whose latest state a failed write held, and why: not on disk until a later write holds them.
        self._unsaved: dict[str, str] = {}
        self.pending_writer = GroupWriter("pending approvals", self._write_pending, latest_only=True)
        approvals.barrier = self.pending_writer.barrier
        approvals.decided_barrier = self.decided_barrier
        approvals.durable_problem = lambda record: self._unsaved.get(record.id)

    def start(self) -> None:
        """After the kept asks were restored: the files hold exactly the asks now known."""
        self.pending_file.save(self.approvals.records())
        self._pending_ids = {r.id for r in self.approvals.unsettled_records()}

    async def flush(self) -> None:
        """Nothing queued for disk is left behind (the history first: what it releases to the journal
        is queued there before the journal's barrier is taken)."""
        await self.history_writer.barrier()
        await self.pending_writer.barrier()

    def record(self, kind: str, record: ApprovalRecord) -> None:
        """An approval changed (`requested|updated|resolved|ran`): queue its lines. A run's outcome that
        settles the ask reaches the journal only once its history line is on disk: the journal's line
        drops the ask, and a crash between the two would leave the history saying `starting` for good
        (a restart restores the ask, and reports it again, while the journal still holds it)."""
        self._write_history(kind, record)
        if kind == "ran" and record.id in self._pending_ids and not unsettled(record):
            if record.id in self._after_history:
                return
            try:
                task = asyncio.get_running_loop().create_task(self._settle_after_history(record.id))
            except RuntimeError:  # no loop (a sync caller): the history's line was written at once
                pass
            else:
                self._after_history[record.id] = record
                self._settling.add(task)
                task.add_done_callback(self._settling.discard)
                return
        self._pending_dirty[record.id] = record
        self.pending_writer.put(self._pending_batch)

    async def _settle_after_history(self, approval_id: str) -> None:
        await self.history_writer.barrier()
        record = self._after_history.pop(approval_id, None)
        if record is not None:
            self._pending_dirty[approval_id] = record
            self.pending_writer.put(self._pending_batch)

    def session_ended(self, session: Session) -> None:
        """A session exited: when an approval led to it, history shows how that run really ended. The
        session must be that run (its instance), not a later one under the same id (fresh round 15 a)."""
        link = self._linked_sessions().get(session.id)
        if link is None:
            return  # no approval led to it, or its end is written already (the id may be reused)
        approval_id, instance = link
        if instance is not None and instance != session.instance:
            return  # another session under the run's id: the run's own end is still to come (or lost)
        del self._linked_sessions()[session.id]
        try:
            self.history.record_session_end(session.to_dict(), approval_id)
        except HistoryError as exc:
            log.error("%s", exc)

    def _write_history(self, kind: str, record: ApprovalRecord) -> None:
        """Queue the decision log's line (the group writer appends it)."""
        if kind == "resolved":
            self.history_writer.put(encode_entry(decision_line(record.view())))
        elif kind == "ran" and record.run:
            # What a run ended as: nobody waits for the line (the caller has its result, and the session's
            # end is written apart), so it rides with the next batch. A run "starting" goes out at once:
            # the next gateway links the session it adopts to its approval through that line.
            final = record.run.get("status") != "starting"
            self.history_writer.put(encode_entry(run_line(record.id, record.run)), lazy=final)
            if record.run.get("sessionId") and not final:  # once: a final line may follow the end
                instance = record.run.get("instance")
                link = (record.id, instance if isinstance(instance, str) else None)
                self._linked_sessions()[str(record.run["sessionId"])] = link

    async def decided_barrier(self, record: ApprovalRecord) -> None:
        """A decision is acted upon once it is on disk. A deny (or an expiry) needs only its history line:
        a restart settles an ask the journal still holds as waiting when the history decided it so
        (`restorable_asks`), so it never comes back. The journal's own line follows without being
        waited for; it was queued with the history's, and often waits behind the ask's own append.
        An approval needs the journal too: what the next gateway runs comes from there."""
        await self.history_writer.barrier()
        if record.decision in APPROVED:
            await self.pending_writer.barrier()

    def restorable_asks(self) -> list[StoredAsk]:
        """The asks on disk the next gateway takes up: those the journal holds, less the ones whose
        deny or expiry only the decision history recorded (a crash before the journal's line)."""
        asks = self.pending_file.load()
        waiting = {ask.id for ask in asks if ask.decision is None}
        try:
            decided = self.history.decisions_of(waiting)
            self.history.index()  # `approvals.status` of an id nobody decided answers from it, no read
        except OSError as exc:  # unreadable history: every ask comes back (asked again, never run)
            log.error("decision history not read for the pending asks: %s", exc)
            decided = {}
        settled = {i for i, status in decided.items() if status in ("deny", "expired")}
        if settled:
            log.info("%d pending ask(s) were decided before the crash (history); not restored", len(settled))
        return [ask for ask in asks if ask.id not in settled]

    def _write_history_lines(self, lines: list[bytes]) -> None:
        """A write that fails (full disk) is logged and shown in `status` and `approvals history`, and
        the gateway keeps serving: the decision itself stands."""
        try:
            self.history.write_lines(lines)
        except HistoryError as exc:
            log.error("%s", exc)

    def _pending_batch(self) -> bytes:
        """On the loop, as a batch is taken: the journal lines of the asks that changed (their state
        now), or the whole snapshot when the journal has outgrown it. b"": nothing to write, no hop."""
        lines = []
        held: set[str] = set()
        for record in self._pending_dirty.values():
            if record.id in self._after_history:
                continue  # settled by its run's outcome: written once the history holds that outcome
            if unsettled(record):
                lines.append(self.pending_file.entry(record))
                self._pending_ids.add(record.id)
                held.add(record.id)
            elif record.id in self._pending_ids:  # settled: the files stop holding it
                lines.append(self.pending_file.entry(record))
                self._pending_ids.discard(record.id)
                held.add(record.id)
        self._pending_dirty.clear()
        snapshot = None
        if lines and self.pending_file.wants_compaction():
            unsettled_now = self.approvals.unsettled_records()
            snapshot = self.pending_file.encode(unsettled_now)
            self._pending_ids = {r.id for r in unsettled_now}
            held |= self._pending_ids
        self._pending_out = (lines, snapshot, held)
        return snapshot or b"\n".join(lines)

    def _write_pending(self, batch: list[bytes]) -> None:
        """In the writer's thread (one batch at a time): the batch, then which asks it left unsaved."""
        lines, snapshot, held = self._pending_out
        if snapshot is not None:
            self.pending_file.write(snapshot, before=lines)
        elif lines:
            self.pending_file.append(lines)
        problem = self.pending_file.problem  # set by this write when it failed, cleared when it succeeded
        if snapshot is not None and problem is None:
            self._unsaved.clear()  # the snapshot holds every ask as it is now (settled ones: gone)
        for ask in held:
            if problem is None:
                self._unsaved.pop(ask, None)
            else:
                self._unsaved[ask] = problem

    def _linked_sessions(self) -> dict[str, tuple[str, str | None]]:
        if self._history_sessions is None:
            self._history_sessions = self.history.linked_sessions()
        return self._history_sessions
