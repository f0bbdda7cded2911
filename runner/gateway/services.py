"""What the gateway owns: config, sessions, approvals, events, overrides, and the fan-out to clients.

Everything is built in the constructor, so no attribute is None until `start()`; `start()` only starts
the background work (the activity ticker, the sandbox progress hook).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.approvals.durable import PENDING_NAME, PendingFile, StoredAsk
from engine.approvals.grants import GRANTS_NAME, GrantStore
from engine.approvals.groupwrite import GroupWriter
from engine.approvals.history import (
    HISTORY_DIR,
    DecisionLog,
    HistoryError,
    decision_line,
    encode_entry,
    run_line,
)
from engine.approvals.pending import ApprovalManager, ApprovalRecord, unsettled
from engine.approvals.store import ApprovalsStore
from engine.config.loader import config_path as config_file_path
from engine.config.loader import load_config
from engine.config.model import Config
from engine.policy.precedence import SessionOverrides
from engine.protocol.frames import Event
from engine.protocol.methods import EventName, Method, Topic
from engine.protocol.requests import Message, ProcessRequest
from engine.results import ToolResult
from engine.sandbox import default_manager as default_sandbox_manager
from engine.sandbox import held
from engine.sessions import SessionManager, SystemEvents
from engine.sessions.adopt import Adoption
from engine.sessions.host import HOLDERS_DIR
from engine.sessions.hosts import SessionHosts
from engine.sessions.quota import Quota
from engine.sessions.spool import SPOOL_NAME, EventSpool
from engine.tools.exec import ExecTool
from engine.tools.resume import restore_asks
from runner.egress import EgressHub
from runner.gateway.browsers import BrowserHub
from runner.gateway.nodes import NodeHub
from runner.gateway.output import OutputFanout

if TYPE_CHECKING:
    from runner.gateway.connection import Connection


class Host(Protocol):
    """What the services need of the server that owns them (runner.gateway.server builds the services
    and hands itself in; this module never imports it, so the dependency runs one way)."""

    @property
    def connections(self) -> Collection[Connection]: ...

    def request_stop(self) -> None: ...

    async def drop_revoked(self) -> list[str]: ...

    async def revoke_agent(self, agent: str) -> tuple[bool, int]: ...


log = logging.getLogger("exechost.gateway")

APPROVED = ("allow-once", "allow-always")
# Requests that read every session (or a run's, by approval): answered once the kept ones are adopted.
WHOLE_VIEW = frozenset({Method.SESSIONS_LIST, Method.APPROVALS_STATUS})


class Services:
    def __init__(
        self,
        state_dir: Path,
        *,
        config_path: str | None = None,
        approval_timeout_ms: int | None = None,
        server: Host | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.server = server
        self._config_path = config_path
        # Resolved once: the daemon's environment does not change, and every call reads the config.
        self._config_file = Path(config_path) if config_path else config_file_path()
        self.config_error: str | None = None
        self._config: Config | None = None
        self._config_stamp: tuple[int, ...] | None = None
        env_timeout = os.environ.get("EXECHOST_APPROVAL_TIMEOUT_MS", "").strip()
        if approval_timeout_ms is None and env_timeout.isdigit():
            approval_timeout_ms = int(env_timeout)  # tests shorten the 30-minute expiry this way
        self.approvals = ApprovalManager(
            **({"timeout_ms": approval_timeout_ms} if approval_timeout_ms else {})
        )
        self.store = ApprovalsStore(state_dir / "exec-approvals.json")
        # Every decision on disk (who, what, what it led to): `approvals history` across restarts.
        self.history = DecisionLog(state_dir / HISTORY_DIR)
        self._history_sessions: set[str] | None = None  # session ids an approval led to (loaded lazily)
        # Asks not yet settled, on disk: the next gateway asks them again (same id, same expiry).
        self.pending_file = PendingFile(state_dir / PENDING_NAME)
        # Both written off the loop in groups; a decision is acted upon once it is on disk (the barrier).
        # Two writers, so a decision's line never waits behind a pending write's fsyncs.
        self.history_writer = GroupWriter("decision history", self._write_history_lines)
        # The asks that changed since the last batch; journaled (one line each) when the batch is taken.
        self._pending_dirty: dict[str, ApprovalRecord] = {}
        self._pending_ids: set[str] = set()  # asks the files hold as unsettled
        self._pending_out: tuple[list[bytes], bytes | None] = ([], None)  # (journal lines, new snapshot)
        self.pending_writer = GroupWriter("pending approvals", self._write_pending, latest_only=True)
        self.approvals.barrier = self.pending_writer.barrier
        self.approvals.decided_barrier = self._decided_barrier
        self.events = SystemEvents(spool=EventSpool(state_dir / SPOOL_NAME))
        # Allow-always with limits, apart from exec-approvals.json (which OpenClaw also reads).
        self.grants = GrantStore(state_dir / GRANTS_NAME)
        self.overrides: dict[str, SessionOverrides] = {}
        self.started_at = time.time()
        exec_cfg = self.config().exec
        self.sessions = SessionManager(
            state_dir,
            log_cap_bytes=exec_cfg.log_cap_bytes,
            cleanup_ms=exec_cfg.cleanup_ms,
            events=self.events,
            timeout_sec=float(exec_cfg.timeout_sec),
            background_ms=exec_cfg.background_ms,
            quota=Quota(per_agent=self._agent_quota),  # many principals share these sessions and this disk
        )
        self.exec_tool = ExecTool(
            config=self.config,
            config_problem=self.config_problem,
            sessions=self.sessions,
            approvals=self.approvals,
            store=self.store,
            events=self.events,
            has_approver=self.has_approver,
            overrides=self.overrides,
            wait_session=self.wait_session,
            grants=self.grants,
        )
        self.output = OutputFanout(self.sessions, self.connections)
        self.approvals.add_listener(self._on_approval)
        self._unsubscribe = [
            self.events.subscribe(self._on_system_event),
            self.sessions.add_listener(self._on_session_event),
        ]
        self._sandbox_manager: Any = None
        self._pool_start: asyncio.Task[None] | None = None
        # Set by hold_sessions() (the daemon): gateway-host sessions run in the session host, outliving us.
        self.holders: SessionHosts | None = None
        self.keep_sessions = True  # on a stop: leave held sessions running (`gateway stop --kill-sessions`)
        self.adoption: Adoption | None = None  # the kept sessions, adopted after the socket opens
        self._adopting: asyncio.Task[None] | None = None
        self.nodes = NodeHub(self)  # links are opened on first use (and follow config edits)
        self.browsers = BrowserHub(self)  # containers started on first use; the door opens with them
        self.egress = EgressHub(self)  # sandboxes' egress proxy: listens from start()
        self.exec_tool.node_runner = self.nodes.run
        self.exec_tool.node_known = self.nodes.select

    # -- lifecycle

    def _agent_quota(self, agent: str) -> tuple[int, int]:
        cfg = self.config().exec_for(agent)
        return cfg.max_sessions_per_agent, cfg.max_output_bytes_per_agent

    def config(self) -> Config:
        """The config, reloaded when the file changes (stat per call: cheap, and edits apply at once).
        A broken edit keeps the last good config and is logged."""
        path = self._config_file
        try:
            st = path.stat()
            stamp: tuple[int, ...] | None = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        except OSError:
            stamp = None
        if self._config is None or stamp != self._config_stamp:
            try:
                self._config = load_config(path)
                self._set_config_error(None)
            except Exception as exc:
                if self._config is None:
                    raise
                log.error("config reload failed, keeping the previous one: %s", exc)
                self._set_config_error(f"{exc} — still running on the last good config")
            self._config_stamp = stamp
        return self._config

    def config_problem(self) -> str | None:
        """Why the config on disk is not the one in force (a broken edit), else None."""
        self.config()  # a fix or a new breakage shows at once
        return self.config_error

    def _set_config_error(self, error: str | None) -> None:
        """Loud, not only in gateway.log: `status`, every exec result and the console's header say it."""
        if error == self.config_error:
            return
        self.config_error = error
        self.broadcast(
            Topic.EVENTS, EventName.GATEWAY_CONFIG, {"error": error, "ts": int(time.time() * 1000)}
        )

    def hold_sessions(self) -> None:
        """Run gateway-host sessions in the state dir's session host, so they outlive this gateway (the
        daemon does; in-process test gateways keep plain children unless they ask).
        EXECHOST_SESSION_HOLDERS=0 turns it off."""
        if os.environ.get("EXECHOST_SESSION_HOLDERS", "").strip() == "0":
            return
        self.holders = SessionHosts(self.state_dir / HOLDERS_DIR, fallback=self.sessions.launcher)
        self.sessions.launcher = self.holders
        # Sandbox pipe commands too: handed to the host once started (engine.sandbox.held).
        self.holders.held_kinds[held.KIND] = held.make_held
        default_sandbox_manager().session_host = self.holders

    async def start(self) -> None:
        """What must be known before the socket opens (the kept sessions' ids, the kept asks); the
        sessions themselves are adopted afterwards (`adopt_in_background`), while requests are answered."""
        if self.holders is not None:
            await self.holders.connect()  # started or re-attached; on failure a log line, plain children
            self.adoption = Adoption(self.sessions, self.holders)
            self.adoption.scan()
        restored = restore_asks(self.exec_tool, self.restorable_asks())
        if restored:
            log.info("restored %d pending approval(s) from %s", len(restored), self.pending_file.path)
        self.pending_file.save(self.approvals.records())
        self._pending_ids = {r.id for r in self.approvals.unsettled_records()}
        self.output.start()
        await self.egress.start()
        self._hook_sandbox_progress()
        # Ready sandbox containers (adopted from the last gateway, or made now), off the start path.
        self._pool_start = asyncio.get_running_loop().create_task(self._start_sandbox_pool())

    def adopt_in_background(self) -> None:
        """Once the socket listens: adopt the kept sessions (`status` says how far; a request naming one
        adopts it first, a list waits for all: SessionManager.ready)."""
        if self.adoption is not None:
            self._adopting = asyncio.get_running_loop().create_task(self._adopt(self.adoption))

    async def _adopt(self, adoption: Adoption) -> None:
        await adoption.run()
        if adoption.total:
            log.info(
                "adopted %d session(s) from %s in %.0f ms",
                len(adoption.sessions),
                self.state_dir / HOLDERS_DIR,
                (adoption.elapsed or 0) * 1000,
            )

    async def sessions_ready(self, msg: Message) -> None:
        """Before a request: while kept sessions are still being adopted, one that names a session waits
        for it (adopting it at once), one that lists sessions waits for all; the rest go ahead."""
        adoption = self.adoption
        if adoption is None or adoption.done.is_set():
            return
        if msg.METHOD in WHOLE_VIEW or (isinstance(msg, ProcessRequest) and msg.action == "list"):
            await self.sessions.ready()
            return
        sid = getattr(msg, "session_id", None)
        if isinstance(sid, str) and sid:
            await self.sessions.ready(sid)

    async def _start_sandbox_pool(self) -> None:
        try:
            config = self.config()
        except Exception as exc:  # the config's own errors are reported where it is used
            log.warning("sandbox pool not started: %s", exc)
            return
        await default_sandbox_manager().start_pool(config)

    def _hook_sandbox_progress(self) -> None:
        """Forward container-creation progress (engine.sandbox's one hook) as `sandbox.progress`."""
        from engine.sandbox import default_manager

        self._sandbox_manager = default_manager()
        self._sandbox_manager.progress = self.sandbox_progress

    def sandbox_progress(self, container_name: str, message: str) -> None:
        self.broadcast(
            Topic.SANDBOXES,
            EventName.SANDBOX_PROGRESS,
            {"containerName": container_name, "message": message, "ts": int(time.time() * 1000)},
        )

    async def close(self) -> None:
        if self._adopting is not None:
            self._adopting.cancel()
            await asyncio.gather(self._adopting, return_exceptions=True)
        if self._pool_start is not None:
            self._pool_start.cancel()
            await asyncio.gather(self._pool_start, return_exceptions=True)
        await default_sandbox_manager().stop_pool()  # its spares stay for the next gateway to adopt
        if self._sandbox_manager is not None and self._sandbox_manager.progress == self.sandbox_progress:
            self._sandbox_manager.progress = None
        if self.holders is not None and default_sandbox_manager().session_host is self.holders:
            default_sandbox_manager().session_host = None  # (the manager is process-wide)
        self.output.close()
        for unsubscribe in self._unsubscribe:
            with contextlib.suppress(Exception):
                unsubscribe()
        # Asks stay pending on disk for the next gateway: a stop or an upgrade neither denies nor runs them.
        self.approvals.suspend()
        await self.nodes.close()
        await self.browsers.close()
        await self.egress.close()
        await self.exec_tool.close()
        await self.sessions.close(keep_held=self.holders is not None and self.keep_sessions)
        if self.holders is not None:
            await self.holders.close()
        # Nothing queued for disk is left behind.
        await asyncio.gather(self.history_writer.barrier(), self.pending_writer.barrier())

    # -- sessions

    async def wait_session(self, session_id: str, scope_key: str) -> ToolResult:
        """Wait for a detached session to exit; its outcome as the follow-up event needs it."""
        session = self.sessions.get(session_id)
        if session is None:
            return ToolResult("", {"status": "failed", "exitCode": None, "aggregated": ""})
        await session.done.wait()
        return ToolResult(
            "",
            {
                "status": session.status,
                "exitCode": session.exit_code,
                "exitSignal": session.exit_signal,
                "timedOut": session.timed_out,
                "aggregated": session.output.aggregated(),
            },
        )

    # -- fan-out

    def connections(self) -> list[Connection]:
        return list(self.server.connections) if self.server is not None else []

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None:
        frame = Event(event=event, data=data)
        for conn in self.connections():
            if topic in conn.topics and conn.sees_scope(_scope_of(topic, data)):
                conn.send(frame)

    def has_approver(self) -> bool:
        return any(conn.approver and not conn.closed for conn in self.connections())

    def connection_closed(self, conn: Connection) -> None:
        conn.approver = False
        conn.topics.clear()
        for approval_id in conn.waiting_approvals:
            self.approvals.requester_gone(approval_id)
        conn.waiting_approvals.clear()

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
            if record.run.get("sessionId"):
                self._linked_sessions().add(str(record.run["sessionId"]))

    async def _decided_barrier(self, record: ApprovalRecord) -> None:
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
        for record in self._pending_dirty.values():
            if unsettled(record):
                lines.append(self.pending_file.entry(record))
                self._pending_ids.add(record.id)
            elif record.id in self._pending_ids:  # settled: the files stop holding it
                lines.append(self.pending_file.entry(record))
                self._pending_ids.discard(record.id)
        self._pending_dirty.clear()
        snapshot = None
        if lines and self.pending_file.wants_compaction():
            unsettled_now = self.approvals.unsettled_records()
            snapshot = self.pending_file.encode(unsettled_now)
            self._pending_ids = {r.id for r in unsettled_now}
        self._pending_out = (lines, snapshot)
        return snapshot or b"\n".join(lines)

    def _write_pending(self, batch: list[bytes]) -> None:
        lines, snapshot = self._pending_out
        if snapshot is not None:
            self.pending_file.write(snapshot, before=lines)
        elif lines:
            self.pending_file.append(lines)

    def _linked_sessions(self) -> set[str]:
        if self._history_sessions is None:
            self._history_sessions = self.history.linked_sessions()
        return self._history_sessions

    def _on_approval(self, kind: str, record: ApprovalRecord) -> None:
        self._write_history(kind, record)
        self._pending_dirty[record.id] = record
        self.pending_writer.put(self._pending_batch)
        if kind == "ran":
            return
        if kind == "requested":
            self.broadcast(Topic.APPROVALS, EventName.APPROVAL_REQUESTED, record.view())
        elif kind == "updated":
            # An identical ask was coalesced into this one: consoles update the row's count at once.
            self.broadcast(
                Topic.APPROVALS,
                EventName.APPROVAL_UPDATED,
                {"id": record.id, "count": record.count, "requesterGone": record.requester_gone},
            )
        else:
            self.broadcast(
                Topic.APPROVALS,
                EventName.APPROVAL_RESOLVED,
                {"id": record.id, "decision": record.decision, "resolvedBy": record.resolved_by},
            )

    def _on_system_event(self, session_key: str, text: str) -> None:
        self.broadcast(
            Topic.EVENTS,
            EventName.SYSTEM_EVENT,
            {"sessionKey": session_key, "text": text, "ts": int(time.time() * 1000)},
        )

    def _on_session_event(self, event: str, data: dict[str, Any]) -> None:
        if event == EventName.SESSION_EXITED and str(data.get("sessionId")) in self._linked_sessions():
            try:  # history then shows how the run an approval led to really ended
                self.history.record_session_end(data)
            except HistoryError as exc:
                log.error("%s", exc)
        self.output.session_event(event, data, lambda: self.broadcast(Topic.SESSIONS, event, data))

    def status(self) -> dict[str, Any]:
        shown, running = self.sessions.registry.counts()  # counters: O(1) however many sessions
        return {
            "pid": os.getpid(),
            "uptimeSec": round(time.time() - self.started_at, 3),
            "stateDir": str(self.state_dir),
            "connections": len(self.connections()),
            "approvers": sum(1 for c in self.connections() if c.approver),
            "pendingApprovals": len(self.approvals.pending()),
            "sessions": shown,
            "runningSessions": running,
            "configError": self.config_problem(),
            "historyError": self.history.problem,
            "holdsSessions": self.holders is not None,
            "sessionHost": _host_status(self.holders),
            "adoptedSessions": len(self.adoption.sessions) if self.adoption is not None else 0,
            "adoption": self.adoption.status() if self.adoption is not None else None,
            "version": 1,
        }


def _host_status(hosts: SessionHosts | None) -> dict[str, Any] | None:
    """The first session host's pid, or why there is none (its sessions then run as plain children), and
    every host this gateway holds sessions in."""
    if hosts is None:
        return None
    link = hosts.link
    live = link is not None and not link.closed
    pid = link.host_pid if live and link is not None else None
    return {"pid": pid, "problem": hosts.problem, "hosts": hosts.status()}


def _scope_of(topic: str, data: dict[str, Any]) -> str | None:
    """The session scope a broadcast belongs to (Connection.sees_scope decides who hears it): a session's
    starts and exits its scope, a system event its session key; approvals, sandboxes and gateway-wide
    events none (the operator's)."""
    if topic == "sessions":
        return str(data.get("scopeKey") or "") or None
    if topic == "events":
        key = data.get("sessionKey")
        return key if isinstance(key, str) else None
    return None
