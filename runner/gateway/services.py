"""What the gateway owns: config, sessions, approvals, events, overrides, and the fan-out to clients."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.approvals.pending import ApprovalManager, ApprovalRecord
from engine.approvals.store import ApprovalsStore
from engine.config.loader import config_path, load_config
from engine.config.model import Config
from engine.errors import InvalidInput
from engine.policy.precedence import SessionOverrides
from engine.protocol.frames import Event
from engine.results import ToolResult
from engine.sessions import OutputChunk, OutputSubscription, SessionManager, SystemEvents
from engine.tools.exec import ExecTool

if TYPE_CHECKING:
    from runner.gateway.server import Connection, GatewayServer

log = logging.getLogger("exechost.gateway")

OUTPUT_FLUSH_SEC = 0.033
OUTPUT_BATCH_BYTES = 64 * 1024
ACTIVITY_INTERVAL_SEC = 0.25  # session.activity: at most 4 frames/s per following connection


def _merge(batch: list[OutputChunk]) -> list[tuple[str, bytes, int]]:
    """Adjacent chunks of the same stream joined; gaps kept as (\"gap\", b\"\", dropped)."""
    out: list[tuple[str, bytes, int]] = []
    for chunk in batch:
        if chunk.dropped:
            out.append(("gap", b"", chunk.dropped))
        elif out and out[-1][0] == chunk.stream and not out[-1][2]:
            out[-1] = (chunk.stream, out[-1][1] + chunk.data, 0)
        else:
            out.append((chunk.stream, chunk.data, 0))
    return out


class Services:
    def __init__(
        self,
        state_dir: Path,
        *,
        config_path: str | None = None,
        approval_timeout_ms: int | None = None,
        server: GatewayServer | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.server = server
        self._config_path = config_path
        self._config: Config | None = None
        self._config_stamp: tuple[int, ...] | None = None
        env_timeout = os.environ.get("EXECHOST_APPROVAL_TIMEOUT_MS", "").strip()
        if approval_timeout_ms is None and env_timeout.isdigit():
            approval_timeout_ms = int(env_timeout)  # tests shorten the 30-minute expiry this way
        self.approvals = ApprovalManager(
            **({"timeout_ms": approval_timeout_ms} if approval_timeout_ms else {})
        )
        self.store = ApprovalsStore(state_dir / "exec-approvals.json")
        self.events = SystemEvents()
        self.overrides: dict[str, SessionOverrides] = {}
        self.sessions: SessionManager | None = None
        self.exec_tool: ExecTool | None = None
        self.started_at = time.time()
        self._unsubscribe: list[Any] = []
        self._forwarders: dict[str, asyncio.Task[None]] = {}  # sessionId -> task pushing its output
        self._activity: asyncio.Task[None] | None = None
        self._sandbox_manager: Any = None
        self.nodes: Any = None  # runner.gateway.nodes.NodeHub once started

    # -- lifecycle

    def config(self) -> Config:
        """The config, reloaded when the file changes (stat per call: cheap, and edits apply at once).
        A broken edit keeps the last good config and is logged."""
        path = Path(self._config_path) if self._config_path else config_path()
        try:
            st = path.stat()
            stamp: tuple[int, ...] | None = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        except OSError:
            stamp = None
        if self._config is None or stamp != self._config_stamp:
            try:
                self._config = load_config(path)
            except Exception as exc:
                if self._config is None:
                    raise
                log.error("config reload failed, keeping the previous one: %s", exc)
            self._config_stamp = stamp
        return self._config

    async def start(self) -> None:
        config = self.config()
        exec_cfg = config.exec
        self.sessions = SessionManager(
            self.state_dir,
            log_cap_bytes=exec_cfg.log_cap_bytes,
            cleanup_ms=exec_cfg.cleanup_ms,
            events=self.events,
            timeout_sec=float(exec_cfg.timeout_sec),
            background_ms=exec_cfg.background_ms,
        )
        self.exec_tool = ExecTool(
            config=self.config,
            sessions=self.sessions,
            approvals=self.approvals,
            store=self.store,
            events=self.events,
            has_approver=self.has_approver,
            overrides=self.overrides,
            wait_session=self.wait_session,
        )
        from runner.gateway.nodes import NodeHub

        self.nodes = NodeHub(self)
        self.exec_tool.node_runner = self.nodes.run
        self.approvals.add_listener(self._on_approval)
        self._unsubscribe.append(self.events.subscribe(self._on_system_event))
        hook = getattr(self.sessions, "add_listener", None)
        if callable(hook):
            hook(self._on_session_event)
        self._activity = asyncio.ensure_future(self._activity_loop())
        self._hook_sandbox_progress()

    def _hook_sandbox_progress(self) -> None:
        """Forward container-creation progress (engine.sandbox's one hook) as `sandbox.progress`."""
        from engine.sandbox import default_manager

        self._sandbox_manager = default_manager()
        self._sandbox_manager.progress = self.sandbox_progress

    def sandbox_progress(self, container_name: str, message: str) -> None:
        self.broadcast(
            "sandboxes",
            "sandbox.progress",
            {"containerName": container_name, "message": message, "ts": int(time.time() * 1000)},
        )

    async def close(self) -> None:
        if self._sandbox_manager is not None and self._sandbox_manager.progress == self.sandbox_progress:
            self._sandbox_manager.progress = None
        if self._activity is not None:
            self._activity.cancel()
        for task in list(self._forwarders.values()):
            task.cancel()
        for unsubscribe in self._unsubscribe:
            with contextlib.suppress(Exception):
                unsubscribe()
        self.approvals.close()
        if self.nodes is not None:
            await self.nodes.close()
        if self.exec_tool is not None:
            await self.exec_tool.close()
        if self.sessions is not None:
            await self.sessions.close()

    # -- sessions

    async def wait_session(self, session_id: str, scope_key: str) -> ToolResult:
        """Wait for a detached session to exit; its outcome as the follow-up event needs it."""
        assert self.sessions is not None
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
            if topic in conn.topics:
                conn.send(frame)

    def has_approver(self) -> bool:
        return any(conn.approver and not conn.closed for conn in self.connections())

    def connection_closed(self, conn: Connection) -> None:
        conn.approver = False
        conn.topics.clear()

    def _on_approval(self, kind: str, record: ApprovalRecord) -> None:
        if kind == "requested":
            self.broadcast("approvals", "approval.requested", record.view())
        elif kind == "updated":
            # An identical ask was coalesced into this one: consoles update the row's count at once.
            self.broadcast("approvals", "approval.updated", {"id": record.id, "count": record.count})
        else:
            self.broadcast(
                "approvals",
                "approval.resolved",
                {"id": record.id, "decision": record.decision, "resolvedBy": record.resolved_by},
            )

    def _on_system_event(self, session_key: str, text: str) -> None:
        self.broadcast(
            "events", "system.event", {"sessionKey": session_key, "text": text, "ts": int(time.time() * 1000)}
        )

    def _on_session_event(self, event: str, data: dict[str, Any]) -> None:
        sid = str(data.get("sessionId"))
        forwarder = self._forwarders.get(sid)
        if event == "session.exited" and forwarder is not None:
            # Exit after the last output: the forwarder drains the ended viewer, then this goes out.
            forwarder.add_done_callback(lambda _t: self.broadcast("sessions", event, data))
            return
        self.broadcast("sessions", event, data)
        if event == "session.started" and self._output_wanted(sid):
            self._forward(sid)

    # -- live output for the console: only to connections that want it (all, or the followed few)

    def _output_wanted(self, session_id: str) -> bool:
        return any(c.wants_output(session_id) for c in self.connections())

    def forward_wanted_sessions(self) -> None:
        """Start pushing output of every running session some connection now wants."""
        assert self.sessions is not None
        for session in list(self.sessions.registry):
            if not session.exited and self._output_wanted(session.id):
                self._forward(session.id)

    def _offset(self, session_id: str) -> int:
        session = self.sessions.get(session_id) if self.sessions is not None else None
        return session.raw.offset if session is not None else 0

    def follow(self, conn: Connection, session_id: str, *, only: bool = False) -> list[str]:
        """`sessions.follow`: push this session's output to `conn` (and, with `only`, no other's)."""
        assert self.sessions is not None
        if self.sessions.get(session_id) is None:
            raise InvalidInput(f"No session found for {session_id}")
        self._enter_follow_mode(conn)
        assert conn.follow is not None
        if only:
            for other in conn.follow - {session_id}:
                self.unfollow(conn, other)
        conn.follow.add(session_id)
        conn.activity_sent.pop(session_id, None)
        if "sessions" in conn.topics:
            self._forward(session_id)
        return sorted(conn.follow)

    def unfollow(self, conn: Connection, session_id: str | None) -> list[str]:
        """`sessions.unfollow`: stop pushing that session's output (None: every session's) to `conn`;
        what it printed until now counts as seen."""
        self._enter_follow_mode(conn)
        assert conn.follow is not None
        for sid in [session_id] if session_id is not None else list(conn.follow):
            if sid in conn.follow:
                conn.follow.discard(sid)
                conn.read_marks[sid] = self._offset(sid)
        return sorted(conn.follow)

    def set_follow(self, conn: Connection, session_ids: list[str]) -> None:
        """`subscribe {follow: [...]}`: follow mode with exactly these sessions (unknown ids are skipped)."""
        self._enter_follow_mode(conn)
        self.unfollow(conn, None)
        for sid in session_ids:
            if self.sessions is not None and self.sessions.get(sid) is not None:
                self.follow(conn, sid)

    def _enter_follow_mode(self, conn: Connection) -> None:
        """Output that existed before the connection started following is not unread."""
        if conn.follow is not None:
            return
        conn.follow = set()
        if self.sessions is not None:
            conn.read_marks = {s.id: s.raw.offset for s in self.sessions.registry}

    async def _activity_loop(self) -> None:
        """`session.activity`: unread byte counts (no bytes) of sessions a following connection hides."""
        while True:
            await asyncio.sleep(ACTIVITY_INTERVAL_SEC)
            if self.sessions is None:
                continue
            conns = [c for c in self.connections() if c.follow is not None and "sessions" in c.topics]
            if not conns:
                continue
            offsets = {s.id: s.raw.offset for s in self.sessions.registry}
            for conn in conns:
                self._send_activity(conn, offsets)

    def _send_activity(self, conn: Connection, offsets: dict[str, int]) -> None:
        assert conn.follow is not None
        changed: list[dict[str, Any]] = []
        for sid, total in offsets.items():
            if sid in conn.follow:
                continue
            unread = max(0, total - conn.read_marks.get(sid, 0))
            if conn.activity_sent.get(sid) != unread:
                conn.activity_sent[sid] = unread
                changed.append({"sessionId": sid, "unreadBytes": unread, "outputBytes": total})
        for sid in [s for s in conn.activity_sent if s not in offsets]:
            del conn.activity_sent[sid]
            conn.read_marks.pop(sid, None)
        if not changed:
            return
        shed = conn.dropped_events
        conn.send(Event(event="session.activity", data={"sessions": changed}))
        if conn.dropped_events != shed:  # shed under backlog: resend these counts next tick
            for row in changed:
                conn.activity_sent.pop(row["sessionId"], None)

    def _send_output(self, session_id: str, data: dict[str, Any]) -> None:
        frame = Event(event="session.output", data=data)
        for conn in self.connections():
            if conn.wants_output(session_id):
                conn.send(frame)

    def _forward(self, session_id: str) -> None:
        if session_id in self._forwarders or self.sessions is None:
            return
        try:
            viewer = self.sessions.subscribe(session_id, replay=False)
        except KeyError:
            return
        # The offset is taken now, with the subscription: output may arrive before the task first runs.
        task = asyncio.ensure_future(self._push_output(session_id, viewer, self._offset(session_id)))
        self._forwarders[session_id] = task
        task.add_done_callback(lambda _t: self._forwarders.pop(session_id, None))

    async def _push_output(self, session_id: str, viewer: OutputSubscription, offset: int) -> None:
        """Push `session.output`, coalesced to ≤ ~30 frames/s or 64 KiB per session; gaps are announced.
        Stops once no connection wants this session's output (a later follow starts a new one)."""
        decoders: dict[str, Any] = {}
        try:
            while (chunk := await viewer.get()) is not None:
                batch = [chunk]
                size = len(chunk.data)
                deadline = asyncio.get_running_loop().time() + OUTPUT_FLUSH_SEC
                while size < OUTPUT_BATCH_BYTES and asyncio.get_running_loop().time() < deadline:
                    more = viewer.get_nowait()
                    if more is None:
                        await asyncio.sleep(0.005)
                        if viewer.closed:
                            break
                        continue
                    batch.append(more)
                    size += len(more.data)
                if not self._output_wanted(session_id):
                    return
                for stream, data, dropped in _merge(batch):
                    if dropped:
                        offset += dropped
                        self._send_output(
                            session_id, {"sessionId": session_id, "dropped": True, "offset": offset}
                        )
                        continue
                    decoder = decoders.setdefault(stream, codecs.getincrementaldecoder("utf-8")("replace"))
                    # ≤ 64 KiB per frame: even fully escaped JSON stays under the 1 MiB frame cap.
                    for at in range(0, len(data), OUTPUT_BATCH_BYTES):
                        piece = data[at : at + OUTPUT_BATCH_BYTES]
                        self._send_output(
                            session_id,
                            {
                                "sessionId": session_id,
                                "stream": stream,
                                "data": decoder.decode(piece),
                                "offset": offset,
                            },
                        )
                        offset += len(piece)
        finally:
            viewer.close()

    def status(self) -> dict[str, Any]:
        sessions = self.sessions.list_sessions(None) if self.sessions is not None else []
        return {
            "pid": os.getpid(),
            "uptimeSec": round(time.time() - self.started_at, 3),
            "stateDir": str(self.state_dir),
            "connections": len(self.connections()),
            "approvers": sum(1 for c in self.connections() if c.approver),
            "pendingApprovals": len(self.approvals.pending()),
            "sessions": len(sessions),
            "runningSessions": sum(1 for s in sessions if s.get("status") == "running"),
            "version": 1,
        }
