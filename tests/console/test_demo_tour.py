"""The demo as a new user meets it: the real demo agent against a real gateway, the console driven with
Textual's pilot through every stop of the tour, asserting what the screen shows."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.demo import DemoConsoleApp, DemoHelpScreen, hint_for
from console.demo_tour import (
    GRANT_COMMAND,
    OTHER_MIRROR,
    STALE_SCRIPT,
    egress_available,
    prepare_demo,
    sandbox_backend,
)
from console.dialogs import GrantDialog, TextDialog
from tests.helpers.gateway import connect, gateway, wait_until


def screen_text(app: DemoConsoleApp) -> str:
    """The screen as plain text, as export_screenshot renders it (the screens beneath a dialog too)."""
    width, height = app.size
    out = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True)
    out.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return out.export_text()


async def shows(pilot: Pilot[None], app: DemoConsoleApp, *needles: str, timeout: float = 20.0) -> str:
    """Wait until every needle is on screen (the agent and the gateway work at their own pace)."""

    async def check() -> str | None:
        await pilot.pause()
        text = screen_text(app)
        return text if all(n in text for n in needles) else None

    try:
        return str(await wait_until(check, timeout=timeout))
    except AssertionError:
        raise AssertionError(f"never showed {needles}; last screen:\n{screen_text(app)}") from None


async def until(pilot: Pilot[None], pred: Any, timeout: float = 20.0) -> Any:
    async def check() -> Any:
        await pilot.pause()
        return pred()

    return await wait_until(check, timeout=timeout)


async def select_ask(pilot: Pilot[None], app: DemoConsoleApp, marker: str) -> None:
    """Put the inbox cursor on the ask whose command holds `marker` (as ↑/↓ would)."""
    await until(pilot, lambda: any(marker in str(i.view.get("command")) for i in app.approvals.rows))
    index = next(i for i, r in enumerate(app.approvals.rows) if marker in str(r.view.get("command")))
    app.approvals.query_one("#approval-list", DataTable).move_cursor(row=index)
    await pilot.pause()


def uses_left(text: str) -> int | None:
    found = re.search(r"(\d+) uses? left", text)
    return int(found.group(1)) if found else None


async def test_the_demo_tour(state_dir: Path) -> None:
    demo = prepare_demo(state_dir.parent / "d")
    assert demo.work != demo.state and not demo.work.is_relative_to(demo.state)
    async with gateway(demo.state):
        app = DemoConsoleApp(demo, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, app.link.connected.is_set)
            await until(pilot, lambda: len(app.inbox) >= 5)

            # An allowlist miss and a safe bin in one pipeline: the why is per segment.
            await select_ask(pilot, app, "| head")
            await shows(pilot, app, "✗ miss", "ps -eo pid,comm", "safeBins", "head is a safe bin")
            # A heredoc: its body shown apart as data; fed to an interpreter it is code.
            await select_ask(pilot, app, "<<'EOF'")
            await shows(pilot, app, "stdin data until EOF", "not provably plain", "heredoc to an interpreter")
            # git: ran at once while the repository's config was inert; now it names core.pager.
            await select_ask(pilot, app, "git diff")
            await shows(pilot, app, "core.pager", "not a key known to be inert")
            assert not any("git status" in str(i.view.get("command")) for i in app.approvals.rows)
            # Rewritten after the ask: the changed digest shows; allowing it is refused as stale.
            await select_ask(pilot, app, STALE_SCRIPT)
            await shows(pilot, app, "CHANGED since the ask", "refused as approval-stale")
            assert "rewrites this script" in screen_text(app)  # the hint for what is selected
            await pilot.press("a")
            await pilot.press("6")
            await shows(pilot, app, "approval-stale", "changed since it was approved", "approved,", "now)")

            # A grant for 5 uses, used up while the user watches the Policy tab.
            await pilot.press("1")
            await select_ask(pilot, app, GRANT_COMMAND)
            await shows(pilot, app, "press A, then 5")
            await pilot.press("A")
            await until(pilot, lambda: isinstance(app.screen, GrantDialog))
            await pilot.press("5")
            await pilot.press("4")
            first = uses_left(await shows(pilot, app, "uses left", GRANT_COMMAND))
            assert first is not None and first <= 5
            lower = await until(pilot, lambda: (uses_left(screen_text(app)) or 99) < first, timeout=30)
            assert lower
            await shows(pilot, app, "the grants table counts uses down")

            # `?` shows the hint again, on top of every key.
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, DemoHelpScreen))
            await shows(pilot, app, "Try next:", "the grants table counts uses down", "allow always")
            await pilot.press("escape")

            # Live sessions: the build's output scrolls; the dashboard is a PTY the user can stop.
            await pilot.press("2")
            build = await until(pilot, lambda: _session(app, "build-job"))
            app.sessions.select(build)
            app.sessions.query_one("#session-list").focus()
            await shows(pilot, app, "build-job 400", "[build] step")
            await pilot.press("f")  # follow live (a select on a loaded machine can land paged to the top)
            steps = _last_step(screen_text(app))
            try:  # the output scrolls: later steps come into view
                await until(pilot, lambda: _last_step(screen_text(app)) > steps, timeout=60)
            except AssertionError:
                raise AssertionError(
                    f"the build did not scroll from step {steps}:\n{screen_text(app)}"
                ) from None
            dashboard = await until(pilot, lambda: _session(app, "dashboard"))
            app.sessions.select(dashboard)
            app.sessions.query_one("#session-list").focus()
            await shows(pilot, app, "exechost demo dashboard", "take it over")
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, TextDialog))
            await pilot.press(*"C-c", "enter")
            await until(pilot, lambda: app.sessions.sessions[dashboard].get("status") != "running")
            await shows(pilot, app, "interrupted (Ctrl-C)")

            if sandbox_backend() == "bwrap":
                # A sandboxed command, then pip through the egress proxy: the allowed mirror name downloads,
                # another name waits for an ask; allowed once, it downloads too.
                await pilot.press("3")
                await shows(pilot, app, "bubblewrap sandbox", timeout=30)
                if egress_available():
                    await pilot.press("1")
                    await select_ask(pilot, app, f"{OTHER_MIRROR}:")
                    await shows(pilot, app, OTHER_MIRROR, "An egress ask")
                    await pilot.press("a")
                    await pilot.press("2")
                    pips = await until(
                        pilot,
                        lambda: (
                            _sessions(app, "pip download")
                            if len(_sessions(app, "pip download")) == 2
                            else None
                        ),
                    )
                    for sid in pips:
                        await until(
                            pilot,
                            lambda sid=sid: app.sessions.sessions[sid].get("status") != "running",
                            timeout=60,
                        )
                        app.sessions.select(sid)
                        await shows(pilot, app, "Successfully downloaded demo-hello", timeout=30)
            else:  # no backend: the tour leaves the step out rather than failing
                assert "bwrap" not in demo.config.read_text()

            operator = await connect(demo.state)
            await operator.request("sandbox.recreate", {"all": True})  # as quitting the demo does
            await operator.request("shutdown", {"killSessions": True})
            await operator.close()


def _session(app: DemoConsoleApp, name: str) -> str | None:
    return next((sid for sid, row in app.sessions.sessions.items() if name in str(row.get("name"))), None)


def _sessions(app: DemoConsoleApp, text: str) -> list[str]:
    return [sid for sid, row in app.sessions.sessions.items() if text in str(row.get("command"))]


def _last_step(text: str) -> int:
    steps = [int(n) for n in re.findall(r"step +(\d+)/", text)]
    return max(steps, default=0)


def test_the_hint_follows_what_is_on_screen() -> None:
    assert "press A, then 5" in hint_for("approvals", GRANT_COMMAND)
    assert "safe bin" in hint_for("approvals", "ps -eo pid,comm | head -n 5")
    assert "take it over" in hint_for("sessions", None)
    assert "? shows" in hint_for("approvals", None)
    assert all(len(hint_for(tab, None).splitlines()) == 2 for tab in ("approvals", "sessions", "policy"))
