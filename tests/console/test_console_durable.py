"""Issue 20 in the console: after the gateway is SIGKILLed and restarted, the console reconnects and shows
the kept ask in its inbox and the adopted PTY session, with what it printed while no gateway ran."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from console.app import ConsoleApp
from engine.principals import mint
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import FULL, connect, wait_until, write_config

CONFIG = FULL + (
    '\n[[agents.list]]\nid = "asker"\n[agents.list.tools.exec]\nsecurity = "allowlist"\nask = "always"\n'
)


async def until(pilot: Pilot[None], pred: object, timeout: float = 20.0) -> object:
    async def check() -> object:
        await pilot.pause()
        return pred()  # type: ignore[operator]

    return await wait_until(check, timeout=timeout)


async def test_console_shows_the_kept_ask_and_adopted_pty_session(state_dir: Path, tmp_path: Path) -> None:
    write_config(state_dir, CONFIG)
    script = "echo first-line; while [ ! -e go ]; do sleep 0.02; done; echo written-in-the-outage; exec cat"
    with Daemon(state_dir) as daemon:
        agent = await connect(state_dir, "agent", operator=False)
        bg = await agent.request(
            "exec",
            {"command": script, "pty": True, "background": True, "agentId": "main", "workdir": str(tmp_path)},
        )
        sid = bg["details"]["sessionId"]
        mint(state_dir, "asker")  # another agent is its own credential (issue 18)
        asker = await connect(state_dir, "asker", operator=False, agent="asker")
        asked = await asker.request("exec", {"command": "echo kept-ask"})
        await asker.close()
        assert asked["details"]["status"] == "approval-pending"
        await agent.close()
        app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_until(app.link.connected.is_set)
            await until(pilot, lambda: len(app.inbox) == 1)
            daemon.kill()  # SIGKILL under the console
            (tmp_path / "go").touch()
            await until(pilot, lambda: "unreachable" in str(app.sub_title))
            daemon.start()
            await until(pilot, lambda: app.link.connected.is_set() and "gateway pid" in str(app.sub_title))
            await until(pilot, lambda: len(app.inbox) == 1 and sid in app.sessions.sessions)
            await pilot.press("2")
            app.sessions.select(sid)
            pane = app.sessions.term_pane
            await until(pilot, lambda: any("written-in-the-outage" in line for line in pane.text_lines()))
            assert any("first-line" in line for line in pane.text_lines())
        operator = await connect(state_dir, "operator")
        await operator.request("process", {"action": "kill", "agentId": "main", "sessionId": sid})
        await operator.close()
