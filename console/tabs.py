"""The console's tabs: the panes in their order, the keys that switch between them, and what each
focuses when it shows, so the app composes and navigates them without spelling them out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import TabbedContent, TabPane

from console.gateway import GatewayLink
from console.widgets.approvals import ApprovalsPane
from console.widgets.browsers import BrowsersPane
from console.widgets.history import HistoryPane
from console.widgets.nodes import NodesPane
from console.widgets.panes import LinePane
from console.widgets.policy import PolicyPane
from console.widgets.sandboxes import SandboxesPane
from console.widgets.sessions import SessionsPane

BINDINGS: list[BindingType] = [
    Binding("1", "tab('approvals')", "Approvals"),
    Binding("2", "tab('sessions')", "Sessions"),
    Binding("3", "tab('events')", "Events"),
    Binding("4", "tab('policy')", "Policy"),
    Binding("5", "tab('sandboxes')", "Sandboxes"),
    Binding("6", "tab('history')", "History"),
    Binding("7", "tab('nodes')", "Nodes"),
    Binding("8", "tab('browsers')", "Browsers"),
    Binding("question_mark", "help", "Help"),
    Binding("q", "quit", "Quit"),
]
FOCUS_TARGETS = {
    "approvals": "#approval-list",
    "sessions": "#session-list",
    "events": "#events-pane",
    "policy": "#agent-list",
    "sandboxes": "#sandbox-list",
    "history": "#history-list",
    "nodes": "#node-list",
    # Without a focus target the approvals list keeps focus from a hidden tab and Textual switches
    # back to it (`8` did nothing from Approvals); focused, the pane's keys show in the footer.
    "browsers": "#browser-list",
}


def compose_tabs(
    link: GatewayLink,
    *,
    state: Path | None,
    config_path: str | None,
    live: bool,
    recent_commands: Callable[[], list[str]],
) -> ComposeResult:
    with TabbedContent(initial="approvals", id="tabs"):
        with TabPane("Approvals (0)", id="approvals"):
            yield ApprovalsPane(config_path=config_path, recent_commands=recent_commands, id="approvals-pane")
        with TabPane("Sessions", id="sessions"):
            yield SessionsPane(link, state=state, live=live, id="sessions-pane")
        with TabPane("Events", id="events"):
            yield LinePane(max_lines=2000, id="events-pane")
        with TabPane("Policy", id="policy"):
            yield PolicyPane(id="policy-pane")
        with TabPane("Sandboxes", id="sandboxes"):
            yield SandboxesPane(id="sandboxes-pane")
        with TabPane("History", id="history"):
            yield HistoryPane(id="history-pane")
        with TabPane("Nodes", id="nodes"):
            yield NodesPane(id="nodes-pane")
        with TabPane("Browsers", id="browsers"):
            yield BrowsersPane(id="browsers-pane")


def focus_tab(app: App[Any], tab: str) -> None:
    """Each pane's keys work as soon as its tab shows: focus its main list."""
    target = FOCUS_TARGETS.get(tab)
    if target is not None:
        with contextlib.suppress(Exception):
            app.query_one(target).focus()
