"""Pure console pieces: output sanitising (hostile escapes), the line model, the inbox model, the router."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from console.ansi import LineAssembler, plain, pyte_color, sanitize, to_text
from console.gateway import PENDING_CAP, OutputRouter
from console.inbox import Inbox


def test_sanitize_drops_everything_but_sgr() -> None:
    hostile = (
        "a\x1b]0;pwned title\x07b\x1b]52;c;ZXZpbA==\x1b\\c\x1b[2J\x1b[?1049h\x1b[6n\x1bPqdcs\x1b\\d"
        "\x1b[31mred\x1b[0m\x00\x08\x7fe"
    )
    out = sanitize(hostile)
    assert plain(out) == "abcdrede"
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x1bP" not in out
    assert "\x1b[31m" in out  # colour survives, to be rendered by Rich, never passed to the terminal


def test_to_text_never_emits_raw_escapes() -> None:
    text = to_text(sanitize("\x1b[1;32mok\x1b[0m\tdone"))
    assert text.plain == "ok      done"
    assert "\x1b" not in text.plain


def test_line_assembler_carriage_return_and_split_sequences() -> None:
    lines = LineAssembler()
    assert lines.feed("10%\r55%\r100%\nnext\x1b[3") == ["100%"]
    assert lines.partial == "next"
    assert lines.feed("2mgreen\x1b[0m\r\n") == ["next\x1b[32mgreen\x1b[0m"]
    assert lines.feed("a\r") == [] and lines.feed("\n") == ["a"]  # CRLF is not an overwrite


def test_line_assembler_bounds_an_endless_line() -> None:
    lines = LineAssembler()
    out = lines.feed("x" * 70_000)
    assert len(out) == 1 and lines.partial == ""


def test_pyte_colours() -> None:
    assert pyte_color("default") is None
    assert pyte_color("brown") == "yellow"
    assert pyte_color("brightred") == "bright_red"
    assert pyte_color("ff8700") == "#ff8700"


async def test_inbox_coalesces_orders_and_discards() -> None:
    inbox = Inbox()
    view = {"command": "id", "cwd": "/", "agentId": "main", "createdAtMs": 20}
    first, new = inbox.add("gateway", "a1", view)
    assert new
    _, new = inbox.add("gateway", "a2", {**view, "createdAtMs": 25})
    assert not new and first.count == 2 and len(inbox) == 2
    inbox.add("gateway", "b1", {**view, "command": "whoami", "createdAtMs": 10})
    assert [r.view["command"] for r in inbox.rows()] == ["whoami", "id"]
    inbox.discard("a1")
    assert first.count == 1 and inbox.find("a2") is first
    inbox.discard("a2")
    assert inbox.find("a2") is None and len(inbox) == 1


async def test_inbox_socket_futures_and_resync() -> None:
    inbox = Inbox()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str] = loop.create_future()
    inbox.add("socket", "s1", {"command": "make"}, fut)
    inbox.add("gateway", "g1", {"command": "ls"})
    inbox.replace_gateway([{"id": "g2", "command": "date"}])
    assert sorted(i.key for i in inbox.rows()) == ["g2", "s1"]
    assert inbox.get("s1") is not None and inbox.get("s1").futures == [fut]  # type: ignore[union-attr]


def test_inbox_allowed_decisions() -> None:
    inbox = Inbox()
    item, _ = inbox.add("socket", "x", {"command": "a", "ask": "always"})
    assert item.allowed == ("allow-once", "deny")
    item, _ = inbox.add("gateway", "y", {"command": "b", "allowedDecisions": ["deny", "allow-once"]})
    assert item.allowed == ("allow-once", "deny")


def test_router_counts_hidden_and_caps_visible() -> None:
    router = OutputRouter()
    router.show("v")
    router.feed("hidden", "abc")
    assert router.unread["hidden"] == 3 and not router.pending
    for _ in range(40):
        router.feed("v", "y" * 65_536)
    assert router.pending_chars <= PENDING_CAP
    _data, overflowed = router.drain()
    assert overflowed and not router.pending  # too fast to show: the pane re-reads the log tail
    router.show("hidden")
    assert "hidden" not in router.unread


def test_router_skips_what_a_replay_already_showed() -> None:
    router = OutputRouter()
    router.show("v")
    router.feed("v", "old\n", 0, 4)  # inside the replay
    router.feed("v", "ab\ncd\n", 4, 10)  # straddles the replay's end at 7
    router.feed("v", "new\n", 10, 14)
    router.replayed("v", 7)
    data, overflowed = router.drain()
    assert (data, overflowed) == ("cd\nnew\n", False)
    # A frame with no byte range (a peer older than nextOffset) cannot be cut: the pane re-reads.
    router.feed("v", "ab\ncd\n", 4)
    assert router.drain() == ("", True)
    # The pane's read from an offset the cursor has left (a replay moved it) changes nothing.
    assert not router.advance("v", 3, 20) and router.cursor("v") == 7
    assert router.advance("v", 7, 20) and router.cursor("v") == 20


def test_router_gap_forces_a_reread_of_the_visible_session_only() -> None:
    router = OutputRouter()
    router.show("v")
    router.gap("other")
    assert not router.overflowed
    router.gap("v")
    assert router.drain() == ("", True)


def test_allow_always_preview_lists_recent_commands_it_would_also_allow() -> None:
    from console.insight import commands_also_allowed

    recent = ["ls -la /etc", "id", "ls /tmp && id", "ls $(whoami)", "ls -la /etc"]
    assert commands_also_allowed(["/usr/bin/ls"], recent, "main", "/") == ["ls -la /etc"]


def test_the_demo_is_throw_away(state_dir: Path) -> None:
    """Issues 10 and 36: a fresh root per run, never the state dir in use (OPENCLAW_STATE_DIR is not
    reused: the demo would write its config over a real one), the workspace apart from the state dir;
    its gateway and every file stopped and removed on quit."""
    import subprocess
    import sys

    from console.demo_tour import finish_demo, prepare_demo
    from engine.protocol.frames import socket_path
    from tests.helpers.gateway import REPO

    first, second = prepare_demo(), prepare_demo()
    assert first.root != second.root and first.root.name.startswith("ehdemo-")
    assert state_dir not in (first.state, second.state) and not first.work.is_relative_to(first.state)
    assert (first.work / ".git").is_dir() and os.environ["OPENCLAW_STATE_DIR"] == str(second.state)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(first.state), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "runner", "gateway", "start"], env=env, cwd=REPO, check=True)
    assert socket_path(first.state).exists()
    finish_demo(first)
    finish_demo(second)
    assert not first.root.exists() and not second.root.exists()


def test_heredoc_bodies_show_as_data_blocks_not_code() -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.syntax import Syntax

    from console.widgets.approvals import render_command

    raw = "git commit -F - <<'EOF'\nfix: rm -rf / is not run\n\x1b[2Jbody\nEOF\nls -la"
    shown = render_command(raw)
    parts = list(shown.renderables)  # type: ignore[attr-defined]
    assert [type(p) for p in parts] == [Syntax, Panel, Syntax]
    assert "rm -rf" not in parts[0].code and "ls -la" in parts[2].code
    console = Console(width=80, record=True, color_system=None)
    console.print(shown)
    text = console.export_text()
    assert "stdin data until EOF (literal, not run)" in text
    assert "fix: rm -rf / is not run" in text and "\\x1b[2Jbody" in text and "\x1b" not in text
    # Not a heredoc we can read (an expansion in the body): the whole text is shown as code.
    assert isinstance(render_command("cat <<EOF\n$(id)\nEOF"), Syntax)


def test_approval_detail_names_every_requester_of_a_coalesced_ask() -> None:
    from rich.console import Console

    from console.inbox import InboxItem
    from console.widgets.approvals import render_detail

    view = {
        "id": "a" * 36,
        "slug": "aaaaaaaa",
        "command": "ls",
        "count": 2,
        "allowedDecisions": ["allow-once", "deny"],
        "requesters": [
            {"sessionKey": "agent:main:one", "host": "gateway"},
            {"sessionKey": "agent:main:two", "host": "node", "nodeId": "pi"},
        ],
    }
    console = Console(width=120, record=True, color_system=None)
    console.print(render_detail(InboxItem(key="k", source="gateway", view=view, ids=["k"]), {}))
    text = console.export_text()
    assert "×2" in text and "Asked by" in text
    assert "agent:main:one (gateway), agent:main:two (node pi)" in text


def test_approval_detail_shows_what_the_tree_would_run() -> None:
    """Issue 18 part 3: the ask names the file and key that git would run; agent-chosen names stay escaped."""
    from rich.console import Console

    from console.inbox import InboxItem
    from console.widgets.approvals import render_detail

    warning = "Warning: /r/.git/config defines filter.x\x1b[2J.process (not inert): git would run it"
    item = InboxItem("k", "gateway", {"command": "git status", "warnings": [warning]})
    console = Console(width=200, record=True, color_system=None)
    console.print(render_detail(item, {}))
    out = console.export_text()
    assert "defines filter.x\\x1b[2J.process" in out and "git would run it" in out
    assert "\x1b[2J" not in out


def test_an_egress_ask_says_which_name_a_sandbox_waits_for() -> None:
    """Issue 29: an egress ask is a name and port a sandbox connection waits on, not an executable."""
    from rich.console import Console

    from console.inbox import InboxItem
    from console.widgets.approvals import render_detail

    view = {
        "command": "connect pypi.org:443",
        "host": "sandbox",
        "sessionKey": "openclaw-sbx-1234-agent-main",
        "egress": "pypi.org:443",
    }
    console = Console(width=200, record=True, color_system=None)
    console.print(render_detail(InboxItem("k", "gateway", view), {}))
    out = console.export_text()
    assert "egress to pypi.org:443 (a sandbox connection waits" in out
    assert "Executable" not in out and "(not resolved)" not in out
