"""The Browsers pane against a real gateway and a real browser sandbox (pilot): state, page, screenshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from console.pixels import HALF, render
from console.widgets.browsers import BrowsersPane
from engine.protocol.client import ControlClient
from tests.helpers.browser import browser_image, browser_state
from tests.helpers.gateway import connect, gateway, wait_until

__all__ = ["browser_image", "browser_state"]  # fixtures


class _Host(App[None]):
    """Just the pane, with the one thing it needs from the console: a `link` with `request`."""

    def __init__(self, client: ControlClient) -> None:
        super().__init__()
        self.link: Any = client

    def compose(self) -> ComposeResult:
        yield BrowsersPane()


@pytest.mark.docker
@pytest.mark.slow
async def test_browsers_pane_shows_the_page_and_its_screenshot(browser_state: Path) -> None:
    async with gateway(browser_state):
        client = await connect(browser_state, "console")
        agent = await connect(browser_state, "agent", operator=False)
        try:
            await agent.request(
                "browser", {"action": "navigate", "url": "data:text/html,<title>Pilot [b]x</title>"}
            )
            app = _Host(client)
            async with app.run_test(size=(120, 50)) as pilot:
                pane = app.query_one(BrowsersPane)
                await wait_until(lambda: len(pane.rows) == 1)
                row = app.query_one("#browser-list").get_row_at(0)  # type: ignore[attr-defined]
                assert "running" in str(row[1]) and str(row[3]) == "Pilot [b]x"  # markup stays text
                await pilot.press("s")

                async def pictured() -> bool:
                    await pilot.pause()
                    return HALF in str(app.query_one("#browser-shot").render())

                await wait_until(pictured, timeout=20)
                await pilot.press("u")

                async def linked() -> bool:
                    await pilot.pause()
                    return "novnc/vnc.html" in str(app.query_one("#browser-detail").render())

                await wait_until(linked, timeout=20)
        finally:
            await agent.close()
            await client.close()


def test_pixels_render_two_rows_per_cell_and_refuse_garbage() -> None:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 20), (255, 0, 0)).save(buf, "PNG")
    text = render(buf.getvalue(), 20)
    lines = text.plain.split("\n")
    assert len(lines) == 5 and all(line == HALF * 20 for line in lines)
    assert "#ff0000" in str(text.spans[0].style)
    assert "unreadable image" in render(b"not a png", 20).plain
