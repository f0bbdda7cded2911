"""The console over a real gateway (in-process, temp state dir), driven with Textual's pilot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.dialogs import ConfirmDialog, GrantDialog, TextDialog
from console.screens.help import HelpScreen
from engine.approvals.socket.server import request_decision
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config

ALWAYS_OPS = ALLOWLIST + '\n[[agents.list]]\nid = "ops"\ntools.exec.ask = "always"\n'


@asynccontextmanager
async def running_console(
    state: Path, config: str = ALLOWLIST, **kwargs: Any
) -> AsyncIterator[tuple[ConsoleApp, Pilot[None], ControlClient]]:
    """A gateway, the console attached to it, and an agent connection (all real, one loop)."""
    write_config(state, config)
    async with gateway(state):
        app = ConsoleApp(state, autostart=False, bell=False, clock=False, **kwargs)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_until(app.link.connected.is_set)
            agent = await connect(state, "agent")
            try:
                yield app, pilot, agent
            finally:
                await agent.close()


def submit(agent: ControlClient, command: str, **params: Any) -> asyncio.Future[dict[str, Any]]:
    params = {"command": command, "agentId": "main", "sessionKey": "agent:main", **params}
    return asyncio.ensure_future(agent.request("exec", params))


async def until(pilot: Pilot[None], pred: Any, timeout: float = 10.0) -> Any:
    async def check() -> Any:
        await pilot.pause()
        return pred()

    return await wait_until(check, timeout=timeout)


async def test_approval_appears_and_allow_once_runs(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "echo approved-by-key; id -u")
        await until(pilot, lambda: len(app.inbox) == 1)
        assert "Approvals (1)" in str(app.query_one("#tabs").get_tab("approvals").label)
        assert "1 pending" in app.title
        item = app.inbox.rows()[0]
        # the detail view: misses marked, the patterns allow-always would save
        await until(pilot, lambda: app.approvals.insights.get(item.key, {}).get("segments"))
        insight = app.approvals.insights[item.key]
        assert [s["satisfiedBy"] for s in insight["segments"]] == [None, None]
        assert insight["allowAlwaysPatterns"]
        await pilot.press("a")
        result = await asyncio.wait_for(task, 10)
        assert "approved-by-key" in result["text"]
        await until(pilot, lambda: len(app.inbox) == 0)
        assert "Approvals (0)" in str(app.query_one("#tabs").get_tab("approvals").label)


async def test_deny_and_deny_with_reason(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "rm -rf /tmp/nothing-here")
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("d")
        result = await asyncio.wait_for(task, 10)
        assert result["details"]["status"] == "denied"

        task = submit(agent, "id -un")
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, TextDialog))
        await pilot.press(*"not today", "enter")
        result = await asyncio.wait_for(task, 10)
        assert result["details"]["status"] == "denied"
        assert "not today" in result["text"]


async def test_allow_always_confirms_patterns_then_persists(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "uname -s")
        await until(pilot, lambda: len(app.inbox) == 1)
        key = app.inbox.rows()[0].key
        await until(pilot, lambda: app.approvals.insights.get(key, {}).get("allowAlwaysPatterns"))
        await pilot.press("A")
        await until(pilot, lambda: isinstance(app.screen, GrantDialog))
        await pilot.press("y")
        result = await asyncio.wait_for(task, 10)
        assert result["details"]["status"] == "completed"
        patterns = [r.pattern for r in ApprovalsStore().agent("main").allowlist]
        assert any(p.endswith("/uname") for p in patterns)


async def test_allow_always_for_thirty_minutes_is_a_grant_listed_and_revocable_in_policy(
    state_dir: Path,
) -> None:
    from engine.approvals.grants import GrantStore

    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "uname -m")
        await until(pilot, lambda: len(app.inbox) == 1)
        key = app.inbox.rows()[0].key
        await until(pilot, lambda: app.approvals.insights.get(key, {}).get("allowAlwaysPatterns"))
        await pilot.press("A")
        await until(pilot, lambda: isinstance(app.screen, GrantDialog))
        await pilot.press("1")  # 30 min
        assert (await asyncio.wait_for(task, 10))["details"]["status"] == "completed"
        grants = GrantStore(state_dir / "exec-grants.json")
        [grant] = await until(pilot, lambda: grants.active("main"))
        assert grant.patterns[0].endswith("/uname") and grant.expires_at_ms is not None
        assert ApprovalsStore().agent("main").allowlist == []  # not forever
        again = await submit(agent, "uname -m")
        assert again["details"]["status"] == "completed"  # no ask while the grant lives
        await pilot.press("4")
        await until(pilot, lambda: app.policy.agent_grants())
        row = app.policy.query_one("#grants").get_row_at(0)  # type: ignore[attr-defined]
        assert str(row[0]) == grant.id and "left" in str(row[2])
        app.policy.query_one("#grants").focus()
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: not grants.active("main"))
        await until(pilot, lambda: not app.policy.agent_grants())


async def test_allow_always_cancelled_keeps_the_request(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "uname -r")
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("A")
        await until(pilot, lambda: isinstance(app.screen, GrantDialog))
        await pilot.press("n")
        await pilot.pause(0.2)
        assert len(app.inbox) == 1 and not task.done()
        await pilot.press("d")
        await asyncio.wait_for(task, 10)


async def test_ask_always_offers_no_allow_always(state_dir: Path) -> None:
    async with running_console(state_dir, ALWAYS_OPS) as (app, pilot, agent):
        task = submit(agent, "uname -s", agentId="ops", sessionKey="agent:ops")
        await until(pilot, lambda: len(app.inbox) == 1)
        assert app.inbox.rows()[0].allowed == ("allow-once", "deny")
        await pilot.press("A")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, GrantDialog) and len(app.inbox) == 1
        await pilot.press("a")
        assert (await asyncio.wait_for(task, 10))["details"]["status"] == "completed"


async def test_inbox_oldest_first_and_identical_coalesced(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        first = submit(agent, "id -g")
        await until(pilot, lambda: len(app.inbox) == 1)
        second = submit(agent, "id -G")
        twin = submit(agent, "id -G")
        await until(pilot, lambda: len(app.inbox) == 3)
        rows = app.inbox.rows()
        assert [r.view["command"] for r in rows] == ["id -g", "id -G"]
        assert rows[1].count == 2
        await pilot.press("a")  # the oldest is selected first
        assert (await asyncio.wait_for(first, 10))["details"]["status"] == "completed"
        await until(pilot, lambda: len(app.inbox) == 2)
        await pilot.press("d")  # one key resolves both identical requests
        results = await asyncio.wait_for(asyncio.gather(second, twin), 10)
        assert [r["details"]["status"] for r in results] == ["denied", "denied"]


async def test_socket_request_goes_to_the_same_inbox(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await until(pilot, lambda: app.socket_server is not None)
        path, token = ApprovalsStore().socket_info()
        ask = asyncio.ensure_future(request_decision(path, token, {"command": "make deploy", "cwd": "/srv"}))
        await until(pilot, lambda: len(app.inbox) == 1)
        # Handed to the gateway (issue 21): a gateway row here, listed and answerable from anywhere.
        assert app.inbox.rows()[0].source == "gateway"
        assert app.inbox.rows()[0].view["command"] == "make deploy"
        await pilot.press("a")
        assert await asyncio.wait_for(ask, 10) == "allow-once"

        # a socket client that gives up takes its row with it
        gone = asyncio.ensure_future(request_decision(path, token, {"command": "sleep 1"}, timeout=3.0))
        await until(pilot, lambda: len(app.inbox) == 1)
        assert await gone is None
        await until(pilot, lambda: len(app.inbox) == 0)


async def test_socket_ask_is_listed_by_the_cli_and_allow_always_saves_like_a_gateway_ask(
    state_dir: Path,
) -> None:
    from tests.helpers.gateway import cli

    async with running_console(state_dir) as (app, pilot, _agent):
        await until(pilot, lambda: app.socket_server is not None)
        path, token = ApprovalsStore().socket_info()
        body = {"command": "uname -a", "cwd": "/", "agentId": "main"}
        ask = asyncio.ensure_future(request_decision(path, token, body))
        await until(pilot, lambda: len(app.inbox) == 1)
        pending = await asyncio.to_thread(cli, state_dir, "approvals", "pending")
        assert pending.returncode == 0 and "uname -a" in pending.stdout, pending.stderr
        slug = pending.stdout.split()[0]
        done = await asyncio.to_thread(cli, state_dir, "approve", slug, "allow-always")
        assert done.returncode == 0, done.stderr
        assert await asyncio.wait_for(ask, 10) == "allow-always"
        # What allow-always saves for a gateway ask of the same command: uname's path.
        patterns = [r.pattern for r in ApprovalsStore().agent("main").allowlist]
        assert any(p.endswith("/uname") for p in patterns), patterns
        await until(pilot, lambda: len(app.inbox) == 0)


async def test_second_console_never_steals_the_socket(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await until(pilot, lambda: app.socket_server is not None)
        other = ConsoleApp(state_dir, autostart=False, bell=False, clock=False, connect=False)
        async with other.run_test(size=(100, 30)) as other_pilot:
            await other_pilot.pause(0.3)
            assert other.socket_server is None
        path, token = ApprovalsStore().socket_info()
        ask = asyncio.ensure_future(request_decision(path, token, {"command": "true"}))
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("d")
        assert await ask == "deny"


async def test_pending_approval_survives_closing_the_console(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_until(app.link.connected.is_set)
            task = submit(agent, "id -u")
            await until(pilot, lambda: len(app.inbox) == 1)
        # the console is gone; the gateway still holds the request for the next one
        pending = (await agent.request("approvals.pending"))["approvals"]
        assert [p["command"] for p in pending] == ["id -u"]
        again = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with again.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: len(again.inbox) == 1)
            await pilot.press("a")
            assert (await asyncio.wait_for(task, 10))["details"]["status"] in ("completed", "running")
        await agent.close()


async def test_palette_approve_and_exec_directive(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "id -n -u")
        await until(pilot, lambda: len(app.inbox) == 1)
        slug = app.inbox.rows()[0].key[:8]
        app.run_directive(f"/approve {slug} allow-once")
        assert (await asyncio.wait_for(task, 10))["details"]["status"] == "completed"
        app.run_directive("/exec ask=always")
        await until(pilot, lambda: "agent:main" in app.overrides)
        assert app.overrides["agent:main"].ask == "always"
        res = await agent.request(
            "policy.check", {"command": "ls", "agentId": "main", "sessionKey": "agent:main"}
        )
        assert res["ask"] == "always"


async def test_palette_opens_with_directive_hit(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"/exec host=gateway")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: "agent:main" in app.overrides)
        assert app.overrides["agent:main"].host == "gateway"


async def test_help_screen(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_background_session_streams_into_the_pane(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        store = ApprovalsStore()
        store.add_allowlist("main", "/usr/bin/seq")
        res = await agent.request(
            "exec",
            {"command": "seq 1 3000", "background": True, "agentId": "main", "sessionKey": "agent:main"},
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: sid in app.sessions.sessions)
        app.sessions.select(sid)
        await until(pilot, lambda: "3000" in app.sessions.line_pane.text_lines()[-3:], timeout=15)
        lines = app.sessions.line_pane.text_lines()
        assert lines[-3:] == ["2998", "2999", "3000"] or "3000" in lines[-3:]


async def test_session_input_kill_remove(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/cat")
        res = await agent.request(
            "exec", {"command": "cat", "background": True, "agentId": "main", "sessionKey": "agent:main"}
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: sid in app.sessions.sessions)
        app.sessions.select(sid)
        await pilot.press("i")
        await pilot.press(*"hello-cat", "enter")
        await until(pilot, lambda: any("hello-cat" in line for line in app.sessions.line_pane.text_lines()))
        app.sessions.query_one("#session-list").focus()
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: app.sessions.sessions.get(sid, {}).get("status") not in (None, "running"))
        await pilot.press("delete")
        await until(pilot, lambda: sid not in app.sessions.sessions)


async def test_send_keys_and_paste(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/cat")
        res = await agent.request(
            "exec",
            {
                "command": "cat",
                "background": True,
                "pty": True,
                "agentId": "main",
                "sessionKey": "agent:main",
            },
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: sid in app.sessions.sessions)
        app.sessions.select(sid)
        app.sessions.query_one("#session-list").focus()
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, TextDialog))
        await pilot.press(*"pasted-text", "enter")
        await pilot.press("u")
        await until(pilot, lambda: any("pasted-text" in line for line in app.sessions.term_pane.text_lines()))
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, TextDialog))
        await pilot.press(*"C-c", "enter")
        await until(pilot, lambda: app.sessions.sessions.get(sid, {}).get("status") not in (None, "running"))


async def test_pty_session_renders_as_terminal(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/printf")
        cmd = r"printf '\033[31mred\033[0m 10%%\r100%%\n\033[2;5Hmoved\n'"
        res = await agent.request(
            "exec",
            {"command": cmd, "pty": True, "background": True, "agentId": "main", "sessionKey": "agent:main"},
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: sid in app.sessions.sessions)
        app.sessions.select(sid)
        pane = app.sessions.term_pane
        await until(pilot, lambda: any("moved" in line for line in pane.text_lines()))
        lines = pane.text_lines()
        assert lines[0].startswith("100%")  # \r overwrote "red 10%"
        assert lines[1] == "    moved"
        # attaching needs a real terminal; headless says so instead of breaking
        await pilot.press("t")
        await pilot.pause(0.2)


async def test_events_pane_shows_system_events(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/echo")
        await agent.request(
            "exec", {"command": "echo bye", "background": True, "agentId": "main", "sessionKey": "agent:main"}
        )
        await pilot.press("3")
        pane = app.events_pane
        await until(pilot, lambda: any("Exec completed" in line for line in pane.text_lines()), timeout=15)


async def test_policy_pane_allowlist_editor_and_check(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("4")
        await until(pilot, lambda: app.policy.agents)
        main = app.policy.agents[0]
        assert main.agent_id == "main" and main.policy["security"] == "allowlist"
        assert any(step["key"].endswith("security") for step in main.trail)
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, TextDialog))
        await pilot.press(*"/usr/bin/git :: ^status$", "enter")
        await until(pilot, lambda: app.policy.agents and app.policy.agents[0].allowlist)
        entry = app.policy.agents[0].allowlist[0]
        assert (entry["pattern"], entry["argPattern"]) == ("/usr/bin/git", "^status$")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, TextDialog))
        await pilot.press(*"git status", "enter")
        check = app.policy.query_one("#policy-check")
        await until(pilot, lambda: "allow" in str(check.render()))
        app.policy.query_one("#allowlist").focus()
        await pilot.press("delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await until(pilot, lambda: not app.policy.agents[0].allowlist)
        assert ApprovalsStore().agent("main").allowlist == []


@pytest.mark.parametrize("key", ["1", "2", "3", "4"])
async def test_tabs_switch_by_number(state_dir: Path, key: str) -> None:
    names = {"1": "approvals", "2": "sessions", "3": "events", "4": "policy"}
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press(key)
        await pilot.pause()
        assert app.query_one("#tabs").active == names[key]


async def test_unread_counts_for_sessions_not_on_screen(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/seq")

        async def start(n: int) -> str:
            res = await agent.request(
                "exec",
                {"command": f"seq 1 {n}", "background": True, "agentId": "main", "sessionKey": "agent:main"},
            )
            return str(res["details"]["sessionId"])

        shown = await start(10)
        await pilot.press("2")
        await until(pilot, lambda: shown in app.sessions.sessions)
        app.sessions.select(shown)
        hidden = await start(20)  # prints while another session is on screen
        printed = len("".join(f"{i}\n" for i in range(1, 21)))
        await until(pilot, lambda: app.sessions.unread().get(hidden, 0) == printed)
        assert app.sessions.unread().get(shown, 0) == 0
        app.sessions.select(hidden)
        await until(pilot, lambda: app.sessions.unread().get(hidden, 0) == 0)


async def test_markup_in_agent_text_is_shown_literally(state_dir: Path) -> None:
    """Commands, cwds and agent ids are agent-controlled: Textual/Rich markup in them must stay text."""
    hostile = "echo '[@click=app.quit]boom[/] [link=https://evil.invalid]x[/link] [b]bold'"
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, hostile, workdir="/tmp")
        await until(pilot, lambda: len(app.inbox) == 1)
        item = app.inbox.rows()[0]
        await until(pilot, lambda: app.approvals.insights.get(item.key))
        table = app.query_one("#approval-list")

        def row_text() -> str:
            return "".join(table.render_line(y).text for y in range(1, 3))

        # The list cell, not only the detail view (polled: column widths follow the rows a repaint later).
        await until(pilot, lambda: "[@click=app.quit]boom" in row_text())
        assert app.is_running
        await pilot.press("d")
        await asyncio.wait_for(task, 10)


async def test_console_reconnects_after_the_gateway_restarts(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
    first = gateway(state_dir)
    await first.__aenter__()
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(app.link.connected.is_set)
        await first.__aexit__(None, None, None)
        await until(pilot, lambda: "unreachable" in str(app.sub_title))
        async with gateway(state_dir):
            await until(pilot, lambda: app.link.connected.is_set() and "gateway pid" in str(app.sub_title))
            agent = await connect(state_dir, "agent")
            task = submit(agent, "id -u")
            await until(pilot, lambda: len(app.inbox) == 1, timeout=15)
            await pilot.press("a")
            assert (await asyncio.wait_for(task, 10))["details"]["status"] == "completed"
            await agent.close()


async def test_log_paging_and_follow(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/seq")
        res = await agent.request(
            "exec",
            {"command": "seq 1 2000", "background": True, "agentId": "main", "sessionKey": "agent:main"},
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: app.sessions.sessions.get(sid, {}).get("status") == "completed")
        app.sessions.select(sid)
        pane = app.sessions.line_pane
        await until(pilot, lambda: pane.text_lines()[-1:] == ["2000"])
        app.sessions.query_one("#session-list").focus()
        await pilot.press("[")  # one page back from the tail: lines 1001-1500
        await until(pilot, lambda: pane.text_lines()[:1] == ["1001"])
        assert pane.text_lines()[499] == "1500"
        await pilot.press("[")
        await until(pilot, lambda: pane.text_lines()[:1] == ["501"])
        await pilot.press("]")
        await until(pilot, lambda: pane.text_lines()[:1] == ["1001"])
        await pilot.press("f")  # back to the live tail
        await until(pilot, lambda: pane.text_lines()[-1:] == ["2000"])


async def test_a_config_broken_while_running_is_loud(state_dir: Path) -> None:
    """Issue 10: `status`, the console header, the Policy pane and every exec result say it."""
    async with running_console(state_dir) as (app, pilot, agent):
        (state_dir / "config.toml").write_text(ALLOWLIST + "\n[tools.exec]\nhost = 'twice'\n")
        result = await agent.request("exec", {"command": "wc -l", "agentId": "main"})
        assert "still running on the last good config" in result["text"]
        assert "config.toml" in (await agent.request("status"))["configError"]
        await until(pilot, lambda: "⚠" in app.sub_title and "config.toml" in app.sub_title)
        check = str(app.query_one("#policy-check").render())
        assert "still running on the last good config" in check
        write_config(state_dir, ALLOWLIST)
        await agent.request("exec", {"command": "wc -l", "agentId": "main"})
        await until(pilot, lambda: "⚠" not in app.sub_title)
        assert (await agent.request("status"))["configError"] is None


async def test_a_request_whose_caller_went_away_is_marked(state_dir: Path) -> None:
    """Issue 10: Ctrl-C on the waiting CLI (its connection closes): the row and detail say so, and
    approving it runs the command detached with the result in the agent's events."""
    from tests.attacks.test_terminal_escapes import _screen_text

    async with running_console(state_dir) as (app, pilot, agent):
        quitter = await connect(state_dir, "quitter", operator=False)
        task = asyncio.ensure_future(
            quitter.request("exec", {"command": "echo ran-anyway", "agentId": "main", "sessionKey": "q"})
        )
        await until(pilot, lambda: len(app.inbox) == 1)
        await quitter.close()
        task.cancel()
        await until(pilot, lambda: app.inbox.rows()[0].view.get("requesterGone"))
        await pilot.pause(0.3)
        assert "gone" in _screen_text(app.query_one("#approval-list"))
        assert "stopped waiting" in _screen_text(app.query_one("#approval-detail"))
        await pilot.press("a")
        for _ in range(100):
            events = await agent.request("events", {"sessionKey": "agent:main:q"})  # main's key, owned
            if events["events"]:
                break
            await asyncio.sleep(0.05)
        assert "ran-anyway" in events["events"][0]["text"]


async def test_history_pane_shows_decisions_and_outcomes(state_dir: Path) -> None:
    """Issue 10: every approval with who decided, when, the command and its outcome (foreground too)."""
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "echo history-run; exit 3")
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("a")
        await asyncio.wait_for(task, 10)
        task = submit(agent, "rm -rf /tmp/nothing-here-either")
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.press("d")
        await asyncio.wait_for(task, 10)
        await pilot.press("6")
        pane = app.query_one("#history-pane")
        await until(pilot, lambda: len(pane.rows) == 2)
        newest, oldest = pane.rows
        assert newest["status"] == "deny" and oldest["status"] == "allow-once"
        assert oldest["run"]["status"] == "completed" and oldest["run"]["exitCode"] == 3
        from console.widgets.history import outcome

        assert outcome(oldest) == "completed (3)"


async def test_sandboxes_pane_says_how_to_turn_them_on(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("5")
        await until(
            pilot,
            lambda: (
                'mode = "all"' in str(app.query_one("#sandbox-detail").render())
                or "unavailable" in str(app.query_one("#sandbox-detail").render())
            ),
        )
        assert 'mode = "all"' in str(app.query_one("#sandbox-detail").render())


async def test_tab_8_from_approvals_shows_browsers_with_their_keys_in_the_footer(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("1")
        await pilot.pause()
        await pilot.press("8")
        await until(pilot, lambda: app.query_one("#tabs").active == "browsers")
        assert app.focused is app.query_one("#browser-list")
        footer_keys = {b.binding.key for b in app.active_bindings.values()}
        assert {"r", "s", "u", "x"} <= footer_keys  # the pane's keys are live (and shown in the footer)
        await pilot.press("u")  # no browser yet: it says so instead of nothing
        detail = app.query_one("#browser-detail")
        await until(pilot, lambda: "No browser selected" in str(detail.render()))
