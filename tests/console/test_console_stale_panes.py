"""Issue 21: pane messages that outlived what they described ("No nodes configured" after a node was
added, "not connected" under a live row, a 5-minute-old "container started")."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult

from console.widgets.nodes import NO_NODES, NodesPane
from tests.helpers.gateway import wait_until


class _Host(App[None]):
    """The panes with no gateway link: their lists come from the data the tests hand them."""

    link: Any = None

    def compose(self) -> ComposeResult:
        yield NodesPane()


def _text(app: App[None], widget_id: str) -> str:
    return str(app.query_one(widget_id).render())


NODE = {"name": "alpha", "host": "10.0.0.2", "state": "connected", "platform": "linux", "caps": ["run"]}


async def test_no_nodes_message_goes_when_a_node_appears_and_old_errors_hide_under_live_rows() -> None:
    app = _Host()
    async with app.run_test(size=(140, 30)) as pilot:
        pane = app.query_one(NodesPane)
        pane.show([])
        await pilot.pause()
        assert NO_NODES in _text(app, "#node-detail")
        pane.show([{**NODE, "lastError": "not connected"}])  # connected now; the error is from before
        await pilot.pause()
        detail = _text(app, "#node-detail")
        assert NO_NODES not in detail and "alpha" in detail
        assert "not connected" not in detail
        pane.show([{**NODE, "state": "down", "lastError": "cannot connect: refused"}])
        await pilot.pause()
        assert "cannot connect: refused" in _text(app, "#node-detail")  # a down node still says why


async def test_a_one_off_message_does_not_linger() -> None:
    # "container started" (and the like) is shown with _detail_for_now: gone after TRANSIENT_SEC.
    app = _Host()
    async with app.run_test(size=(140, 30)) as pilot:
        pane = app.query_one(NodesPane)
        await wait_until(lambda: "waiting for the gateway" in _text(app, "#node-detail"))  # no link yet
        pane.TRANSIENT_SEC = 0.3  # 10 s in the console
        pane._detail_for_now(Text("openclaw-sbx-main: container started"))
        await pilot.pause()
        assert "container started" in _text(app, "#node-detail")

        async def gone() -> bool:
            await pilot.pause()
            return _text(app, "#node-detail") == pane.HINT

        await wait_until(gone)
