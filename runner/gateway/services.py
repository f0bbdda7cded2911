"""What the gateway owns, built and wired together: config, sessions, approvals and their journal, events,
overrides, the hubs, and the fan-out to clients. Each part with its own reason to change lives apart: the
live config (live_config.py), the approvals on disk (journal.py), who hears which event (broadcast.py),
session output (output.py); `status` is its handler's (handlers/status.py).

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

from engine.approvals.grants import GRANTS_NAME, GrantStore
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRecord
from engine.approvals.store import ApprovalsStore
from engine.config.loader import config_path as config_file_path
from engine.config.model import Config
from engine.policy.precedence import SessionOverrides
from engine.protocol.methods import Method, Topic
from engine.protocol.requests import Message, ProcessRequest
from engine.results import ToolResult
from engine.sandbox import bwraplimits, held, hostrevocations
from engine.sandbox import default_manager as default_sandbox_manager
from engine.sessions import SessionManager, SystemEvents
from engine.sessions.adopt import Adoption
from engine.sessions.host import HOLDERS_DIR
from engine.sessions.hosts import SessionHosts
from engine.sessions.quota import Quota
from engine.sessions.spool import SPOOL_NAME, EventSpool
from engine.tools.exec import ExecTool
from engine.tools.resume import restore_asks
from runner.egress import EgressHub
from runner.gateway import overrides_file
from runner.gateway.broadcast import Broadcaster
from runner.gateway.browsers import BrowserHub
from runner.gateway.journal import ApprovalJournal
from runner.gateway.live_config import LiveConfig
from runner.gateway.nodes import NodeHub
from runner.gateway.output import OutputFanout

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.tokenfiles import GatewayTokens


class Host(Protocol):
    """What the services need of the server that owns them (runner.gateway.server builds the services
    and hands itself in; this module never imports it, so the dependency runs one way)."""

    @property
    def connections(self) -> Collection[Connection]: ...

    def listeners(self) -> list[Connection]: ...

    @property
    def tokens(self) -> GatewayTokens: ...

    def request_stop(self) -> None: ...

    async def recheck(self) -> list[str]: ...

    async def revoke_agent(self, agent: str) -> tuple[bool, int]: ...

    async def rotate_agent(self, agent: str) -> tuple[str, int]: ...


log = logging.getLogger("exechost.gateway")

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
        # the live connections still who they were: a cut-off one hears nothing (GatewayServer.listeners)
        self.fanout = Broadcaster(lambda: server.listeners() if server is not None else ())
        # Resolved once: the daemon's environment does not change, and every call reads the config.
        path = Path(config_path) if config_path else config_file_path()
        self.live_config = LiveConfig(path, on_error=self.fanout.config_error)
        env_timeout = os.environ.get("EXECHOST_APPROVAL_TIMEOUT_MS", "").strip()
        if approval_timeout_ms is None and env_timeout.isdigit():
            approval_timeout_ms = int(env_timeout)  # tests shorten the 30-minute expiry this way
        self.approvals = ApprovalManager(
            **({"timeout_ms": approval_timeout_ms} if approval_timeout_ms else {})
        )
        self.store = ApprovalsStore(state_dir / "exec-approvals.json")
        # The decision history and the pending asks, on disk before a decision is acted upon.
        self.journal = ApprovalJournal(state_dir, self.approvals)
        self.events = SystemEvents(spool=EventSpool(state_dir / SPOOL_NAME))
        # Allow-always with limits, apart from exec-approvals.json (which OpenClaw also reads).
        self.grants = GrantStore(state_dir / GRANTS_NAME)
        # `/exec` and `/elevated` per session key, kept across restarts (runner/gateway/overrides_file.py).
        self.overrides_path = state_dir / overrides_file.OVERRIDES_NAME
        self.overrides: dict[str, SessionOverrides] = overrides_file.load(self.overrides_path)
        self.overrides_lock = asyncio.Lock()  # its writes, one at a time and in order
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
        self.sessions.on_exit = self.journal.session_ended  # an approved run's end, under its approval
        self.output = OutputFanout(self.sessions, self.connections)
        self.approvals.add_listener(self._on_approval)
        self._unsubscribe = [
            self.events.subscribe(self.fanout.system_event),
            self.sessions.add_listener(self._on_session_event),
        ]
        self._sandbox_manager: Any = None
        self._pool_start: asyncio.Task[None] | None = None
        # Set by hold_sessions() (the daemon): gateway-host sessions run in the session host, outliving us.
        self.holders: SessionHosts | None = None
        self.keep_sessions = True  # on a stop: leave held sessions running (`gateway stop --kill-sessions`)
        self.adoption: Adoption | None = None  # the kept sessions, adopted after the socket opens
        self._owed_revokes: list[str] = []  # agents revoked while no gateway ran (hostrevocations)
        self._adopting: asyncio.Task[None] | None = None
        self.nodes = NodeHub(self)  # links are opened on first use (and follow config edits)
        if self.sessions.quota is not None:  # an agent's sessions on nodes count against its cap here
            self.sessions.quota.elsewhere = self.nodes.held.count
        self.browsers = BrowserHub(self)  # containers started on first use; the door opens with them
        self.egress = EgressHub(self)  # sandboxes' egress proxy: listens from start()
        self.exec_tool.node_runner = self.nodes.run
        self.exec_tool.node_known = self.nodes.select

    # -- lifecycle

    def _agent_quota(self, agent: str) -> tuple[int, int]:
        cfg = self.config().exec_for(agent)
        return cfg.max_sessions_per_agent, cfg.max_output_bytes_per_agent

    def config(self) -> Config:
        """The config as it is on disk now (a broken edit keeps the last good one: LiveConfig)."""
        return self.live_config.get()

    def config_problem(self) -> str | None:
        """Why the config on disk is not the one in force (a broken edit), else None."""
        return self.live_config.problem()

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
        # An `agents revoke` made while no gateway ran: what the agent left running on this host ends
        # before anything of it is adopted or asked for (its held sessions are ended as they are adopted).
        self._owed_revokes = await asyncio.to_thread(hostrevocations.owed, self.state_dir)
        for agent in self._owed_revokes:
            killed = await asyncio.to_thread(hostrevocations.end, agent)
            log.warning("agent %s, revoked while no gateway ran: %d process(es) of it ended", agent, killed)
        if self.holders is not None:
            await self.holders.connect()  # started or re-attached; on failure a log line, plain children
            self.adoption = Adoption(self.sessions, self.holders, frozenset(self._owed_revokes))
            self.adoption.scan()
        else:
            await asyncio.to_thread(hostrevocations.settle, self.state_dir, self._owed_revokes)
        restored = restore_asks(self.exec_tool, self.journal.restorable_asks())
        if restored:
            log.info("restored %d pending approval(s) from %s", len(restored), self.journal.pending_file.path)
        self.journal.start()
        self.output.start()
        await self.egress.start()
        # Revocations a node did not answer (it was down, or no gateway ran): told as soon as it links.
        self.nodes.revocations.start()
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
        await asyncio.to_thread(hostrevocations.settle, self.state_dir, self._owed_revokes)
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
        self._sandbox_manager.progress = self.fanout.sandbox_progress

    def release_holders(self) -> None:
        """The process-wide sandbox manager forgets this gateway's session hosts (a stop, a failed start)."""
        if self.holders is not None and default_sandbox_manager().session_host is self.holders:
            default_sandbox_manager().session_host = None

    async def close(self) -> None:
        if self._adopting is not None:
            self._adopting.cancel()
            await asyncio.gather(self._adopting, return_exceptions=True)
        if self._pool_start is not None:
            self._pool_start.cancel()
            await asyncio.gather(self._pool_start, return_exceptions=True)
        await default_sandbox_manager().stop_pool()  # its spares stay for the next gateway to adopt
        manager = self._sandbox_manager
        if manager is not None and manager.progress == self.fanout.sandbox_progress:
            manager.progress = None
        self.release_holders()
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
        await self.journal.flush()  # nothing queued for disk is left behind
        await asyncio.to_thread(bwraplimits.drop_host_groups)  # (engine.tools.exec_host made them)

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
        return self.fanout.connections()

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None:
        self.fanout.broadcast(topic, event, data)

    def has_approver(self) -> bool:
        return self.fanout.has_approver()

    def connection_closed(self, conn: Connection) -> None:
        conn.approver = False
        conn.topics.clear()
        for approval_id in conn.waiting_approvals:
            self.approvals.requester_gone(approval_id)
        conn.waiting_approvals.clear()

    def _on_approval(self, kind: str, record: ApprovalRecord) -> None:
        self.journal.record(kind, record)
        self.fanout.approval(kind, record)

    def _on_session_event(self, event: str, data: dict[str, Any]) -> None:
        self.output.session_event(event, data, lambda: self.fanout.broadcast(Topic.SESSIONS, event, data))
