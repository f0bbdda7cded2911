"""The approvals inbox pane: pending asks (oldest first) and the detail of the selected one."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import DataTable, Static

from console.dialogs import GrantDialog, TextDialog
from console.inbox import InboxItem, clock_ms
from console.text import plain
from engine.display import MARKED_LINES, node_label, visible, warnings


def fmt_left(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}:{seconds % 60:02d}"


def _digest_text(sha: object) -> str:
    if isinstance(sha, str):
        return f"sha256 {sha[:12]}" if sha else "unreadable: refused"
    return "absent: must stay so"


def _code(text: str) -> Syntax:
    # Highlighting runs on the escaped text: nothing the agent typed reaches the terminal as is.
    shown = visible(text, newline=MARKED_LINES)
    return Syntax(shown, "bash", word_wrap=True, theme="ansi_dark", background_color="default")


def refusal_reason(reason: str, raw: str) -> str:
    """The analysis's reason, naming the redirection(s) when that is what it refused (`redirection: >
    /tmp/out`), so the operator sees which one without reading the whole command for it."""
    if reason != "redirection":
        return reason
    from engine.commands.analysis import redirections

    found = redirections(raw)
    return f"{reason}: {', '.join(found)}" if found else reason


def command_warnings(raw: str) -> list[str]:
    """`warnings(raw)`, with a heredoc's body counted as what it is: stdin data, shown apart and never run,
    so `EVERY LINE RUNS` is said only of the command lines (and not at all when there is one)."""
    found = warnings(raw)
    if "\n" not in raw:
        return found
    from engine.commands.shelltext import read_shell_text

    reading = read_shell_text(raw)
    if reading.reason or not reading.heredocs:
        return found
    outside, at = [], 0
    for doc in reading.heredocs:
        outside.append(raw[at : doc.span[0]])
        at = doc.span[1]
    outside.append(raw[at:])
    lines = sum(1 for line in "".join(outside).split("\n") if line.strip())
    data = sum(doc.data.count("\n") for doc in reading.heredocs)
    spans = [w for w in found if w.startswith("spans ")]
    kept = [w for w in found if not w.startswith("spans ")]
    if spans and lines > 1:
        kept.append(
            f"spans {lines} command lines (⏎ marks each break): every command line runs; the {data} "
            "heredoc line(s) below are stdin data, not run"
        )
    return kept


def render_command(raw: str) -> RenderableType:
    """The command, highlighted as code, with each heredoc body shown apart as a read-only data block
    (stdin for the command, never run, so never highlighted as commands)."""
    from engine.commands.shelltext import read_shell_text

    reading = read_shell_text(raw)
    if reading.reason or not reading.heredocs:
        return _code(raw)
    parts: list[RenderableType] = []
    at = 0
    for doc in reading.heredocs:
        start, end = doc.span
        if raw[at:start].strip():
            parts.append(_code(raw[at:start].rstrip("\n")))
        label = "literal" if doc.quoted else "no expansions"
        parts.append(
            Panel(
                plain(doc.data.rstrip("\n") if doc.data else "(empty)", "white", newline="\n"),
                title=plain(f"stdin data until {doc.delimiter} ({label}, not run)", "dim"),
                title_align="left",
                border_style="blue",
                expand=True,
            )
        )
        at = end
    if raw[at:].strip():
        parts.append(_code(raw[at:]))
    return Group(*parts)


def _host(view: dict[str, Any]) -> str:
    """The inbox's host column: a node's ask by the node's name (its id is in the detail)."""
    if view.get("nodeId"):
        return f"node {node_label(view.get('nodeName'), view.get('nodeId'), detail=False)}"
    return str(view.get("host") or "gateway")


def _requester(r: dict[str, Any]) -> str:
    node = node_label(r.get("nodeName"), r.get("nodeId"), detail=False)
    where = f"node {node}" if r.get("nodeId") else str(r.get("host") or "gateway")
    return f"{r.get('sessionKey') or '(no session)'} ({where})"


def current_digests(view: dict[str, Any]) -> dict[str, str | None]:
    """sha256 now of each agent-writable file the ask binds (on this machine): a file the agent rewrote
    after asking shows as changed before anyone approves it. None: gone or unreadable."""
    if view.get("nodeId"):
        return {}
    out: dict[str, str | None] = {}
    for row in view.get("contentDigests") or []:
        path = row.get("path") if isinstance(row, dict) else None
        if not (isinstance(path, str) and row.get("agentWritable") and row.get("sha256")):
            continue
        try:
            with open(path, "rb") as f:
                out[path] = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            out[path] = None
    return out


def render_detail(
    item: InboxItem | None,
    insight: dict[str, Any],
    now_ms: int | None = None,
    *,
    offline: str | None = None,
    now_digests: dict[str, str | None] | None = None,
) -> RenderableType:
    """Everything the operator needs to decide, in the order they read it. `offline`: no gateway answers
    now (why): what the inbox holds is as it was, and the agent's state is not known."""
    if item is None:
        if offline:
            return Text(f"{offline}\nNew requests appear here once it is back.", style="bold yellow")
        return Text("No pending approvals. New requests appear here at once.", style="dim")
    view = item.view
    title = Text.assemble(
        ("Approval ", "bold"),
        (str(view.get("slug") or item.key[:8]), "bold cyan"),
        (f"  ×{item.count}" if item.count > 1 else "", "bold yellow"),
        ("  via exec-approvals.sock" if item.source == "socket" else "", "italic"),
    )
    raw = str(view.get("command", ""))
    # The keys come first: at 80×24 a toast (bottom right) would cover them at the end of the detail.
    keys = Text(_keys(item.allowed), style="dim")
    parts: list[RenderableType] = [
        title,
        keys,
        *_alarms(item, raw, offline),
        render_command(raw),
        _facts(item, insight, now_ms),
    ]
    parts += _analysis(insight, raw)
    parts += _content(view.get("contentDigests") or insight.get("contentDigests") or [], now_digests)
    parts.append(_allow_always(item.allowed, insight))
    if insight.get("insightError"):
        parts.append(Text(f"(local analysis unavailable: {insight['insightError']})", style="dim"))
    return Group(*parts)


def _alarms(item: InboxItem, raw: str, offline: str | None) -> list[Text]:
    """What must stop the operator's hand: a dangerous command, a gone gateway or agent, what it runs."""
    view = item.view
    alarms = [Text(f"⚠ THIS COMMAND {w.upper()}", style="bold white on red") for w in command_warnings(raw)]
    if offline and item.source == "gateway":
        # Not "the agent stopped waiting": a caller whose gateway went away reconnects and keeps waiting,
        # and the ask is kept on disk for the next gateway.
        alarms.append(
            Text(
                f"{offline}. This ask is kept on disk and asked again by the next gateway; a waiting agent "
                "reconnects to it. Deciding needs the gateway back.",
                style="bold yellow",
            )
        )
    elif view.get("requesterGone"):
        alarms.append(
            Text(
                "The agent stopped waiting (its call was cancelled). Approving runs the command detached; "
                "its result goes to the agent's events.",
                style="bold yellow",
            )
        )
    # What the gateway found the command would run besides itself (a repository's filter driver, a
    # Makefile): one line each, escaped, since file and key names come from the agent's tree.
    alarms += [Text(visible(str(w)), style="bold yellow") for w in view.get("warnings") or []]
    return alarms


def _facts(item: InboxItem, insight: dict[str, Any], now_ms: int | None) -> Table:
    """Where and as whom it runs, under which policy, and who asks."""
    view = item.view
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    policy = f"security={view.get('security') or '?'}  ask={view.get('ask') or '?'}"
    if view.get("askFallback"):
        policy += f"  askFallback={view['askFallback']}"
    resolved = insight.get("resolvedPath") or view.get("resolvedPath")
    egress = view.get("egress")
    if egress:  # a sandbox's connection waits for this name: there is no executable to resolve
        resolved = f"egress to {egress} (a sandbox connection waits for this answer)"
    for label, value in (
        ("Host", view.get("host") or "gateway"),
        ("Node", node_label(view.get("nodeName"), view.get("nodeId")) if view.get("nodeId") else None),
        ("CWD", view.get("cwd") or "(default)"),
        ("Agent", view.get("agentId") or "main"),
        ("Agent says", view.get("agentReason")),
        ("Session", view.get("sessionKey")),
        ("Policy", policy),
        ("Egress" if egress else "Executable", resolved or "(not resolved)"),
        ("Time left", fmt_left(item.seconds_left(now_ms))),
    ):
        if value:
            facts.add_row(label, plain(value))  # agent-supplied: never markup, controls visible
    requesters = [r for r in view.get("requesters") or [] if isinstance(r, dict)]
    if len(requesters) > 1:  # one question, several askers: one decision answers every one of them
        facts.add_row(
            "Asked by",
            plain(", ".join(_requester(r) for r in requesters[:8]) + (" …" if len(requesters) > 8 else "")),
        )
    for key, value in sorted((view.get("env") or {}).items()):
        facts.add_row("Env", plain(f"{key}={value}", "yellow"))
    return facts


def _keys(allowed: Any) -> str:
    return "  ".join(
        k
        for k, d in (
            ("[a] allow once", "allow-once"),
            ("[A] allow always", "allow-always"),
            ("[d] deny", "deny"),
            ("[D] deny with reason", "deny"),
        )
        if d in allowed
    )


def _analysis(insight: dict[str, Any], raw: str) -> list[RenderableType]:
    """Whether the command parsed as plain, and each segment's allowlist hit or miss."""
    parts: list[RenderableType] = []
    segments = insight.get("segments") or []
    if insight.get("analysisOk") is False:
        refused = refusal_reason(str(insight.get("analysisReason") or "unparseable"), raw)
        parts.append(Text(f"✗ not provably plain: {visible(refused)}", style="bold red"))
    if segments:
        seg_table = Table.grid(padding=(0, 1))
        for seg in segments:
            argv = " ".join(seg.get("argv") or []) or str(seg.get("raw", ""))
            hit = seg.get("satisfiedBy")
            if hit:
                mark = Text("✓", style="green")
                why = plain(f"{hit}: {seg.get('matchedPattern') or seg.get('resolvedPath') or ''}", "dim")
            else:
                mark = Text("✗ miss", style="bold red")
                why = Text(
                    visible(seg.get("reason") or seg.get("resolvedPath") or "no allowlist entry"), style="red"
                )
            seg_table.add_row(mark, plain(argv), why)
        parts.extend([Text("Segments", style="bold"), seg_table])
    return parts


def _content(digests: list[Any], now_digests: dict[str, str | None] | None) -> list[RenderableType]:
    """The bytes this approval runs: any change before the run refuses it (approval-stale)."""
    if not digests:
        return []
    content = Table.grid(padding=(0, 1))
    changed: list[Text] = []
    for row in digests:
        sha = row.get("sha256")
        note = "agent-writable: runs a sealed copy" if row.get("agentWritable") and sha else ""
        style = "yellow"
        path = str(row.get("path") or "")
        if now_digests and path in now_digests and now_digests[path] != sha:
            now = now_digests[path]
            note, style = f"CHANGED since the ask: {_digest_text(now) if now else 'gone'} now", "bold red"
            changed.append(
                Text(
                    f"⚠ {visible(path)} changed after the ask: approving it is refused as approval-stale",
                    style="bold white on red",
                )
            )
        content.add_row(
            plain(str(row.get("role") or ""), "dim"),
            plain(path),
            Text(_digest_text(sha), style="cyan"),
            plain(f"{row.get('size', 0)} B", "dim"),
            Text(note, style=style),
        )
    return [Text("Content (checked again just before the run)", style="bold"), content, *changed]


def _allow_always(allowed: Any, insight: dict[str, Any]) -> Text:
    """What an allow-always would save, or why it is not offered."""
    if "allow-always" in allowed:
        patterns = insight.get("allowAlwaysPatterns") or []
        return Text.assemble(
            ("Allow always saves: ", "bold"),
            (visible(", ".join(patterns)) if patterns else "(computing…)", "cyan"),
        )
    unavailable = "ask=always: Allow Always is unavailable (approval required every time)."
    return Text(unavailable, style="italic yellow")


class ApprovalsPane(Horizontal):
    """Inbox list on the left, detail on the right; decisions are posted up as `Decide` messages."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "decide('allow-once')", "Allow once"),
        Binding("A", "decide('allow-always')", "Allow always"),
        Binding("d", "decide('deny')", "Deny"),
        Binding("D", "deny_reason", "Deny + reason"),
    ]

    class Resolve(Message):
        """The operator decided (after any confirmation); the app resolves the inbox row it belongs to."""

        def __init__(
            self,
            item: InboxItem,
            decision: str,
            reason: str | None = None,
            grant: dict[str, Any] | None = None,
        ) -> None:
            super().__init__()
            self.item = item
            self.decision = decision
            self.reason = reason
            self.grant = grant  # allow-always with limits (the approve verb's `grant`)

    class Selected(Message):
        def __init__(self, item: InboxItem | None) -> None:
            super().__init__()
            self.item = item

    def __init__(
        self,
        *,
        config_path: str | None = None,
        recent_commands: Callable[[], list[str]] = list,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.config_path = config_path  # socket asks carry no analysis: explained locally with this config
        self.recent_commands = recent_commands
        self.rows: list[InboxItem] = []
        self._drawn: dict[str, tuple[int, bool]] = {}
        self.insights: dict[str, dict[str, Any]] = {}
        self.now_digests: dict[str, dict[str, str | None]] = {}  # ask key -> path -> sha256 now
        self.offline: str | None = None  # why no gateway answers now (the app sets it), else None

    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="approval-list", cursor_type="row", zebra_stripes=True)
        table.add_columns("left", "×", "agent", "host", "command")
        yield table
        with VerticalScroll(id="approval-detail-box"):
            yield Static(id="approval-detail")

    @property
    def selected(self) -> InboxItem | None:
        table = self.query_one("#approval-list", DataTable)
        if not self.rows:
            return None
        return self.rows[min(max(table.cursor_row, 0), len(self.rows) - 1)]

    def show(self, rows: list[InboxItem]) -> None:
        """Update the list (append when only new rows arrived, else rebuild), keeping the cursor's approval.

        The detail view is refreshed after the list has painted: a new row must reach the screen first.
        """
        table: DataTable[Any] = self.query_one("#approval-list", DataTable)
        keep = self.selected.key if self.selected else None
        old_keys = [item.key for item in self.rows]
        same_prefix = [item.key for item in rows[: len(old_keys)]] == old_keys
        # Items are updated in place (a coalesced count, a requester gone): compare with what was drawn.
        drawn = {item.key: (item.count, self._gone(item)) for item in rows}
        unchanged = all(self._drawn.get(key) == drawn.get(key) for key in old_keys)
        start = len(old_keys) if same_prefix and unchanged else 0
        if start == 0:
            table.clear()
        self.rows = rows
        self._drawn = drawn
        now = clock_ms()
        for item in rows[start:]:
            view = item.view
            command = str(view.get("command", ""))
            flag = ("⚠ " if warnings(command) else "") + ("⌀ gone " if self._gone(item) else "")
            table.add_row(  # Text, never str: DataTable parses str cells as markup
                fmt_left(item.seconds_left(now)),
                str(item.count),
                plain(view.get("agentId") or "main"),
                plain(_host(view)),
                Text(flag, style="bold red") + plain(command[:200]),
                key=item.key,
            )
        if keep is not None and start == 0:
            for index, item in enumerate(rows):
                if item.key == keep:
                    table.move_cursor(row=index)
                    break
        self.call_after_refresh(self.refresh_detail)

    def _gone(self, item: InboxItem) -> bool:
        """Whether to say the agent left: never while the gateway is away (nobody knows then)."""
        return bool(item.view.get("requesterGone")) and not (self.offline and item.source == "gateway")

    def set_offline(self, why: str | None) -> None:
        """The connection's state, followed by the list (the `gone` marks) and the detail."""
        if why == self.offline:
            return
        self.offline = why
        self.show(self.rows)

    def tick(self) -> None:
        """Once a second: the countdowns."""
        table: DataTable[Any] = self.query_one("#approval-list", DataTable)
        now = clock_ms()
        for item in self.rows:
            try:
                table.update_cell(item.key, table.ordered_columns[0].key, fmt_left(item.seconds_left(now)))
            except Exception:  # noqa: S112 - the row went away between two ticks
                continue
        if self.rows:  # with none pending the detail never changes; an update would relayout each second
            self.refresh_detail()
            if self.selected is not None:
                self.check_content(self.selected)

    def refresh_detail(self) -> None:
        with contextlib.suppress(NoMatches):  # (scheduled after a refresh: the pane may be gone by then)
            self._refresh_detail()

    def _refresh_detail(self) -> None:
        item = self.selected
        insight = self.insights.get(item.key, {}) if item else {}
        now = self.now_digests.get(item.key) if item else None
        detail = render_detail(item, insight, offline=self.offline, now_digests=now)
        self.query_one("#approval-detail", Static).update(detail)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.refresh_detail()
        self.post_message(self.Selected(self.selected))

    def action_decide(self, decision: str) -> None:
        item = self.selected
        if item is None:
            self.notify("No pending approval selected.", severity="warning")
            return
        if decision not in item.allowed:
            self.notify(
                "allow-always is unavailable because the effective policy requires approval every time",
                severity="error",
            )
            return
        self.decide_flow(item, decision)

    def action_deny_reason(self) -> None:
        item = self.selected
        if item is not None:
            self.decide_flow(item, "deny", ask_reason=True)

    # -- analysis and decision flows

    @work(thread=True, group="content", exclusive=True, exit_on_error=False)
    def check_content(self, item: InboxItem) -> None:
        """Hash the ask's agent-writable files again (once a second, the selected ask only)."""
        now = current_digests(item.view)
        if now != self.now_digests.get(item.key):
            self.app.call_from_thread(self._set_digests, item.key, now)

    def _set_digests(self, key: str, now: dict[str, str | None]) -> None:
        with contextlib.suppress(NoMatches):
            self.now_digests[key] = now
            self.refresh_detail()

    def explain(self, item: InboxItem) -> None:
        """Segments/misses/patterns for the detail view: the gateway's own analysis when the view carries
        it, else (a socket ask, an older gateway) evaluated here off the UI thread."""
        from console.insight import insight_from_view

        insight = insight_from_view(item.view)
        if insight is not None:
            self._set_insight(item.key, insight)
        else:
            self.explain_locally(item)

    @work(thread=True, group="insight", exit_on_error=False)
    def explain_locally(self, item: InboxItem) -> None:
        from console.insight import explain_approval

        insight = explain_approval(item.view, self.config_path)
        self.app.call_from_thread(self._set_insight, item.key, insight)

    def _set_insight(self, key: str, insight: dict[str, Any]) -> None:
        with contextlib.suppress(NoMatches):  # runs after a refresh: the app may be closing by then
            self.insights[key] = insight
            self.refresh_detail()

    @work(group="dialog", exit_on_error=False)
    async def decide_flow(self, item: InboxItem, decision: str, ask_reason: bool = False) -> None:
        """A worker, so the confirm/reason dialogs can be awaited without blocking the app's queue."""
        if ask_reason:
            reason = await self.app.push_screen_wait(
                TextDialog("Deny with a reason", placeholder="why (goes back to the agent; may be empty)")
            )
            if reason is None:
                return
            self.post_message(self.Resolve(item, "deny", reason or None))
            return
        if decision == "allow-always" and item.view.get("egress"):
            body = Text()
            body.append("Allow always will add ")
            body.append(visible(str(item.view.get("egress"))), style="bold cyan")
            body.append(" to the egress allowlist of agent ")
            body.append(visible(item.view.get("agentId") or "main"), style="bold")
            body.append(" (a limit makes it a grant instead).\n")
            limits = await self.app.push_screen_wait(GrantDialog("Allow always?", body, limits=True))
            if limits is None:
                return
            self.post_message(self.Resolve(item, decision, grant=limits or None))
            return
        if decision == "allow-always":
            insight = self.insights.get(item.key, {})
            patterns = insight.get("allowAlwaysPatterns") or []
            body = Text()
            body.append("Allow always will save these allowlist patterns for agent ")
            body.append(visible(item.view.get("agentId") or "main"), style="bold")
            body.append(":\n")
            for pattern in patterns or ["(the exact command, as =command:<sha256>)"]:
                body.append(f"  {visible(pattern)}\n", style="bold cyan")
            also = await asyncio.to_thread(self._also_allowed, item, patterns, self.recent_commands())
            if also:
                body.append("\nIt would also allow these recent commands without asking:\n")
                for command in also[:8]:
                    body.append(f"  {visible(command)}\n", style="yellow")
            dialog = GrantDialog(
                "Allow always?",
                body,
                limits=item.source != "socket",
                session=bool(item.view.get("sessionOwner", True)),
            )
            limits = await self.app.push_screen_wait(dialog)
            if limits is None:
                return
            self.post_message(self.Resolve(item, decision, grant=limits or None))
            return
        self.post_message(self.Resolve(item, decision))

    @staticmethod
    def _also_allowed(item: InboxItem, patterns: list[str], commands: list[str]) -> list[str]:
        if not patterns or not commands:
            return []
        try:
            from console.insight import commands_also_allowed

            return commands_also_allowed(
                patterns, commands, str(item.view.get("agentId") or "main"), str(item.view.get("cwd") or "/")
            )
        except Exception:
            return []
