"""The console follows only the session it shows, counts the rest from session.activity, takes counts and
analysis from the gateway's approval events, and shows sandbox.progress."""

from __future__ import annotations

from pathlib import Path

from console.insight import insight_from_view
from engine.sandbox import default_manager
from tests.console.test_console import running_console, submit, until
from tests.helpers.gateway import FULL

# Both wait for the gate, so neither prints before the console has settled on the one it shows.
SLOW = "while [ ! -e {gate} ]; do sleep 0.02; done; for i in $(seq 1 {n}); do echo {tag}-$i; sleep 0.01; done"


async def test_console_follows_the_visible_session_only(state_dir: Path, tmp_path: Path) -> None:
    # The gate lives outside the state dir: a host command's view covers that with an empty tmpfs.
    async with running_console(state_dir, FULL) as (app, pilot, agent):
        pushed: list[str] = []
        assert app.link.client is not None
        app.link.client.add_listener(
            lambda ev: ev.event == "session.output" and pushed.append(ev.data["sessionId"])
        )
        ids = []
        for tag, n in (("A", 120), ("B", 60)):
            res = await agent.request(
                "exec",
                {
                    "command": SLOW.format(tag=tag, n=n, gate=tmp_path / "go"),
                    "background": True,
                    "agentId": "main",
                    "sessionKey": "agent:main",
                },
            )
            ids.append(res["details"]["sessionId"])
        a, b = ids
        await pilot.press("2")
        await until(pilot, lambda: a in app.sessions.sessions and b in app.sessions.sessions)
        app.sessions.select(a)
        assert app.link.follows
        await until(pilot, lambda: app.link.output.cursor(a) == 0)  # followed, and the replay is done
        (tmp_path / "go").touch()
        await until(pilot, lambda: "A-120" in app.sessions.line_pane.text_lines(), timeout=20)
        lines = app.sessions.line_pane.text_lines()
        assert [ln for ln in lines if ln.startswith("A-")] == [f"A-{i}" for i in range(1, 121)]
        assert not any(ln.startswith("B-") for ln in lines)
        assert a in pushed and b not in pushed  # the gateway never sent the hidden session's bytes
        # B was never pushed, yet its unread count is live (session.activity).
        printed = len("".join(f"B-{i}\n" for i in range(1, 61)))
        await until(pilot, lambda: app.sessions.unread().get(b, 0) == printed)
        app.sessions.select(b)
        await until(pilot, lambda: "B-60" in app.sessions.line_pane.text_lines(), timeout=20)
        lines = app.sessions.line_pane.text_lines()
        assert [ln for ln in lines if ln.startswith("B-")] == [f"B-{i}" for i in range(1, 61)]
        assert app.sessions.unread().get(b, 0) == 0


async def test_coalesced_count_arrives_without_polling(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, agent):
        app.tick = lambda: None  # type: ignore[method-assign]  # no timers help: only pushed events
        first = submit(agent, "id -G")
        await until(pilot, lambda: len(app.inbox) == 1)
        twin = submit(agent, "id -G")
        await until(pilot, lambda: app.inbox.rows()[0].count == 2)
        assert "Approvals (2)" in str(app.query_one("#tabs").get_tab("approvals").label)
        await pilot.press("d")
        results = [await first, await twin]
        assert [r["details"]["status"] for r in results] == ["denied", "denied"]


async def test_detail_uses_the_gateways_analysis(state_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[tools.exec\n")  # a local evaluation would fail on this and say so
    async with running_console(state_dir, config_path=str(broken)) as (app, pilot, agent):
        task = submit(agent, "uname -s; id -u")
        await until(pilot, lambda: len(app.inbox) == 1)
        key = app.inbox.rows()[0].key
        await until(pilot, lambda: key in app.approvals.insights)
        insight = app.approvals.insights[key]
        assert "insightError" not in insight
        assert [s["argv"] for s in insight["segments"]] == [["uname", "-s"], ["id", "-u"]]
        assert insight["allowAlwaysPatterns"] == app.inbox.rows()[0].view["allowAlwaysPatterns"]
        assert len(insight["allowAlwaysPatterns"]) == 2
        await pilot.press("d")
        await task


def test_insight_from_view_needs_segments_and_patterns() -> None:
    assert insight_from_view({"command": "ls"}) is None
    assert insight_from_view({"segments": [], "allowAlwaysPatterns": []}) is None
    seg = {"argv": ["ls"], "resolvedPath": "/usr/bin/ls", "satisfiedBy": None, "matchedPattern": None}
    got = insight_from_view({"segments": [seg], "allowAlwaysPatterns": [], "decision": {"trail": [1]}})
    assert got is not None and got["resolvedPath"] == "/usr/bin/ls" and got["trail"] == [1]
    assert got["allowAlwaysPatterns"] == []


async def test_sandbox_progress_shows_in_the_pane(state_dir: Path) -> None:
    async with running_console(state_dir) as (app, pilot, _agent):
        hook = default_manager().progress
        assert hook is not None
        hook("exechost-sbx-main-[bold]x", "creating container")
        detail = app.query_one("#sandbox-detail")
        await until(pilot, lambda: "creating container" in str(detail.render()))
        assert "exechost-sbx-main-[bold]x" in str(detail.render())  # shown literally, never as markup


async def test_detail_shows_the_content_digests(state_dir: Path, tmp_path: Path) -> None:
    """Issue 18 item 2: the approver sees the sha256 of every file the command runs or reads as code."""
    import hashlib

    from tests.attacks.test_terminal_escapes import _screen_text

    script = tmp_path / "s.sh"
    script.write_text("echo content\n")
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "sh s.sh", workdir=str(tmp_path))
        await until(pilot, lambda: len(app.inbox) == 1)
        detail = app.query_one("#approval-detail")
        await until(pilot, lambda: digest[:12] in _screen_text(detail))
        text = _screen_text(detail)
        assert "agent-writable" in text and "Content" in text, text
        await pilot.press("d")
        await task


async def test_policy_pane_warns_when_an_entry_names_an_agent_writable_file(
    state_dir: Path, tmp_path: Path
) -> None:
    from tests.attacks.harness import tool

    target = tool(tmp_path / "tool")
    async with running_console(state_dir) as (app, pilot, _agent):
        await pilot.press("4")
        await until(pilot, lambda: app.policy.agents)
        await pilot.press("n")
        await until(pilot, lambda: type(app.screen).__name__ == "TextDialog")
        await pilot.press(*str(target), "enter")
        await until(
            pilot, lambda: any("a file the agent can write" in str(n.message) for n in app._notifications)
        )
