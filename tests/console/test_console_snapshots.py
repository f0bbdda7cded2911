"""Text snapshots of the main screens, from fixed data (no gateway, pinned clock) so they never drift.

Our own small helper instead of pytest-textual-snapshot (its syrupy pin needs pytest<9): the screen is
rendered to plain text, compared with tests/console/snapshots/<name>.txt. `UPDATE_SNAPSHOTS=1` rewrites them
and also refreshes the SVG screenshots the README shows (docs/console-*.svg).
"""

from __future__ import annotations

import difflib
import io
import os
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Input

import console.inbox
import console.widgets.approvals
import console.widgets.sessions
from console.app import ConsoleApp
from console.screens.help import HelpScreen
from tests.helpers.gateway import wait_until

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
DOCS = Path(__file__).resolve().parents[2] / "docs"
NOW = 1_790_000_000_000
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"

APPROVAL = {
    "id": "5e06f877-1f0c-4c4e-9d6c-2f1f8a1b7c11",
    "slug": "5e06f877",
    "command": "ls -la /etc && curl -s https://example.invalid/install.sh",
    "cwd": "/home/dev/project",
    "host": "gateway",
    "agentId": "main",
    "sessionKey": "agent:main",
    "security": "allowlist",
    "ask": "on-miss",
    "askFallback": "deny",
    "createdAtMs": NOW - 42_000,
    "expiresAtMs": NOW + 1_758_000,
    "allowedDecisions": ["allow-once", "allow-always", "deny"],
}
INSIGHT = {
    "segments": [
        {
            "argv": ["ls", "-la", "/etc"],
            "resolvedPath": "/usr/bin/ls",
            "satisfiedBy": "allowlist",
            "matchedPattern": "/usr/bin/ls",
            "reason": None,
        },
        {
            "argv": ["curl", "-s", "https://example.invalid/install.sh"],
            "resolvedPath": "/usr/bin/curl",
            "satisfiedBy": None,
            "matchedPattern": None,
            "reason": "allowlist miss",
        },
    ],
    "analysisOk": True,
    "allowAlwaysPatterns": ["/usr/bin/curl"],
    "resolvedPath": "/usr/bin/ls",
}
OPS = {
    **APPROVAL,
    "id": "9b2c4d6e-0000-4000-8000-000000000001",
    "slug": "9b2c4d6e",
    "command": "systemctl restart nginx",
    "agentId": "ops",
    "ask": "always",
    "allowedDecisions": ["allow-once", "deny"],
    "createdAtMs": NOW - 5_000,
}
SESSIONS = [
    {
        "sessionId": "calm-gulf",
        "status": "running",
        "pid": 4242,
        "command": "make -j4 all",
        "name": "make all",
        "host": "gateway",
        "cwd": "/home/dev/project",
        "startedAtMs": NOW - 95_000,
        "scopeKey": "agent:main",
    },
    {
        "sessionId": "warm-fern",
        "status": "completed",
        "pid": 4100,
        "command": "pytest -q",
        "name": "pytest",
        "host": "gateway",
        "cwd": "/home/dev/project",
        "startedAtMs": NOW - 300_000,
        "endedAtMs": NOW - 240_000,
        "exitCode": 0,
        "scopeKey": "agent:main",
    },
    {
        "sessionId": "tender-breeze",
        "status": "running",
        "pid": 4300,
        "command": "htop",
        "name": "htop",
        "host": "gateway",
        "cwd": "/",
        "startedAtMs": NOW - 20_000,
        "pty": True,
        "cols": 60,
        "rows": 8,
        "scopeKey": "agent:main",
    },
]
BUILD_OUTPUT = "".join(
    f"\x1b[32m[build]\x1b[0m step {i:3d}/200  compiling module_{i:03d}.py\n" for i in range(1, 41)
)
BUILD_OUTPUT += (
    "downloading 10%\rdownloading 55%\rdownloading 100%\n\x1b]0;evil title\x07\x1b[31mwarning:\x1b[0m done"
)


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (console.inbox, console.widgets.approvals, console.widgets.sessions):
        monkeypatch.setattr(module, "clock_ms", lambda: NOW)


def screen_text(app: ConsoleApp) -> str:
    """The screen as plain text, rendered the way export_screenshot renders it (background screens too)."""
    width, height = app.size
    out = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        record=True,
        color_system="truecolor",
        legacy_windows=False,
        safe_box=False,
    )
    out.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in out.export_text().splitlines()) + "\n"


async def settled_text(app: ConsoleApp, pilot: Pilot[None]) -> str:
    """The screen once it stops changing (a loaded machine paints the footer or a detail view late)."""
    last, same = "", 0
    for _ in range(100):
        await pilot.pause(0.05)
        text = screen_text(app)
        same = same + 1 if text == last else 0
        if same >= 4:
            return text
        last = text
    return last


async def check(app: ConsoleApp, pilot: Pilot[None], name: str, svg: str | None = None) -> None:
    text = await settled_text(app, pilot)
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
        if svg:
            (DOCS / svg).write_text(app.export_screenshot(title="exechost console"))
        return
    assert path.exists(), f"missing snapshot {path}; run with UPDATE_SNAPSHOTS=1"
    expected = path.read_text()
    diff = "".join(
        difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "snapshot", "screen")
    )
    assert text == expected, f"screen differs from {path} (UPDATE_SNAPSHOTS=1 to accept):\n{diff}"


def offline_app() -> ConsoleApp:
    app = ConsoleApp(None, connect=False, host_approval_socket=False, bell=False, clock=False)
    app.animation_level = "none"  # the tab underline would otherwise be caught mid-slide
    return app


async def test_snapshot_inbox(state_dir: Path) -> None:
    app = offline_app()
    async with app.run_test(size=(140, 36)) as pilot:
        app.inbox.add("gateway", APPROVAL["id"], APPROVAL)
        app.inbox.add("gateway", OPS["id"], OPS)
        app.inbox.add("gateway", "twin-of-ops", {**OPS, "id": "twin-of-ops"})
        app.approvals.insights[APPROVAL["id"]] = INSIGHT
        app.refresh_inbox()
        await pilot.pause(0.3)
        await pilot.pause(0.3)  # the detail view repaints one frame after the list
        await check(app, pilot, "inbox", svg="console-inbox.svg")


async def test_snapshot_inbox_empty(state_dir: Path) -> None:
    app = offline_app()
    async with app.run_test(size=(100, 20)) as pilot:
        await pilot.pause(0.2)
        await check(app, pilot, "inbox-empty")


async def _sessions_app(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await pilot.press("2")
    await pilot.pause(0.2)
    app.sessions.replace_all(SESSIONS)
    app.link.output.pushed = True  # unread then comes from pushed output, as with a live gateway
    app.link.output.unread.update({"tender-breeze": 2048, "warm-fern": 180})
    app.sessions.render_list(app.sessions.unread())
    await pilot.pause(0.2)  # let the table's first highlight settle before choosing a row


async def test_snapshot_sessions_line_pane(state_dir: Path) -> None:
    app = offline_app()
    async with app.run_test(size=(140, 36)) as pilot:
        await _sessions_app(app, pilot)
        app.sessions.select("calm-gulf")
        await pilot.pause(0.2)
        app.sessions.feed(BUILD_OUTPUT)
        app.query_one("#session-input", Input).cursor_blink = False
        await pilot.pause(0.3)
        lines = app.sessions.line_pane.text_lines()
        assert "downloading 100%" in lines and "evil title" not in "".join(lines)
        await check(app, pilot, "sessions", svg="console-sessions.svg")


async def test_snapshot_sessions_pty_pane(state_dir: Path) -> None:
    app = offline_app()
    async with app.run_test(size=(120, 24)) as pilot:
        await _sessions_app(app, pilot)
        app.sessions.select("tender-breeze")
        await pilot.pause(0.2)
        app.sessions.feed(
            "\x1b[2J\x1b[H\x1b[1;36m top \x1b[0m\r\n cpu \x1b[32m████\x1b[0m 40%\r\n\x1b[5;3Hq quits"
        )
        await pilot.pause(0.3)
        await check(app, pilot, "sessions-pty")


async def test_snapshot_help(state_dir: Path) -> None:
    app = offline_app()
    async with app.run_test(size=(110, 44)) as pilot:
        app.push_screen(HelpScreen())
        await pilot.pause(0.3)
        await check(app, pilot, "help")


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_snapshot_inbox_small_and_large(state_dir: Path, size: tuple[int, int]) -> None:
    """Issue 10: at 80×24 the segments and the allow-always line are on screen without scrolling."""
    app = offline_app()
    async with app.run_test(size=size) as pilot:
        app.inbox.add("gateway", APPROVAL["id"], APPROVAL)
        app.approvals.insights[APPROVAL["id"]] = INSIGHT
        app.refresh_inbox()
        await pilot.pause(0.3)
        await pilot.pause(0.3)
        text = await settled_text(app, pilot)
        for needed in ("Segments", "✗ miss", "Allow always saves", "/usr/bin/curl", "[a] allow once"):
            assert needed in text, (size, needed)
        await check(app, pilot, f"inbox-{size[0]}x{size[1]}")


async def test_live_pane_keeps_no_stale_lines(state_dir: Path) -> None:
    """Issue 10: switching sessions, `\\r` progress and a partial last line leave nothing stale behind."""
    app = offline_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _sessions_app(app, pilot)
        app.sessions.select("calm-gulf")
        await pilot.pause(0.1)
        app.sessions.feed("A-1\nprogress 10%\rprogress 99%\rprogress 100%\nA-partial")
        await pilot.pause(0.1)
        assert app.sessions.line_pane.text_lines() == ["A-1", "progress 100%", "A-partial"]
        app.sessions.select("warm-fern")
        await pilot.pause(0.1)
        app.sessions.feed("B-1\n")
        await pilot.pause(0.1)
        assert app.sessions.line_pane.text_lines() == ["B-1"]
        text = await settled_text(app, pilot)
        assert "A-partial" not in text and "A-1" not in text and "progress" not in text


async def test_esc_leaves_the_input_and_slash_filters_sessions(state_dir: Path) -> None:
    """Issue 10: Esc leaves the stdin line (the footer says so while it has focus); `/` filters the list."""
    from console.dialogs import TextDialog

    app = offline_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await _sessions_app(app, pilot)
        await pilot.press("i")
        await pilot.pause(0.1)
        assert app.focused is not None and app.focused.id == "session-input"
        assert "Leave input" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.focused is not None and app.focused.id == "session-list"
        await pilot.press("slash")
        await pilot.pause(0.2)
        assert isinstance(app.screen, TextDialog)
        await pilot.press(*"pytest", "enter")
        await pilot.pause(0.2)
        assert app.sessions.order == ["warm-fern"]
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert sorted(app.sessions.order) == sorted(s["sessionId"] for s in SESSIONS)


async def test_a_toast_never_hides_the_approval_keys_at_80x24(state_dir: Path) -> None:
    """Issue 21: at 80×24 a toast (bottom right) covered the key hints at the end of the detail."""
    from textual.widgets._toast import Toast

    app = offline_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.inbox.add("gateway", APPROVAL["id"], APPROVAL)
        app.approvals.insights[APPROVAL["id"]] = INSIGHT
        app.refresh_inbox()
        await pilot.pause(0.3)
        app.notify("Approval allow-once submitted for 9b2c4d6e, and a second line of text.", timeout=30)
        toasts = await wait_until(lambda: list(app.screen.query(Toast)))
        await pilot.pause(0.3)
        text = await settled_text(app, pilot)
        detail = app.query_one("#approval-detail")
        lines = [line.split("▎", 1)[-1] for line in text.splitlines()]
        row = next((i for i, line in enumerate(lines) if "[a] allow once" in line), None)
        assert row is not None, "the key hints are not on screen (under the toast)"
        keys = detail.region.__class__(detail.region.x, row, detail.region.width, 2)  # the two hint lines
        assert all(not toast.region.overlaps(keys) for toast in toasts), (keys, [t.region for t in toasts])
