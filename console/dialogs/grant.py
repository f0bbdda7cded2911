"""The allow-always dialog: forever, or a grant with limits (30 minutes, 8 hours, this session, 5 uses)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

# (key, button label, grant limits as the `approve` verb takes them; {} = forever, the approvals file)
CHOICES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("y", "Always", {}),
    ("1", "30 min", {"forMs": 30 * 60_000}),
    ("2", "8 hours", {"forMs": 8 * 3_600_000}),
    ("s", "This session only", {"sessionOnly": True}),
    ("5", "5 uses", {"uses": 5}),
)


NO_SESSION = "No 'this session only': this ask came from no one session (a call without a session key)."


class GrantDialog(ModalScreen[dict[str, Any] | None]):
    """Dismisses with the chosen limits ({} = allow always, forever), or None on `n`/Escape."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, f"choose({index})", label) for index, (key, label, _) in enumerate(CHOICES)),
        Binding("n", "cancel", "No"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, title: str, body: RenderableType, limits: bool = True, session: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.limits = limits  # OpenClaw's socket clients take only allow-always: no limited choices
        # An ask from no one session (a sessionless call, or two sessions) has no session to bind a grant
        # to: the gateway refuses "this session only" there, so it is not offered (and the dialog says why).
        self.session = session

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(self.title_text), classes="dialog-title")
            yield Static(Text(self.body) if isinstance(self.body, str) else self.body, classes="dialog-body")
            if self.limits:
                yield Static(
                    Text("Or allow it only for a while: a grant, listed in Policy, revocable.", style="dim"),
                    classes="dialog-body",
                )
                if not self.session:
                    yield Static(Text(NO_SESSION, style="dim"), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                for index, (key, label, _) in enumerate(CHOICES if self.limits else CHOICES[:1]):
                    if not self._offered(index):
                        continue
                    button = Button(Text(f"{label} ({key})"), id=f"choice-{index}")
                    if index == 0:
                        button.variant = "primary"
                    yield button
                yield Button(Text("No (n)"), id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        button = event.button.id or ""
        if button.startswith("choice-"):
            self.action_choose(int(button.removeprefix("choice-")))
        else:
            self.dismiss(None)

    def _offered(self, index: int) -> bool:
        return (index == 0 or self.limits) and (self.session or not CHOICES[index][2].get("sessionOnly"))

    def action_choose(self, index: int) -> None:
        if not self._offered(index):
            return
        self.dismiss(dict(CHOICES[index][2]))

    def action_cancel(self) -> None:
        self.dismiss(None)
