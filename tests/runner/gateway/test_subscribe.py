"""The `subscribe` verb: events reach subscribers of their topic only."""

from __future__ import annotations

from pathlib import Path

from engine.sandbox import default_manager
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config
from tests.helpers.peers import collect


async def test_events_pushed_to_subscribers_only(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir) as server:
        watcher = await connect(state_dir, "watcher")
        other = await connect(state_dir, "other")
        await watcher.subscribe(["events", "sessions"])
        seen: list[str] = []
        other.add_listener(lambda ev: seen.append(ev.event))
        result = await other.request("exec", {"command": "echo bg", "background": True, "sessionKey": "k1"})
        assert result["details"]["status"] == "running"
        names: list[str] = []
        async for ev in watcher.events():
            names.append(ev.event)
            if ev.event == "system.event":
                assert ev.data["sessionKey"] == "k1" and ev.data["text"].startswith("Exec completed")
            if {"system.event", "session.exited"} <= set(names):
                break
        assert "session.started" in names and "session.exited" in names
        assert seen == []
        assert server.services.events.peek("k1")
        events = await other.request("events", {"sessionKey": "k1", "drain": True})
        assert [e["text"][:14] for e in events["events"]] == ["Exec completed"]
        assert (await other.request("events", {"sessionKey": "k1"}))["events"] == []
        await watcher.close()
        await other.close()


async def test_sandbox_progress_is_forwarded_to_sandboxes_subscribers(state_dir: Path) -> None:
    async with gateway(state_dir):
        watcher = await connect(state_dir, "watcher")
        other = await connect(state_dir, "other")
        seen, elsewhere = collect(watcher), collect(other)
        assert (await watcher.subscribe(["sandboxes"]))["topics"] == ["sandboxes"]
        await other.subscribe(["sessions", "approvals", "events"])
        hook = default_manager().progress
        assert hook is not None
        hook("exechost-sbx-main-1a2b", "creating container")
        hook("exechost-sbx-main-1a2b", "container started")
        await wait_until(lambda: len(seen) == 2)
        assert [(e.event, e.data["containerName"], e.data["message"]) for e in seen] == [
            ("sandbox.progress", "exechost-sbx-main-1a2b", "creating container"),
            ("sandbox.progress", "exechost-sbx-main-1a2b", "container started"),
        ]
        assert isinstance(seen[0].data["ts"], int)
        assert elsewhere == []
        await watcher.close()
        await other.close()
    assert default_manager().progress is None  # a stopped gateway leaves no hook behind
