"""A yes/no modal for anything that cannot be undone (kill, remove, allow always)."""

from __future__ import annotations

from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmDialog(ModalScreen[bool]):
    """Dismisses with True on `y`/Yes, False on `n`/Escape/No."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, title: str, body: RenderableType, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            # Titles and bodies carry agent-supplied text: plain Text, never markup.
            yield Static(Text(self.title_text), classes="dialog-title")
            yield Static(Text(self.body) if isinstance(self.body, str) else self.body, classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(Text(f"{self.yes} (y)"), variant="primary", id="yes")
                yield Button(Text("No (n)"), id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)
