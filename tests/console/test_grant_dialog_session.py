"""The allow-always dialog offers 'this session only' only when the ask has one session to bind it to
(fresh round 8 o: the gateway refuses it on a sessionless ask, so the console does not offer it)."""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.widgets import Button, Static

from console.dialogs import GrantDialog
from console.dialogs.grant import NO_SESSION


class _Host(App[None]):
    def __init__(self, dialog: GrantDialog) -> None:
        super().__init__()
        self.dialog = dialog
        self.chosen: list[dict[str, Any] | None] = []

    def on_mount(self) -> None:
        self.push_screen(self.dialog, self.chosen.append)


async def _labels_then_press(session: bool, key: str) -> tuple[list[str], str, list[dict[str, Any] | None]]:
    app = _Host(GrantDialog("Allow always?", "body", limits=True, session=session))
    async with app.run_test() as pilot:
        await pilot.pause()
        labels = [str(b.label) for b in app.screen.query(Button)]
        text = " ".join(str(s.render()) for s in app.screen.query(Static))
        await pilot.press(key)
        await pilot.pause()
        return labels, text, app.chosen


async def test_a_sessionless_ask_is_not_offered_this_session_only() -> None:
    labels, text, chosen = await _labels_then_press(False, "s")
    assert not any("This session only" in label for label in labels), labels
    assert any("30 min" in label for label in labels)
    assert NO_SESSION in text
    assert chosen == []  # `s` chose nothing: the dialog is still open
    _labels, _text, chosen = await _labels_then_press(False, "5")
    assert chosen == [{"uses": 5}]


async def test_an_ask_from_one_session_offers_it() -> None:
    labels, text, chosen = await _labels_then_press(True, "s")
    assert any("This session only" in label for label in labels), labels
    assert NO_SESSION not in text
    assert chosen == [{"sessionOnly": True}]
