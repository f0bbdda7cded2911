"""The help screen: every key, grouped by pane (the footer shows the ones in reach)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYMAP: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Everywhere",
        [
            ("1 … 8", "Approvals / Sessions / Events / Policy / Sandboxes / History / Nodes / Browsers"),
            ("esc", "leave an input line or a dialog"),
            ("ctrl+p", "command palette: /exec …, /elevated …, /approve <id> <decision>"),
            ("?", "this help"),
            ("q", "quit (the gateway keeps every session and pending approval)"),
        ],
    ),
    (
        "Approvals",
        [
            ("↑ / ↓", "select a pending request (oldest first)"),
            ("a", "allow once"),
            ("A", "allow always (shows the exact patterns it will save first)"),
            ("d", "deny"),
            ("D", "deny with a reason that goes back to the agent"),
        ],
    ),
    (
        "Sessions",
        [
            ("↑ / ↓", "select a session; its output follows live"),
            ("i", "focus the input line (Enter writes the line to stdin, Esc leaves it)"),
            ("/", "filter sessions by id, name or command; Esc clears the filter"),
            ("s", "send keys, tmux style: C-c, up, enter, 0x1b …"),
            ("p", "paste text (bracketed)"),
            ("u", "submit (send CR)"),
            ("k", "kill (asks first)"),
            ("x", "clear a finished session"),
            ("delete", "remove (asks first when running)"),
            ("t", "attach a PTY session full-screen; ctrl+] detaches"),
            ("[ / ]", "page the on-disk log back / forward; f follows live again"),
        ],
    ),
    (
        "Policy",
        [
            ("↑ / ↓", "select an agent: effective policy and why"),
            ("n", "add an allowlist pattern (optionally ' :: argPattern')"),
            ("delete", "remove the selected allowlist entry"),
            ("c", "check a command against the agent's policy"),
        ],
    ),
    (
        "Sandboxes",
        [
            ("↑ / ↓", "select a container (creation progress shows below the list)"),
            ("r", "refresh the list"),
            ("e", "explain the selected container's sandbox settings"),
            ("x", "recreate: remove it (asks first); the next exec recreates it"),
            ("p", "prune idle and old containers"),
        ],
    ),
    (
        "History",
        [
            ("↑ / ↓", "every decided approval: who, when, the command, the run it led to"),
            ("r", "reload"),
        ],
    ),
    (
        "Nodes",
        [
            ("↑ / ↓", "a node: state, address, RTT, node id, last error"),
            ("r / p", "refresh / ping every node (connects where needed)"),
        ],
    ),
    (
        "Browsers",
        [
            ("↑ / ↓", "a browser sandbox: state, CDP, page title and URL; its latest screenshot below"),
            ("s", "take a screenshot of its page now"),
            ("u", "show its noVNC and CDP links (they carry its token)"),
            ("x", "stop it (asks first); the next browser call starts a fresh one"),
        ],
    ),
]


def keymap_table() -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for group, rows in KEYMAP:
        table.add_row(Text(group, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
        table.add_row("", "")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help"):
            yield Static("exechost console — keys", classes="dialog-title")
            yield Static(keymap_table())

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
