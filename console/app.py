"""The operator console: approvals inbox, sessions, events and policy over the gateway's control socket."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, TabbedContent

from console import replies, socket_asks, tabs
from console.commands import DirectiveCommands, is_directive
from console.gateway import GatewayLink, lost_text
from console.inbox import Inbox, InboxItem
from console.messages import (
    ApprovalRequested,
    ApprovalResolved,
    ApprovalUpdated,
    BrowserUpdated,
    GatewayConfig,
    GatewayConnected,
    GatewayEvent,
    GatewayLost,
    SandboxProgress,
    SessionExited,
    SessionStarted,
    SocketApprovalRequested,
    SystemEvent,
)
from console.screens.help import HelpScreen
from console.widgets.approvals import ApprovalsPane
from console.widgets.browsers import BrowsersPane
from console.widgets.history import HistoryPane
from console.widgets.listpane import ListPane
from console.widgets.panes import LinePane
from console.widgets.policy import SESSION_OVERRIDE_KEYS, PolicyPane
from console.widgets.sandboxes import SandboxesPane
from console.widgets.sessions import SessionsPane
from engine.approvals.socket.principal import socket_token_id
from engine.approvals.socket.server import (
    ApprovalSocketBusy,
    ApprovalSocketError,
    ApprovalSocketServer,
    PromptRequest,
)
from engine.approvals.store import ApprovalsFileError, ApprovalsStore
from engine.display import REPORT, visible
from engine.policy.precedence import SessionOverrides
from engine.protocol.frames import RemoteError
from engine.protocol.requests import ApprovalsRelay, Approve, PolicyOverride, Status
from engine.tools.exec_host import LocalExecHost

FLUSH_HZ = 30
LIST_RENDER_SEC = 0.1
LIST_REFRESH_SEC = 0.5

_M = TypeVar("_M", bound=GatewayEvent)


def _unless_unmounted(handler: Callable[[ConsoleApp, _M], None]) -> Callable[[ConsoleApp, _M], None]:
    """Gateway traffic keeps arriving while the app shuts down, after the panes are gone: it is dropped
    then, like the timers' (ConsoleApp._while_mounted)."""

    @functools.wraps(handler)
    def run(app: ConsoleApp, message: _M) -> None:
        with contextlib.suppress(NoMatches):
            handler(app, message)

    return run


class ConsoleApp(App[None]):
    """Everything durable lives in the gateway: quitting or crashing here loses no session or approval."""

    CSS_PATH = "styles/app.tcss"
    TITLE = "exechost"
    COMMANDS = App.COMMANDS | {DirectiveCommands}
    BINDINGS: ClassVar[list[BindingType]] = tabs.BINDINGS

    def __init__(
        self,
        state: Path | None = None,
        *,
        config_path: str | None = None,
        host_approval_socket: bool = True,
        autostart: bool = True,
        bell: bool = True,
        clock: bool = True,
        connect: bool = True,
    ) -> None:
        replies.install()  # a terminal's reply is never the operator's keys
        super().__init__()
        self.state = state
        self.config_path = config_path
        self.host_approval_socket = host_approval_socket
        self.quiet_socket_busy = False  # a web tab: another tab or console hosting the socket is no news
        self.bell_on_new = bell
        self.show_clock = clock
        self.connect_gateway = connect
        self.link = GatewayLink(self, state, autostart=autostart)
        self.inbox = Inbox()
        self.socket_server: ApprovalSocketServer | None = None
        self._socket_store: ApprovalsStore | None = None  # exec-approvals.json: its token, read at each yes
        # Runs the socket's exec frames and decides what the inbox shows for its request frames: one policy.
        self._exec_host = LocalExecHost(config_path)
        self.overrides: dict[str, SessionOverrides] = {}
        self.gateway_pid: int | None = None
        self.config_error: str | None = None
        self.shown_at: dict[str, float] = {}  # approval id -> wall time its row was painted (bench)
        self._list_timer: Timer | None = None
        self._refresh_timer: Timer | None = None

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.show_clock)
        yield from tabs.compose_tabs(
            self.link,
            state=self.state,
            config_path=self.config_path,
            live=self.connect_gateway,
            recent_commands=self._recent_commands,
        )
        yield Footer()

    @property
    def approvals(self) -> ApprovalsPane:
        return self.query_one(ApprovalsPane)

    @property
    def sessions(self) -> SessionsPane:
        return self.query_one(SessionsPane)

    @property
    def policy(self) -> PolicyPane:
        return self.query_one(PolicyPane)

    @property
    def events_pane(self) -> LinePane:
        return self.query_one("#events-pane", LinePane)

    def _recent_commands(self) -> list[str]:
        """What the sessions ran: allow-always shows which of them the new patterns would also allow."""
        return [str(r.get("command")) for r in self.sessions.sessions.values() if r.get("command")]

    def notify_plain(self, message: str, **kwargs: Any) -> None:
        """notify() without markup: messages carry commands, paths and gateway texts."""
        self.notify(message, markup=False, **kwargs)

    async def ask_dialog(self, screen: Screen[Any]) -> Any:
        """A dialog's answer; only from workers (awaiting in a handler would stall the app's queue)."""
        return await self.push_screen_wait(screen)

    @staticmethod
    def _while_mounted(callback: Callable[[], None]) -> Callable[[], None]:
        """A timer callback that does nothing once the panes are gone: timers can fire during shutdown,
        after the main screen's widgets were removed but before the timers were stopped."""

        def run() -> None:
            with contextlib.suppress(NoMatches):
                callback()

        return run

    async def on_mount(self) -> None:
        self.sub_title = "connecting to the gateway…"
        if self.connect_gateway:
            self.run_worker(self.link.run(), group="gateway", name="gateway-link", exit_on_error=False)
        self.set_interval(1 / FLUSH_HZ, self._while_mounted(self.flush_output))
        self.set_interval(1.0, self._while_mounted(self.tick))
        self.set_interval(0.25, self._while_mounted(lambda: self.sessions.poll_visible()))
        if self.host_approval_socket:
            await self.start_approval_socket()
        self.refresh_policy()
        self.approvals.show([])
        self.focus_tab("approvals")

    async def on_unmount(self) -> None:
        if self.socket_server is not None:
            await self.socket_server.close()

    async def start_approval_socket(self) -> None:
        """Host exec-approvals.sock at the path/token in exec-approvals.json; never steal a live one."""
        try:
            store = ApprovalsStore()
            path, _token = await asyncio.to_thread(store.socket_info)
            # Every frame is the socket's principal under this config (main, or nobody): the socket_decider
            # is only ever asked as that agent, never as the agent a frame names (SECURITY.md, Principals).
            server = ApprovalSocketServer(
                path,
                store.socket_token_now,  # each frame's, as the file holds it then
                decider=self.socket_decider,
                exec_handler=self._exec_host,
                config_path=self.config_path,
            )
            await server.start()
        except (ApprovalSocketError, ApprovalsFileError, OSError) as exc:
            if not (self.quiet_socket_busy and isinstance(exc, ApprovalSocketBusy)):
                self.notify_plain(f"approval socket not hosted: {exc}", severity="warning", timeout=8)
            return
        self.socket_server = server
        self._socket_store = store

    async def socket_decider(self, request: PromptRequest) -> str:
        """The socket server awaits this. With the gateway up, the ask is handed to it (`approvals.relay`):
        one more pending approval, listed by `exechost approvals pending`, answerable from anywhere, shown
        here as a gateway row; the gateway is then the only decider, and a relay that fails is its answer
        (deny), never a turn to this console's inbox, where its proof of the socket token, its policy and
        its share of asks would not hold (fresh round 18 b). Without it the inbox resolves a Future (toad's
        Future-in-a-Message), and a yes stands only if the token the ask proved is still the socket's."""
        # Which token the ask proved: its frame's (the server sets it); an ask naming none is held to the
        # token the file holds as it arrives, so a token replaced while it waits still ends it.
        store = self._socket_store or ApprovalsStore()
        proved = request.token_id or socket_token_id(await asyncio.to_thread(store.socket_token_now))
        if self.link.connected.is_set():
            relay = socket_asks.relay_params(dataclasses.replace(request, token_id=proved))
            try:
                answer = await self.link.request(relay)
            except asyncio.CancelledError:
                # The socket client gave up: take its row away everywhere (a fire-and-forget request).
                self.run_worker(
                    self.link.request(ApprovalsRelay(id=request.id, withdraw=True)),
                    group="relay-withdraw",
                    exit_on_error=False,
                )
                raise
            except (RemoteError, ConnectionError) as exc:
                self.notify_plain(f"socket ask denied: the gateway refused it: {exc}", severity="warning")
                return "deny"
            return str(answer.get("decision") or "deny")  # expired unanswered: the asker is refused
        if request.source == "socket":
            # A `request` frame's labels are its client's: the row shows, and offers, what this console's
            # own policy decides for the socket's principal (the exec path's decision, LocalExecHost).
            decided = await self._exec_host.policy(request.command, request.cwd, request.agent_id or "main")
            shown = socket_asks.as_policy_decides(request, decided)
            if shown is None:
                self.notify_plain("socket ask denied: the policy refuses it", severity="warning")
                return "deny"
            request = shown
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.post_message(SocketApprovalRequested(request, future))
        said = socket_asks.answered(request, await future)
        # The yes, checked at the moment it is given, as the gateway's relay checks it (stamp.stale()).
        now = await asyncio.to_thread(store.socket_token_now)
        if said != "deny" and (not now or socket_token_id(now) != proved):
            self.notify_plain("socket ask denied: its socket token was replaced", severity="warning")
            return "deny"
        return said

    # ------------------------------------------------------------------ gateway traffic

    # Gateway traffic keeps arriving while the app shuts down, after the panes are gone: it is dropped then,
    # like the timers' (_while_mounted).
    def on_gateway_connected(self, message: GatewayConnected) -> None:
        with contextlib.suppress(NoMatches):
            self._gateway_connected(message)

    def _gateway_connected(self, message: GatewayConnected) -> None:
        self.gateway_pid = message.pid
        self.config_error = None
        self.show_header()
        self._connection_changed(None)
        self.load_status()
        self.inbox.replace_gateway(message.pending)
        self.sessions.replace_all(message.sessions)
        self.sessions.render_list(self.sessions.unread())
        self.refresh_inbox()
        self.refresh_policy()
        for item in self.inbox.rows():
            self.approvals.explain(item)
        if self.sessions.current:
            self.sessions.replay(self.sessions.current)

    def show_header(self) -> None:
        """The sub-title says what an operator must not miss: a broken config, session overrides."""
        parts = [f"gateway pid {self.gateway_pid}"]
        if self.config_error:
            parts.append(f"⚠ {visible(self.config_error)}")
        if self.overrides:
            parts.append("overrides: " + ", ".join(visible(k) for k in sorted(self.overrides)))
        self.sub_title = "  ·  ".join(parts)

    @work(group="status", exclusive=True, exit_on_error=False)
    async def load_status(self) -> None:
        try:
            status = await self.link.request(Status())
        except (RemoteError, ConnectionError):
            return
        self.set_config_error(status.get("configError"))

    def set_config_error(self, error: Any) -> None:
        was, self.config_error = self.config_error, (str(error) if error else None)
        self.show_header()
        if self.config_error:
            # The whole text, where it stays: a toast would cut it off and go away.
            whole = Text(f"config.toml is broken: {visible(self.config_error)}", style="bold red")
            self.policy.show_check(whole)
            self.notify_plain(f"config broken: {self.config_error[:120]}", severity="error", timeout=8)
        elif was:
            self.policy.show_check(Text("config.toml is valid again.", style="green"))

    def on_gateway_lost(self, message: GatewayLost) -> None:
        self.sub_title = visible(lost_text(message.reason))  # whole: a cut cause reads as `…/con`
        with contextlib.suppress(NoMatches):
            self._connection_changed(visible(lost_text(message.reason)))

    def _connection_changed(self, lost: str | None) -> None:
        """Every pane follows the link by itself: the inbox stops saying an agent left (nobody knows while
        the gateway is away), the list panes reload when it is back or say it is gone, history reloads."""
        self.approvals.set_offline(lost)
        for pane in self.query(ListPane):
            pane.connection_changed(lost)
        if lost is None:
            with contextlib.suppress(NoMatches):
                self.query_one(HistoryPane).reload()

    # Each pushed event as its typed message (console.messages; the link builds them), one handler each.

    @on(ApprovalRequested)
    @_unless_unmounted
    def on_approval_requested(self, message: ApprovalRequested) -> None:
        self.add_approval("gateway", str(message.data.get("id")), message.data)

    @on(ApprovalUpdated)
    @_unless_unmounted
    def on_approval_updated(self, message: ApprovalUpdated) -> None:
        data = message.data
        item = self.inbox.find(str(data.get("id")))
        if item is not None and isinstance(data.get("count"), int):
            item.view["count"] = data["count"]
            item.view["requesterGone"] = bool(data.get("requesterGone"))
            self.refresh_inbox()

    @on(ApprovalResolved)
    @_unless_unmounted
    def on_approval_resolved(self, message: ApprovalResolved) -> None:
        if self.inbox.discard(str(message.data.get("id"))) is not None:
            self.refresh_inbox()
        if self.query_one(TabbedContent).active == "history":
            self.query_one(HistoryPane).reload()

    @on(SandboxProgress)
    @_unless_unmounted
    def on_sandbox_progress(self, message: SandboxProgress) -> None:
        data = message.data
        name, text = str(data.get("containerName") or ""), str(data.get("message") or "")
        self.query_one(SandboxesPane).progress(name, text)
        self.notify_plain(f"sandbox {name}: {text}", title="sandbox", timeout=3)

    @on(BrowserUpdated)
    @_unless_unmounted
    def on_browser_updated(self, message: BrowserUpdated) -> None:
        pane = self.query_one(BrowsersPane)
        if pane.is_on_screen:
            pane.action_refresh_list()

    @on(SessionStarted)
    @on(SessionExited)
    @_unless_unmounted
    def on_session_row(self, message: SessionStarted | SessionExited) -> None:
        data = message.data
        row = data.get("session")
        self.sessions.upsert(row if isinstance(row, dict) else data)
        self.render_sessions_soon()
        if isinstance(message, SessionExited):
            self.refresh_sessions_soon()
            if data.get("sessionId") == self.sessions.current and self.sessions.current:
                self.sessions.replay(self.sessions.current)  # the log has everything up to EOF

    @on(GatewayConfig)
    @_unless_unmounted
    def on_gateway_config(self, message: GatewayConfig) -> None:
        self.set_config_error(message.data.get("error"))

    @on(SystemEvent)
    @_unless_unmounted
    def on_system_event(self, message: SystemEvent) -> None:
        data = message.data
        stamp = time.strftime("%H:%M:%S", time.localtime((data.get("ts") or time.time() * 1000) / 1000))
        key, text = visible(data.get("sessionKey", "")), visible(data.get("text", ""), newline=REPORT)
        self.events_pane.feed(f"{stamp}  [{key}]  {text}\n")

    def render_sessions_soon(self) -> None:
        """Session events come in bursts (100 sessions ending together): one list render per 100 ms."""
        if self._list_timer is None:
            self._list_timer = self.set_timer(LIST_RENDER_SEC, self._render_sessions_now)

    def _render_sessions_now(self) -> None:
        self._list_timer = None
        with contextlib.suppress(NoMatches):  # the app is closing
            self.sessions.render_list(self.sessions.unread())

    def refresh_sessions_soon(self) -> None:
        """One `sessions.list` re-read after a burst of exits, not one per exit."""
        if self._refresh_timer is None:
            self._refresh_timer = self.set_timer(LIST_REFRESH_SEC, self._refresh_sessions_now)

    def _refresh_sessions_now(self) -> None:
        self._refresh_timer = None
        with contextlib.suppress(NoMatches):  # the app is closing
            self.sessions.refresh_sessions()

    def on_socket_approval_requested(self, message: SocketApprovalRequested) -> None:
        req = message.request
        view = socket_asks.inbox_view(req)
        future = message.future

        def gone(fut: asyncio.Future[str]) -> None:
            if fut.cancelled() and self.inbox.discard(req.id) is not None:
                self.refresh_inbox()

        future.add_done_callback(gone)
        self.add_approval("socket", req.id, view, future)

    def add_approval(
        self, source: str, approval_id: str, view: dict[str, Any], future: asyncio.Future[str] | None = None
    ) -> None:
        item, new = self.inbox.add(source, approval_id, view, future)
        self.refresh_inbox()
        # Paint the row first; the local analysis (a thread holding the GIL) and the toast come after.
        self.call_after_refresh(self._after_shown, item, approval_id, new)

    def _after_shown(self, item: InboxItem, approval_id: str, new: bool) -> None:
        self.shown_at.setdefault(approval_id, time.time())
        if not new:
            return
        with contextlib.suppress(NoMatches):  # (after a refresh: the panes may be gone by then)
            self.approvals.explain(item)
        if self.bell_on_new:
            self.bell()
        self.notify_plain(
            f"approval needed: {visible(str(item.view.get('command', ''))[:60])}", title="exechost", timeout=3
        )

    def refresh_inbox(self) -> None:
        count = len(self.inbox)
        self.query_one(TabbedContent).get_tab("approvals").label = f"Approvals ({count})"
        self.title = f"exechost — {count} pending" if count else "exechost"
        self.approvals.show(self.inbox.rows())

    @on(ApprovalsPane.Resolve)
    def on_resolve(self, message: ApprovalsPane.Resolve) -> None:
        self.resolve(message.item, message.decision, message.reason, message.grant)

    def resolve(
        self, item: InboxItem, decision: str, reason: str | None = None, grant: dict[str, Any] | None = None
    ) -> None:
        self.inbox.pop(item.key)
        self.refresh_inbox()
        if item.source == "socket":
            for future in item.futures:
                if not future.done():
                    future.set_result(decision)
            return
        self.send_approve(list(item.ids), decision, reason, grant)

    @work(group="approve", exit_on_error=False)
    async def send_approve(
        self, ids: list[str], decision: str, reason: str | None, grant: dict[str, Any] | None = None
    ) -> None:
        for approval_id in ids:
            msg = Approve(id=approval_id, decision=decision, reason=reason or None, grant=grant or None)
            try:
                await self.link.request(msg)
            except (RemoteError, ConnectionError) as exc:
                self.notify_plain(f"approve {approval_id[:8]} failed: {exc}", severity="error")
                return
        self.notify_plain(f"{decision}: {len(ids)} request(s)", timeout=2)

    # ------------------------------------------------------------------ sessions

    def flush_output(self) -> None:
        """~30 Hz: the sessions pane takes what arrived for its visible session (it owns flush and replay)."""
        self.sessions.flush_output()

    def tick(self) -> None:
        """1 Hz: countdowns and the list's runtime/unread cells. Approvals need no polling: the gateway
        pushes requested/updated/resolved and never sheds them; a reconnect resyncs the whole list."""
        self.approvals.tick()
        self.sessions.render_list(self.sessions.unread())
        self._ticks = getattr(self, "_ticks", 0) + 1
        if self._ticks % 2 == 0 and self.link.connected.is_set() and not self.link.output.pushed:
            self.sessions.refresh_sessions()  # without pushed output, totalChars is how unread is known

    @on(PolicyPane.Changed)
    def on_policy_changed(self, message: PolicyPane.Changed) -> None:
        self.overrides = message.overrides
        self.show_header()

    def refresh_policy(self) -> None:
        self.policy.reload()

    # ------------------------------------------------------------------ palette directives

    def palette_example(self, text: str) -> None:
        if "<" in text:
            self.notify_plain(f"type it in the palette: {text}", timeout=4)
        else:
            self.run_directive(text)

    def directive_target(self) -> str:
        """`/exec` applies to the selected session's scope on the Sessions tab, else the selected agent."""
        tabbed = self.query_one(TabbedContent)
        if tabbed.active == "sessions" and self.sessions.current:
            key = self.sessions.sessions.get(self.sessions.current, {}).get("scopeKey")
            if isinstance(key, str):
                return key
        agent = self.policy.selected
        return f"agent:{agent.agent_id if agent else 'main'}"

    @work(group="directive", exit_on_error=False)
    async def run_directive(self, text: str) -> None:
        text = text.strip()
        if not is_directive(text):
            self.notify_plain(
                "Not a directive: /exec …, /elevated …, /approve <id> <decision>", severity="error"
            )
            return
        word = text.lstrip("/").split(None, 1)[0].lower()
        if word == "approve":
            await self._approve_directive(text)
            return
        key = self.directive_target()
        agent = key.split(":", 1)[1] if key.startswith("agent:") else None
        try:
            # The gateway parses and applies it (and refuses what this connection may not set).
            res = await self.link.request(PolicyOverride(session_key=key, directive=text, agent_id=agent))
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        values = (res.get("details") or {}).get("overrides") or {}
        known = {k: v for k, v in values.items() if k in SESSION_OVERRIDE_KEYS}
        self.overrides[key] = SessionOverrides(**known)
        if key.startswith("agent:") and key.count(":") == 1:
            scope = (
                f"set for {key}: applies to every call of agent {key[6:]} (CLI and MCP calls, and sessions "
                "without their own override)"
            )
        else:
            scope = f"set for session {key} only (other sessions of the agent are not affected)"
        self.notify_plain(f"{res.get('text') or 'ok'} — {visible(scope)}", timeout=8)
        self.refresh_policy()

    async def _approve_directive(self, text: str) -> None:
        from engine.approvals.decisions import USAGE, parse_approve_args

        args = text.lstrip("/").split()[1:]
        parsed = parse_approve_args(*args) if len(args) == 2 else None
        if parsed is None:
            self.notify_plain(USAGE, severity="error")
            return
        approval_id, decision = parsed
        local = [
            i
            for i in self.inbox.rows()
            if i.source == "socket" and any(x.lower().startswith(approval_id.lower()) for x in i.ids)
        ]
        if len(local) == 1:
            self.resolve(local[0], decision)
            self.notify_plain(f"✅ Approval {decision} submitted for {approval_id}.")
            return
        try:
            await self.link.request(Approve(id=approval_id, decision=decision))
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(f"❌ Failed to submit approval: {exc}", severity="error")
            return
        item = next((i for i in self.inbox.rows() if any(x.startswith(approval_id) for x in i.ids)), None)
        if item is not None:
            self.inbox.pop(item.key)
            self.refresh_inbox()
        self.notify_plain(f"✅ Approval {decision} submitted for {approval_id}.")

    # ------------------------------------------------------------------ navigation

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.focus_tab(tab)

    def focus_tab(self, tab: str) -> None:
        tabs.focus_tab(self, tab)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    @on(TabbedContent.TabActivated)
    def on_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "policy":
            self.refresh_policy()
        if event.pane.id == "history":
            self.query_one(HistoryPane).reload()
        if event.pane.id == "browsers" and self.link.connected.is_set():
            self.query_one(BrowsersPane).action_refresh_list()
        if event.pane.id == "sandboxes" and self.link.connected.is_set():
            self.query_one(SandboxesPane).action_refresh_list()
        if event.pane.id:
            self.focus_tab(event.pane.id)
