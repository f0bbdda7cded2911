"""Session flows of the console: follow output, replay and page the log, act on sessions, attach."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App
from textual.screen import Screen

from console.dialogs import ConfirmDialog, TextDialog
from console.gateway import GatewayLink
from console.widgets.sessions import SessionsPane
from engine.display import visible
from engine.protocol.frames import RemoteError

REPLAY_BYTES = 64 * 1024
LOG_PAGE_LINES = 500
ESC_REMNANT = re.compile(r"\[[0-9;?]*[A-Za-z]")


class SessionFlows(App[None]):
    """The sessions half of ConsoleApp (its base class), kept apart so each file reads in one sitting."""

    link: GatewayLink
    state: Path | None
    connect_gateway: bool
    log_page: dict[str, int]  # session id -> first line shown while paging the log
    seen_total: dict[str, tuple[Any, Any]]  # poll fallback: log size last shown
    replaying: str | None  # live output waits while this session's log is re-read

    read_chars: dict[str, int]  # no-push fallback: totalChars already looked at

    @property
    def sessions(self) -> SessionsPane:
        return self.query_one(SessionsPane)

    def notify_plain(self, message: str, **kwargs: Any) -> None:
        """notify() without markup: messages carry commands, paths and gateway texts."""
        self.notify(message, markup=False, **kwargs)

    async def ask_dialog(self, screen: Screen[Any]) -> Any:
        """A dialog's answer; only from workers (awaiting in a handler would stall the app's queue)."""
        return await self.push_screen_wait(screen)

    def unread(self) -> dict[str, int]:
        """Unread chars per session: counted from pushed output, else from each row's totalChars."""
        router = self.link.output
        if router.pushed:
            return router.unread
        out: dict[str, int] = {}
        for sid, row in self.sessions.sessions.items():
            total = row.get("totalChars")
            if isinstance(total, int):
                if sid == router.visible:
                    self.read_chars[sid] = total
                out[sid] = max(0, total - self.read_chars.setdefault(sid, 0))
        return out

    @on(SessionsPane.Selected)
    def on_session_selected(self, message: SessionsPane.Selected) -> None:
        self.link.output.show(message.session_id)
        self.log_page.pop(message.session_id or "", None)
        if message.session_id:
            self.replay(message.session_id)

    @on(SessionsPane.Act)
    def on_session_act(self, message: SessionsPane.Act) -> None:
        self.session_act_flow(message)

    def poll_visible(self) -> None:
        """Fallback for a gateway that does not push `session.output`: re-read the visible log on change."""
        router = self.link.output
        sid = router.visible
        if sid is None or router.pushed or not self.link.connected.is_set() or sid in self.log_page:
            return
        if self.sessions.sessions.get(sid, {}).get("status") == "running":
            self.poll_output(sid)

    @work(group="poll", exclusive=True, exit_on_error=False)
    async def poll_output(self, session_id: str) -> None:
        row = self.sessions.sessions.get(session_id, {})
        params: dict[str, Any] = {"action": "log", "sessionId": session_id, "limit": 1}
        if isinstance(row.get("scopeKey"), str):
            params["sessionKey"] = row["scopeKey"]
        try:
            details = (await self.link.request("process", params)).get("details") or {}
        except (RemoteError, ConnectionError):
            return
        total = (details.get("totalChars"), details.get("totalLines"))
        if total != self.seen_total.get(session_id):
            self.seen_total[session_id] = total
            self.replay(session_id)

    @work(group="replay", exclusive=True, exit_on_error=False)
    async def replay(self, session_id: str) -> None:
        """Fill the pane from the log tail; live chunks wait meanwhile and resume after its last byte."""
        if not self.connect_gateway:
            return
        self.replaying = session_id
        try:
            await self.link.follow(session_id)
            data, next_offset = await self.read_tail(session_id)
            if self.sessions.current != session_id:
                return
            pane = self.sessions
            if pane.is_pty(session_id):
                row = pane.sessions[session_id]
                pane.term_pane.reset(int(row.get("cols") or 120), int(row.get("rows") or 40))
            else:
                pane.line_pane.clear()
            router = self.link.output
            if next_offset is None:
                router.show(session_id)  # no offsets to line up with: start clean
            else:
                router.since[session_id] = next_offset
            pane.feed(data)
        finally:
            self.replaying = None

    async def read_tail(self, session_id: str) -> tuple[str, int | None]:
        """(text, raw byte offset it ends at) from `sessions.output`; else `process log` without offsets."""
        row = self.sessions.sessions.get(session_id, {})
        try:
            res = await self.link.request("sessions.output", {"sessionId": session_id, "limit": REPLAY_BYTES})
            next_offset = res.get("nextOffset")
            return str(res.get("data") or ""), next_offset if isinstance(next_offset, int) else None
        except RemoteError:
            pass
        except ConnectionError:
            return "", None
        try:
            res = await self.link.request(
                "process",
                {
                    "action": "log",
                    "sessionId": session_id,
                    "limit": LOG_PAGE_LINES,
                    "sessionKey": row.get("scopeKey"),
                },
            )
        except (RemoteError, ConnectionError):
            return "", None
        details = res.get("details") or {}
        if "totalLines" not in details:  # "No session found …" is a message, not output
            return "", None
        # The agent-facing log has ESC removed, leaving "[32m" behind: drop those remnants too.
        return ESC_REMNANT.sub("", str(details.get("aggregated") or res.get("text") or "")) + "\n", None

    @work(group="sessions-list", exclusive=True, exit_on_error=False)
    async def refresh_sessions(self) -> None:
        try:
            rows = (await self.link.request("sessions.list")).get("sessions", [])
        except (RemoteError, ConnectionError):
            return
        self.sessions.replace_all(rows)
        self.sessions.render_list(self.unread())

    @work(group="dialog", exit_on_error=False)
    async def session_act_flow(self, message: SessionsPane.Act) -> None:
        sid, verb = message.session_id, message.verb
        row = self.sessions.sessions.get(sid, {})
        pty = bool(row.get("pty"))
        params: dict[str, Any] = {"sessionId": sid}
        if verb == "write":
            text = message.text or ""
            if not text:
                params["action"] = "submit"
            else:
                params.update(action="write", data=text + ("\r" if pty else "\n"))
        elif verb == "send-keys":
            keys = await self.ask_dialog(
                TextDialog("Send keys", placeholder="C-c   up enter   0x1b   (space separated, tmux style)")
            )
            if not keys:
                return
            params.update(action="send-keys", keys=keys.split())
        elif verb == "paste":
            text = await self.ask_dialog(TextDialog("Paste text", placeholder="text to paste"))
            if not text:
                return
            params.update(action="paste", text=text)
        elif verb == "submit":
            params["action"] = "submit"
        elif verb == "kill":
            if not await self.ask_dialog(
                ConfirmDialog(
                    "Kill session?",
                    f"{sid}: {visible(row.get('command', ''))}\nSIGTERM to the process group, then SIGKILL.",
                    yes="Kill",
                )
            ):
                return
            params["action"] = "kill"
        elif verb == "clear":
            params["action"] = "clear"
        elif verb == "remove":
            if row.get("status") == "running" and not await self.ask_dialog(
                ConfirmDialog(
                    "Remove running session?",
                    f"{sid} is still running; removing terminates it.",
                    yes="Remove",
                )
            ):
                return
            params["action"] = "remove"
        elif verb == "attach":
            self.attach(sid)
            return
        elif verb in ("log-older", "log-newer", "follow"):
            self.page_log(sid, verb)
            return
        else:
            return
        self.run_process(params, row.get("scopeKey"))

    @work(group="process", exit_on_error=False)
    async def run_process(self, params: dict[str, Any], scope_key: Any) -> None:
        if isinstance(scope_key, str):
            params["sessionKey"] = scope_key
        try:
            res = await self.link.request("process", params)
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        text = str(res.get("text") or "")
        if params["action"] not in ("write", "submit") or "No " in text or "not" in text:
            self.notify_plain(text[:200] or params["action"], timeout=3)
        if params["action"] in ("clear", "remove", "kill"):
            self.refresh_sessions()

    @work(group="log", exclusive=True, exit_on_error=False)
    async def page_log(self, session_id: str, verb: str) -> None:
        """`[`/`]` page the on-disk log by LOG_PAGE_LINES (process log); `f` returns to live follow."""
        pane = self.sessions
        if verb == "follow" or pane.is_pty(session_id):
            self.log_page.pop(session_id, None)
            self.replay(session_id)
            return
        row = pane.sessions.get(session_id, {})
        params: dict[str, Any] = {"action": "log", "sessionId": session_id, "limit": LOG_PAGE_LINES}
        if isinstance(row.get("scopeKey"), str):
            params["sessionKey"] = row["scopeKey"]
        try:
            total = int(
                ((await self.link.request("process", {**params, "limit": 1})).get("details") or {}).get(
                    "totalLines"
                )
                or 0
            )
        except (RemoteError, ConnectionError, ValueError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        first = self.log_page.get(session_id, max(0, total - LOG_PAGE_LINES))
        first = max(0, first - LOG_PAGE_LINES) if verb == "log-older" else first + LOG_PAGE_LINES
        if first >= total:
            self.log_page.pop(session_id, None)
            self.replay(session_id)
            return
        params["offset"] = first
        try:
            res = await self.link.request("process", params)
        except (RemoteError, ConnectionError) as exc:
            self.notify_plain(str(exc), severity="error")
            return
        self.log_page[session_id] = first
        self.link.output.show(None)  # paging: live output must not scroll the page away
        pane.line_pane.clear()
        pane.line_pane.feed(str(res.get("text") or "") + "\n")
        pane.line_pane.scroll_home(animate=False)
        self.notify_plain(
            f"log lines {first + 1}–{min(first + LOG_PAGE_LINES, total)} of {total}; f follows live",
            timeout=3,
        )

    def attach(self, session_id: str) -> None:
        """Full-screen programs get the real terminal: suspend Textual, proxy the PTY until ctrl+]."""
        row = self.sessions.sessions.get(session_id, {})
        if not row.get("pty") or row.get("status") != "running":
            self.notify_plain("Only running PTY sessions can be attached.", severity="warning")
            return
        from console.attach import attach_session

        try:
            with self.suspend():
                attach_session(self.state, session_id, row)
        except Exception as exc:  # SuspendNotSupported (headless, web) and any terminal error
            self.notify_plain(f"attach unavailable: {exc}", severity="warning")
        self.replay(session_id)
