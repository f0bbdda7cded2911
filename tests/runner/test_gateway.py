"""The control socket under attack: every bad peer is refused while good clients keep working."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient
from engine.protocol.frames import (
    MAX_FRAME_BYTES,
    GatewayUnavailable,
    Hello,
    RemoteError,
    encode_frame,
    read_token,
    socket_path,
)
from runner.gateway.server import GatewayBusy, GatewayServer
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config


async def raw(state: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(str(socket_path(state)), limit=4 * MAX_FRAME_BYTES)


async def hello(state: Path, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> dict:
    writer.write(encode_frame(Hello(token=read_token(state) or "", client="raw")))
    await writer.drain()
    return json.loads(await reader.readline())


async def still_works(state: Path) -> None:
    client = await connect(state)
    try:
        assert (await client.request("status"))["pid"] == os.getpid()
    finally:
        await client.close()


async def test_handshake_status_and_file_modes(state_dir: Path) -> None:
    async with gateway(state_dir):
        client = await connect(state_dir)
        status = await client.request("status")
        assert status["pid"] == os.getpid() and status["connections"] == 1
        assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(socket_path(state_dir)).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(state_dir / "gateway.json").st_mode) == 0o600
        with pytest.raises(RemoteError) as exc:
            await client.request("no.such.verb")
        assert exc.value.code == "unknown_method"
        with pytest.raises(RemoteError) as exc:
            await client.request("approve", {"id": 5})
        assert exc.value.code == "bad_params"
        await client.close()
    assert not socket_path(state_dir).exists()


async def test_wrong_token_and_wrong_version_refused(state_dir: Path) -> None:
    async with gateway(state_dir):
        keeper = await connect(state_dir)
        with pytest.raises(RemoteError) as exc:
            await ControlClient.connect(state_dir, autostart=False, token="A" * 32)
        assert exc.value.code == "auth"
        reader, writer = await raw(state_dir)
        writer.write(encode_frame(Hello(token=read_token(state_dir) or "", version=99)))
        reply = json.loads(await reader.readline())
        assert reply["type"] == "error" and reply["code"] == "version"
        assert await reader.read() == b""  # closed
        assert (await keeper.request("status"))["connections"] == 1
        await keeper.close()


async def test_no_handshake_times_out_while_others_work(state_dir: Path) -> None:
    async with gateway(state_dir, handshake_timeout=0.3):
        reader, _writer = await raw(state_dir)
        await still_works(state_dir)
        reply = json.loads(await asyncio.wait_for(reader.readline(), 10))
        assert reply == {"type": "error", "code": "handshake", "message": "no hello within 0.3 s"}
        assert await reader.read() == b""


async def test_garbage_before_and_after_handshake(state_dir: Path) -> None:
    async with gateway(state_dir):
        reader, writer = await raw(state_dir)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        reply = json.loads(await reader.readline())
        assert reply["code"] == "handshake" and "invalid JSON" in reply["message"]
        assert await reader.read() == b""

        reader, writer = await raw(state_dir)
        assert (await hello(state_dir, writer, reader))["type"] == "welcome"
        writer.write(b"\x00\xff garbage\n")
        writer.write(b'{"type":"req","id":1,"method":"status","params":"x"}\n')
        writer.write(b'{"type":"req","id":2,"method":"status"}\n')
        frames = [json.loads(await reader.readline()) for _ in range(3)]
        assert frames[0]["ok"] is False and frames[0]["error"]["code"] == "bad_frame"
        assert frames[1]["ok"] is False and "'params'" in frames[1]["error"]["message"]
        assert frames[2]["id"] == 2 and frames[2]["ok"] is True  # the connection survives a bad frame
        writer.write(b"nope\n" * 20)  # ...but not a stream of them
        for _ in range(20):
            line = await reader.readline()
            if not line:
                break
            if json.loads(line)["type"] == "error":
                assert json.loads(line)["code"] == "frame"
                assert await reader.read() == b""
                break
        else:
            pytest.fail("connection stayed open under a stream of garbage")
        await still_works(state_dir)


async def test_oversize_frames_refused(state_dir: Path) -> None:
    async with gateway(state_dir):
        reader, writer = await raw(state_dir)
        writer.write(b'{"type":"hello","token":"' + b"x" * (MAX_FRAME_BYTES + 10) + b'"}\n')
        reply = json.loads(await reader.readline())
        assert reply["code"] == "handshake" and "cap" in reply["message"]

        reader, writer = await raw(state_dir)
        await hello(state_dir, writer, reader)
        big = json.dumps(
            {"type": "req", "id": 1, "method": "exec", "params": {"command": "x" * MAX_FRAME_BYTES}}
        )
        writer.write(big.encode() + b"\n")
        reply = json.loads(await reader.readline())
        assert reply["type"] == "error" and reply["code"] == "frame"
        assert await reader.read() == b""
        await still_works(state_dir)


async def test_slow_client_that_never_reads_is_cut_off(state_dir: Path) -> None:
    async with gateway(state_dir) as server:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(str(socket_path(state_dir)))
        sock.sendall(encode_frame(Hello(token=read_token(state_dir) or "", client="slow")))
        request = b'{"type":"req","id":1,"method":"approvals.pending"}\n'
        sock.setblocking(False)
        sent, stop = 0, asyncio.get_running_loop().time() + 20
        # Keep asking, never read: the gateway must drop us rather than buffer forever or stall.
        while asyncio.get_running_loop().time() < stop:
            try:
                sent += sock.send(request * 200)
            except BlockingIOError:
                await asyncio.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                break
            await still_works(state_dir) if sent % (len(request) * 2000) == 0 else None
            if not any(c.client == "slow" for c in server.connections) and sent > 0:
                break
        await wait_until(lambda: not any(c.client == "slow" for c in server.connections))
        await still_works(state_dir)
        sock.close()


def _ensure_user(name: str) -> int:
    try:
        return int(subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True).stdout)
    except subprocess.CalledProcessError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True
        )
        return int(subprocess.run(["id", "-u", name], capture_output=True, text=True, check=True).stdout)


PROBE = r"""
import socket, sys, json
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"connect": e.__class__.__name__})); sys.exit(0)
s.settimeout(5)
try:
    s.sendall((json.dumps({"type": "hello", "version": 1, "token": sys.argv[2]}) + "\n").encode())
except OSError:
    pass  # refused before we could even say hello: the reason is still waiting to be read
print(s.makefile().readline().strip())
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to switch UID")
async def test_other_uid_refused(state_dir: Path) -> None:
    uid = _ensure_user("exechost-probe")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

    async def probe(token: str) -> dict:
        proc = await asyncio.create_subprocess_exec(
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            python,
            "-c",
            PROBE,
            str(socket_path(state_dir)),
            token,
            stdout=asyncio.subprocess.PIPE,
            cwd="/",
        )
        out, _ = await proc.communicate()
        return json.loads(out)

    async with gateway(state_dir):
        token = read_token(state_dir) or ""
        # Default modes: the 0700 state dir already keeps other users away from the socket.
        assert (await probe(token))["connect"] == "PermissionError"
        # Even with the file modes opened up (and the token leaked), SO_PEERCRED refuses the peer.
        os.chmod(state_dir.parent, 0o711)
        os.chmod(state_dir, 0o711)
        os.chmod(socket_path(state_dir), 0o666)
        reply = await probe(token)
        assert reply["type"] == "error" and reply["code"] == "auth" and f"peer uid {uid}" in reply["message"]
        await still_works(state_dir)


async def test_stale_socket_replaced_live_one_never_stolen(state_dir: Path) -> None:
    path = socket_path(state_dir)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: stale
    async with gateway(state_dir):
        await still_works(state_dir)
        second = GatewayServer(state_dir)
        with pytest.raises(GatewayBusy, match="already running"):
            await second.start()
        await still_works(state_dir)
    # A foreign listener on the path (no pid lock held) is not stolen either.
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen()
    try:
        with pytest.raises(GatewayBusy, match="answering"):
            await GatewayServer(state_dir).start()
        assert path.exists()
    finally:
        live.close()
        path.unlink()
    path.write_text("not a socket")
    with pytest.raises(GatewayBusy, match="not a socket"):
        await GatewayServer(state_dir).start()
    assert path.read_text() == "not a socket"


async def test_two_hundred_concurrent_execs_none_mixed_up(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        clients = [await connect(state_dir, f"c{i}") for i in range(4)]
        calls = [
            clients[i % 4].request(
                "exec", {"command": f"echo out-{i}; echo err-{i} >&2", "sessionKey": f"s{i % 7}"}
            )
            for i in range(200)
        ]
        results = await asyncio.gather(*calls)
        for i, result in enumerate(results):
            details = result["details"]
            assert details["status"] == "completed" and details["exitCode"] == 0, result
            assert sorted(result["text"].split()) == [f"err-{i}", f"out-{i}"], result
        for client in clients:
            await client.close()


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


async def test_client_notices_gateway_shutdown(state_dir: Path) -> None:
    async with gateway(state_dir):
        client = await connect(state_dir)
        assert (await client.request("shutdown")) == {"stopping": True}
        reason = await asyncio.wait_for(client.wait_closed(), 10)
        assert "closed" in reason and client.closed
        with pytest.raises(ConnectionError):
            await client.request("status")


async def test_connect_without_gateway_is_a_clear_error(state_dir: Path) -> None:
    with pytest.raises(GatewayUnavailable, match="no gateway is listening"):
        await ControlClient.connect(state_dir, autostart=False)


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
    monkeypatch.setattr("runner.gateway.server.EVENT_DROP_BYTES", 32 * 1024)
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
        agent = await connect(state_dir, "agent")
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
