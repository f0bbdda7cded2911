"""The `sessions.*` verbs: pushed and paged output, follow/unfollow, slow viewers."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from engine.protocol.frames import (
    MAX_FRAME_BYTES,
    Hello,
    RemoteError,
    encode_frame,
    read_token,
    socket_path,
)
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config
from tests.helpers.peers import collect, exited, output_of, release, start, still_works


async def test_session_output_pushed_and_pageable(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        console = await connect(state_dir, "console")
        await console.subscribe(["sessions"])
        agent = await connect(state_dir, "agent")
        started = await agent.request(
            "exec", {"command": "printf 'a\\033[1mb\\n'; sleep 0.2; printf 'c\\n' >&2", "background": True}
        )
        sid = started["details"]["sessionId"]
        pushed: list[dict] = []
        async for ev in console.events():
            if ev.event == "session.output" and ev.data["sessionId"] == sid:
                pushed.append(ev.data)
            if ev.event == "session.exited" and ev.data["sessionId"] == sid:
                break
        assert "".join(p["data"] for p in pushed) == "a\x1b[1mb\nc\n"
        assert pushed[0]["offset"] == 0 and {p["stream"] for p in pushed} == {"stdout", "stderr"}
        last = await console.request("sessions.output", {"sessionId": sid})
        assert (
            last["data"] == "a\x1b[1mb\nc\n" and last["nextOffset"] == 9 and last["truncatedBefore"] is False
        )
        page = await console.request("sessions.output", {"sessionId": sid, "offset": 2, "limit": 4})
        assert page == {
            "sessionId": sid,
            "offset": 2,
            "nextOffset": 6,
            "data": "[1mb",
            "truncatedBefore": False,
            "status": "completed",
        }
        rows = (await console.request("sessions.list"))["sessions"]
        assert [r["sessionId"] for r in rows] == [sid]
        with pytest.raises(RemoteError, match="not a running PTY session"):
            await console.request("sessions.resize", {"sessionId": sid, "cols": 80, "rows": 24})
        with pytest.raises(RemoteError, match="No session found"):
            await console.request("sessions.output", {"sessionId": "nope"})
        await console.close()
        await agent.close()


async def test_slow_console_loses_output_frames_not_the_gateway(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runner.gateway.connection.EVENT_DROP_BYTES", 32 * 1024)
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(str(socket_path(state_dir)))
        sock.sendall(encode_frame(Hello(token=read_token(state_dir) or "", client="lazy")))
        sock.sendall(b'{"type":"req","id":1,"method":"subscribe","params":{"topics":["sessions"]}}\n')
        sock.setblocking(False)
        replies = b""
        while replies.count(b"\n") < 2:  # welcome + the subscribe response: subscribed before the exec
            replies += await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), 10)
        assert b'"ok":true' in replies
        # Agent main's run: the lazy reader (agent main, on the gateway token) is shown it; the operator's
        # own run is the operator's alone (principals.operator_key).
        agent = await connect(state_dir, "agent", operator=False)
        started = await agent.request(
            "exec", {"command": "head -c 4000000 /dev/zero | tr '\\0' x", "background": True}
        )
        sid = started["details"]["sessionId"]

        async def finished() -> bool:
            rows = (await agent.request("sessions.list"))["sessions"]
            return any(r["sessionId"] == sid and r["status"] != "running" for r in rows)

        await wait_until(finished, timeout=30)
        await still_works(state_dir)  # the gateway never waited for the lazy reader
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=4 * MAX_FRAME_BYTES)
        got, frames = 0, []
        while True:
            frame = json.loads(await asyncio.wait_for(reader.readline(), 10))
            frames.append(frame)
            if frame.get("event") == "session.output" and "data" in frame["data"]:
                got += len(frame["data"]["data"])
            if frame.get("event") == "session.exited":
                break
        gaps = [f["data"] for f in frames if f.get("event") == "session.output" and f["data"].get("dropped")]
        assert gaps, (got, len(frames), [f.get("event") for f in frames][:8])
        assert gaps[0]["sessionId"] == sid and isinstance(gaps[0]["offset"], int)
        assert got < 4_000_000
        writer.close()
        await agent.close()


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
        a, b = await start(agent, "A", gated=True), await start(agent, "B", gated=True)
        assert await follower.request("sessions.follow", {"sessionId": a}) == {"follow": [a]}
        await release(agent, a, b)  # A prints only once it is followed: no activity of it is ever due
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
        # never a byte of the followed one (A printed only once followed; a row at 0 bytes may precede that)
        assert {r["sessionId"] for r in rows if r["outputBytes"]} == {b}, rows
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


async def test_sessions_list_is_paged_under_the_frame_cap(state_dir: Path, monkeypatch: Any) -> None:
    """It was one frame: past ~2,500 sessions the operator's view no longer fit the 1 MiB cap. Pages are
    cut by size (shrunk here so a dozen sessions make several) and the client reads them all."""
    from runner.gateway.handlers import sessions as handler

    monkeypatch.setattr(handler, "PAGE_BYTES", 2000)
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent", operator=False)
        ids = set()
        for n in range(12):
            res = await agent.request("exec", {"command": f"echo row-{n}", "background": True})
            ids.add(res["details"]["sessionId"])
        operator = await connect(state_dir, "op")
        first = await operator.request("sessions.list")
        assert first["next"] and first["total"] >= 12 and 0 < len(first["sessions"]) < 12
        rows = await operator.list_sessions()
        assert ids <= {r["sessionId"] for r in rows} and len(rows) == first["total"]
        assert len({r["sessionId"] for r in rows}) == len(rows)  # no row twice across pages
        assert ids <= {r["sessionId"] for r in await agent.list_sessions()}  # an agent's view pages too
        with pytest.raises(RemoteError, match="cursor"):
            await operator.request("sessions.list", {"cursor": "../1"})
        await agent.close()
        await operator.close()
