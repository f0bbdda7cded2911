"""Issue 22: a node session's output is pushed to consoles like a local session's (it was polled every
0.25 s), through the same fan-out: `session.output` for the followed session, `session.activity` unread
counts for the others, and the node stops pushing what nobody follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.protocol.frames import Event
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode

GATEWAY = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


async def test_node_output_is_pushed_and_counted(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(GATEWAY + "".join(n.config_toml() for n in sshd_nodes))
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    go, more = alpha.marks / "go", alpha.marks / "more"  # (the node's home is an overlay made per run)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        shown = await agent.request(
            "exec",
            {
                "command": f"echo before; while [ ! -e {go} ]; do sleep 0.05; done; echo pushed-line; "
                "sleep 60",
                "background": True,
                "node": "alpha",
            },
        )
        hidden = await agent.request(
            "exec",
            {
                "command": f"while [ ! -e {more} ]; do sleep 0.05; done; echo 0123456789; sleep 60",
                "background": True,
                "node": "alpha",
            },
        )
        sid, other = shown["details"]["sessionId"], hidden["details"]["sessionId"]
        console = await connect(state_dir, "console")
        frames: list[Event] = []
        console.add_listener(frames.append)
        await console.subscribe(["sessions"])
        await console.request("sessions.follow", {"sessionId": sid, "only": True})
        # (the other session may be watched too: its start may reach the gateway before the console
        # follows only this one, when every console still wants every output; it is never pushed here)
        await wait_until(lambda: sid in server.services.nodes.feed._watching, timeout=15)
        # The node pushes only after it has taken `sessions.watch`: output before that is counted, and a
        # console reads it from the log. Wait for the node's answer, not for a time.
        await wait_until(lambda: not server.services.nodes.feed._calls, timeout=60)
        go.touch()

        def pushed(session: str) -> list[dict[str, Any]]:
            return [f.data for f in frames if f.event == "session.output" and f.data["sessionId"] == session]

        got = await wait_until(lambda: pushed(sid), timeout=15)
        assert "pushed-line" in "".join(str(d.get("data") or "") for d in got)
        assert all(isinstance(d["offset"], int) for d in got)
        # The replay offset and the pushed offsets are the same byte space (the node's own).
        page = await console.request("sessions.output", {"sessionId": sid, "offset": 0})
        assert page["data"].startswith("before\npushed-line")
        assert got[0]["offset"] == len(b"before\n")

        more.touch()  # the unfollowed node session prints: counted, never pushed

        def unread() -> int | None:
            for f in frames:
                if f.event == "session.activity":
                    for row in f.data["sessions"]:
                        if row["sessionId"] == other and row["unreadBytes"] >= 11:
                            return int(row["unreadBytes"])
            return None

        assert await wait_until(unread, timeout=15) == len(b"0123456789\n")
        assert pushed(other) == []
        # Unfollowing: the node is told to stop once output arrives that nobody wants.
        await console.request("sessions.follow", {"sessionId": other, "only": True})
        await wait_until(lambda: other in server.services.nodes.feed._watching, timeout=15)
        for s in (sid, other):
            await agent.request("process", {"action": "kill", "sessionId": s})
        await console.close()
        await agent.close()


async def test_a_followed_node_session_is_pushed_again_after_a_new_link(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Under `node run` the session outlives the SSH link; the console still follows it, so the gateway
    asks the new link to push it again."""
    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(GATEWAY + "".join(n.config_toml() for n in sshd_nodes))
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    go = alpha.marks / "go"  # the loop removes it: outside the node's read-only HOME
    service = alpha.run_service()
    try:
        async with gateway(state_dir) as server:
            hub = server.services.nodes
            agent = await connect(state_dir, "agent", operator=False)
            loop = f"while true; do if [ -e {go} ]; then rm {go}; echo after-link; fi; sleep 0.05; done"
            res = await agent.request("exec", {"command": loop, "node": "alpha", "background": True})
            sid = res["details"]["sessionId"]
            console = await connect(state_dir, "console")
            frames: list[Event] = []
            console.add_listener(frames.append)
            await console.subscribe(["sessions"])
            await console.request("sessions.follow", {"sessionId": sid, "only": True})
            link = hub.links["alpha"]
            first = link.connected_at_ms
            alpha.drop_connections()
            await wait_until(lambda: link.state != "connected", timeout=15)
            alpha.start()
            await wait_until(lambda: link.state == "connected" and link.connected_at_ms != first, timeout=30)
            await wait_until(lambda: hub.feed._watching.get(sid) == link.connected_at_ms, timeout=15)
            await wait_until(lambda: not hub.feed._calls, timeout=60)  # the node took the watch
            go.touch()
            await wait_until(
                lambda: any(
                    f.event == "session.output" and "after-link" in str(f.data.get("data")) for f in frames
                ),
                timeout=15,
            )
            await agent.request("process", {"action": "kill", "sessionId": sid})
            await console.close()
            await agent.close()
    finally:
        service.terminate()
        service.wait(timeout=30)
