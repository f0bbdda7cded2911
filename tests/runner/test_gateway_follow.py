"""Per-viewer output (sessions.follow, session.activity), approval.updated, the ApprovalView's own analysis,
sandbox.progress, and a daemon that stops once its socket is gone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import Event, RemoteError, socket_path
from engine.sandbox import default_manager
from tests.helpers.gateway import ALLOWLIST, FULL, REPO, connect, gateway, wait_until, write_config

PRINTER = "for i in $(seq 1 30); do echo {tag}-$i; sleep 0.02; done"


def collect(client: ControlClient) -> list[Event]:
    seen: list[Event] = []
    client.add_listener(seen.append)
    return seen


def output_of(events: list[Event], sid: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == "session.output" and e.data.get("sessionId") == sid]


def exited(events: list[Event], *sids: str) -> bool:
    done = {e.data.get("sessionId") for e in events if e.event == "session.exited"}
    return set(sids) <= done


async def start(agent: ControlClient, tag: str) -> str:
    res = await agent.request("exec", {"command": PRINTER.format(tag=tag), "background": True})
    return str(res["details"]["sessionId"])


async def test_follow_only_subscriber_gets_only_its_session_and_activity_counts(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        follower = await connect(state_dir, "follower")
        legacy = await connect(state_dir, "legacy")
        seen, everything = collect(follower), collect(legacy)
        await legacy.subscribe(["sessions"])
        assert (await follower.request("subscribe", {"topics": ["sessions"], "follow": []})) == {
            "topics": ["sessions"],
            "follow": [],
        }
        a, b = await start(agent, "A"), await start(agent, "B")
        assert await follower.request("sessions.follow", {"sessionId": a}) == {"follow": [a]}
        with pytest.raises(RemoteError, match="No session found"):
            await follower.request("sessions.follow", {"sessionId": "nope"})
        await wait_until(lambda: exited(seen, a, b) and exited(everything, a, b))

        assert output_of(seen, b) == []  # the follower never decodes the hidden session's bytes
        pushed = output_of(seen, a)
        assert pushed and all("A-" in p["data"] for p in pushed)
        # Replay up to the first pushed offset + the pushed frames = the whole output, nothing twice.
        head = await follower.request("sessions.output", {"sessionId": a, "offset": 0})
        first = pushed[0]["offset"]
        assert head["data"][:first] + "".join(p["data"] for p in pushed) == head["data"]
        assert "".join(p["data"] for p in output_of(everything, b)).count("B-") == 30  # v1 default kept

        total_b = (await follower.request("sessions.output", {"sessionId": b, "offset": 0}))["nextOffset"]

        def activity() -> list[dict[str, Any]]:
            return [r for e in seen if e.event == "session.activity" for r in e.data["sessions"]]

        await wait_until(lambda: activity() and activity()[-1]["outputBytes"] == total_b)
        rows = activity()
        assert {r["sessionId"] for r in rows} == {b}  # never the followed one
        assert 0 < rows[-1]["unreadBytes"] <= total_b
        assert [e for e in everything if e.event == "session.activity"] == []

        # Following B instead (only): A leaves the set; unfollowing B marks everything it printed read.
        assert await follower.request("sessions.follow", {"sessionId": b, "only": True}) == {"follow": [b]}
        assert await follower.request("sessions.unfollow", {"sessionId": b}) == {"follow": []}
        await wait_until(
            lambda: any(
                r == {"sessionId": b, "unreadBytes": 0, "outputBytes": total_b}
                for e in seen
                if e.event == "session.activity"
                for r in e.data["sessions"]
            )
        )
        for client in (agent, follower, legacy):
            await client.close()


async def test_follow_list_on_subscribe_and_bad_params(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        viewer = await connect(state_dir, "viewer")
        seen = collect(viewer)
        a = await start(agent, "A")
        b = await start(agent, "B")
        res = await viewer.request("subscribe", {"topics": ["sessions"], "follow": [b, "gone"]})
        assert res == {"topics": ["sessions"], "follow": [b]}
        await wait_until(lambda: exited(seen, a, b))
        assert output_of(seen, a) == [] and output_of(seen, b)
        with pytest.raises(RemoteError, match="follow must be a list"):
            await viewer.request("subscribe", {"topics": ["sessions"], "follow": "x"})
        with pytest.raises(RemoteError, match="only must be a boolean"):
            await viewer.request("sessions.follow", {"sessionId": a, "only": "yes"})
        with pytest.raises(RemoteError, match="sessionId is required"):
            await viewer.request("sessions.follow", {})
        await agent.close()
        await viewer.close()


async def test_coalesced_ask_broadcasts_approval_updated(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        watcher = await connect(state_dir, "watcher")
        agent = await connect(state_dir, "agent")
        seen = collect(watcher)
        await watcher.subscribe(["approvals"])
        params = {"command": "uname -s", "sessionKey": "k"}
        first = await agent.request("exec", params)
        second = await agent.request("exec", params)
        approval_id = first["details"]["approvalId"]
        assert second["details"]["approvalId"] == approval_id
        await wait_until(lambda: any(e.event == "approval.updated" for e in seen))
        updates = [e.data for e in seen if e.event == "approval.updated"]
        assert updates == [{"id": approval_id, "count": 2}]
        assert [e.data["count"] for e in seen if e.event == "approval.requested"] == [1]
        pending = (await watcher.request("approvals.pending"))["approvals"]
        assert [(p["id"], p["count"]) for p in pending] == [(approval_id, 2)]
        await watcher.close()
        await agent.close()


async def test_approval_view_carries_the_exec_tools_own_analysis(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    ls, uname = shutil.which("ls"), shutil.which("uname")
    assert ls and uname
    ApprovalsStore().add_allowlist("main", os.path.realpath(ls))
    async with gateway(state_dir):
        watcher = await connect(state_dir, "watcher")
        seen = collect(watcher)
        await watcher.subscribe(["approvals"])
        command = "ls /tmp; uname -s"
        await watcher.request("exec", {"command": command, "sessionKey": "k"})
        await wait_until(lambda: any(e.event == "approval.requested" for e in seen))
        view = next(e.data for e in seen if e.event == "approval.requested")
        check = await watcher.request("policy.check", {"command": command, "sessionKey": "k"})
        hit, miss = view["segments"]
        assert hit["argv"] == ["ls", "/tmp"] and hit["satisfiedBy"] == "allowlist"
        assert hit["matchedPattern"] == os.path.realpath(ls) and hit["resolvedPath"] == os.path.realpath(ls)
        assert (
            miss["argv"] == ["uname", "-s"] and miss["satisfiedBy"] is None and miss["matchedPattern"] is None
        )
        assert miss["resolvedPath"] == os.path.realpath(uname)
        assert view["allowAlwaysPatterns"] == check["allowAlwaysPatterns"] and view["allowAlwaysPatterns"]
        assert os.path.realpath(uname) in view["allowAlwaysPatterns"]
        assert view["analysisOk"] is True and view["resolvedPath"] == os.path.realpath(ls)
        assert view["decision"]["trail"] == check["trail"]
        await watcher.close()


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


def test_daemon_stops_when_its_socket_is_removed(state_dir: Path) -> None:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "gateway", "run"],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):
            if socket_path(state_dir).exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert socket_path(state_dir).exists(), proc.stderr.read() if proc.stderr else ""
        socket_path(state_dir).unlink()  # what deleting a test's temp state dir amounts to
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None and "was removed or replaced; stopping" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
