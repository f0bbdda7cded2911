"""Issue 9 item 13: terminal escapes, bidi and line breaks in a command spoof what the operator approves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.display import visible, warnings
from tests.console.test_console import running_console, submit, until
from tests.helpers.gateway import FULL, cli, write_config

# (what the agent sends, what a terminal would have drawn for it, the warning the detail must carry)
SPOOFS = [
    ("touch {m} #\x1b[30Dls -la /tmp", "TERMINAL ESCAPE"),  # cursor left over the real command
    ("touch {m} #\x1b]0;pwned\x07 ls", "TERMINAL ESCAPE"),  # OSC: retitles the window
    ("touch {m} #\x1b[2K\rls -la /tmp", "TERMINAL ESCAPE"),  # erase line, carriage return
    ("ls -la /tmp #\u202e\u2066 && touch {m}", "BIDI"),  # right-to-left override reorders the rest
    ("ls\u200b -la; touch {m}", "INVISIBLE"),  # zero-width space
    ("ls -la /tmp\ntouch {m}", "2 LINES"),  # the second line is off the one-line row
    ("ls -la /tmp\rtouch {m}", "CONTROL"),  # CR: the row redraws over itself
]


def _screen_text(widget: Any) -> str:
    lines = []
    for y in range(widget.size.height):
        strip = widget.render_line(y)
        for segment in strip:
            # Nothing the agent typed may reach the terminal as a control character.
            assert not any(ch in segment.text for ch in "\x1b\x07\r\u202e\u2066\u200b"), repr(segment.text)
        lines.append(strip.text)
    return "\n".join(lines)


@pytest.mark.parametrize(("template", "alarm"), SPOOFS)
async def test_console_shows_what_runs(state_dir: Path, tmp_path: Path, template: str, alarm: str) -> None:
    marker = tmp_path / "pwned"
    command = template.format(m=marker)
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, command, workdir=str(tmp_path))
        await until(pilot, lambda: len(app.inbox) == 1)
        # The table sizes its columns over a few refreshes: wait for the row, not for a fixed time.
        shown = visible(command)[:8]
        await until(pilot, lambda: shown in _screen_text(app.query_one("#approval-list")))
        row = _screen_text(app.query_one("#approval-list"))
        detail = _screen_text(app.query_one("#approval-detail"))
        assert "⚠" in row  # flagged in the list, the escapes shown as text
        assert visible(command)[:8] in row
        assert "THIS COMMAND" in detail and alarm in detail.upper()
        assert "touch" in detail
        await pilot.press("d")
        result = await asyncio.wait_for(task, 10)
        assert result["details"]["status"] == "denied"
    assert not marker.exists()


def test_the_cli_shows_what_runs(state_dir: Path, tmp_path: Path) -> None:
    """`approvals pending`, `process list` and `events` print agent text with the escapes visible."""
    write_config(state_dir, FULL)
    hostile = "echo 'x\x1b]0;pwned\x07\x1b[30D\u202e' && sleep 30"
    try:
        started = cli(state_dir, "exec", "--background", "--", hostile)
        assert started.returncode == 0, started.stderr
        listed = cli(state_dir, "process", "list")
        assert listed.returncode == 0, listed.stderr
        for out in (started.stdout, listed.stdout):
            assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
        assert "\\x1b]0;pwned\\x07" in listed.stdout and "\\u202e" in listed.stdout
    finally:
        cli(state_dir, "gateway", "stop")


def test_every_hidden_character_class_is_made_visible() -> None:
    for ch in (
        "\x00",
        "\x08",
        "\x1b",
        "\x7f",
        "\x9b",
        "\u00ad",
        "\u061c",
        "\u200b",
        "\u200e",
        "\u2028",
        "\u202a",
        "\u2066",
        "\u2069",
        "\ufeff",
        "\U000e0001",
        "\xa0",
        "\u3000",
    ):
        shown = visible(f"a{ch}b")
        assert ch not in shown and shown.startswith("a\\") and shown.endswith("b"), repr(ch)
        assert warnings(f"a{ch}b"), repr(ch)
    assert visible("a\nb") == "a ⏎ b"
    assert visible("plain ascii, é and 中文") == "plain ascii, é and 中文"
    assert warnings("ls -la | wc -l") == []
