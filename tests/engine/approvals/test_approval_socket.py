"""exec-approvals.sock: OpenClaw's wire format and the hardening around it, over a real Unix socket.

The client helpers here are written from the wire description (reference §4), not from the server code.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine import statefs
from engine.approvals.socket.server import (
    ApprovalSocketBusy,
    ApprovalSocketError,
    ApprovalSocketServer,
    ExecHostRequest,
    ExecOutcome,
    PeerInfo,
    PromptRequest,
    RateLimit,
    request_decision,
    request_exec,
)
from engine.approvals.store import ApprovalsStore

TOKEN = "tok-" + "x" * 28


def wire_exec(
    token: str, request: dict[str, Any], *, ts: int | None = None, nonce: str | None = None
) -> dict:
    """An exec frame built from the wire description: HMAC-SHA256(token, "nonce:ts:requestJson")."""
    request_json = json.dumps(request)
    nonce = nonce or secrets.token_hex(16)
    ts = int(time.time() * 1000) if ts is None else ts
    mac = hmac.new(token.encode(), f"{nonce}:{ts}:{request_json}".encode(), hashlib.sha256).hexdigest()
    return {
        "type": "exec",
        "id": str(uuid.uuid4()),
        "nonce": nonce,
        "ts": ts,
        "hmac": mac,
        "requestJson": request_json,
    }


async def raw_exchange(path: Path, payload: bytes, timeout: float = 5.0) -> list[dict]:
    """Write raw bytes, half-close, collect every JSON line the server sends back."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 20)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    out = []
    async with asyncio.timeout(timeout):
        while line := await reader.readline():
            out.append(json.loads(line))
    writer.close()
    return out


class Inbox:
    """A decider standing in for the console's inbox: records asks, answers with a preset decision."""

    def __init__(self, answer: str = "allow-once", delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.asked: list[PromptRequest] = []
        self.cancelled = 0

    async def __call__(self, request: PromptRequest) -> str:
        self.asked.append(request)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.answer


async def echo_exec(request: ExecHostRequest, decide: Any, peer: PeerInfo) -> ExecOutcome:
    return ExecOutcome(
        ok=True,
        payload={
            "exitCode": 0,
            "timedOut": False,
            "success": True,
            "stdout": " ".join(request.command),
            "stderr": "",
        },
    )


@pytest.fixture
async def sock_path(state_dir: Path) -> AsyncIterator[Path]:
    yield state_dir / "exec-approvals.sock"


async def test_request_gets_decision_in_openclaw_shape(sock_path: Path) -> None:
    inbox = Inbox("allow-always")
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        rid = str(uuid.uuid4())
        frame = {
            "type": "request",
            "token": TOKEN,
            "id": rid,
            "request": {
                "command": "ls -la",
                "cwd": "/tmp",
                "host": "gateway",
                "security": "allowlist",
                "ask": "on-miss",
                "agentId": "main",
                "resolvedPath": "/usr/bin/ls",
                "sessionKey": "agent:main",
            },
        }
        replies = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
    assert replies == [{"type": "decision", "id": rid, "decision": "allow-always"}]
    [asked] = inbox.asked
    assert (asked.command, asked.cwd, asked.agent_id, asked.resolved_path) == (
        "ls -la",
        "/tmp",
        "main",
        "/usr/bin/ls",
    )
    assert asked.peer_pid == os.getpid()


async def test_client_helper_roundtrip(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox("deny")):
        assert await request_decision(sock_path, TOKEN, {"command": "rm -rf /"}) == "deny"
        assert await request_decision(sock_path, "", {"command": "x"}) is None


async def test_bad_token_is_denied_without_asking(sock_path: Path) -> None:
    inbox = Inbox("allow-once")
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        for token in (TOKEN[:-1] + "y", TOKEN + "y", "", 12345):
            frame = {"type": "request", "token": token, "id": "r1", "request": {"command": "id"}}
            replies = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
            assert replies == [{"type": "decision", "id": "r1", "decision": "deny"}]
    assert inbox.asked == []


async def test_a_rotated_token_counts_at_the_next_frame(sock_path: Path) -> None:
    """The token is the one exec-approvals.json holds at each frame (ApprovalsStore.socket_token_now): a
    leaked token stops working when the file gets a new one, with no console restart; a file that cannot
    say (corrupt) lets no token through and is left as it is."""
    store = ApprovalsStore(sock_path.parent / "exec-approvals.json")
    _path, old = store.socket_info()
    inbox = Inbox("allow-once")

    def frame(token: str) -> bytes:
        return json.dumps(
            {"type": "request", "token": token, "id": "r", "request": {"command": "id"}}
        ).encode()

    async with ApprovalSocketServer(sock_path, store.socket_token_now, decider=inbox, exec_handler=echo_exec):
        assert (await raw_exchange(sock_path, frame(old) + b"\n"))[0]["decision"] == "allow-once"
        data = json.loads(store.path.read_text())
        data["socket"]["token"] = new = "rotated-" + "z" * 24
        statefs.atomic_write(store.path, json.dumps(data))
        assert (await raw_exchange(sock_path, frame(old) + b"\n"))[0]["decision"] == "deny"
        [signed_old] = await raw_exchange(
            sock_path, json.dumps(wire_exec(old, {"command": ["id"]})).encode() + b"\n"
        )
        assert signed_old["ok"] is False
        assert (await raw_exchange(sock_path, frame(new) + b"\n"))[0]["decision"] == "allow-once"
        [signed_new] = await raw_exchange(
            sock_path, json.dumps(wire_exec(new, {"command": ["id"]})).encode() + b"\n"
        )
        assert signed_new["ok"] is True, signed_new
        store.path.write_text("{not json")
        for token in (old, new, ""):
            assert (await raw_exchange(sock_path, frame(token) + b"\n"))[0]["decision"] == "deny"
        assert store.path.read_text() == "{not json"
    assert len(inbox.asked) == 2


async def test_socket_and_dir_modes(sock_path: Path) -> None:
    os.chmod(sock_path.parent, 0o755)
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox()):
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
        assert stat.S_IMODE(os.stat(sock_path.parent).st_mode) == 0o700
    assert not sock_path.exists()


async def test_exec_good_hmac_runs(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        frame = wire_exec(TOKEN, {"command": ["echo", "hi"], "cwd": "/tmp"})
        replies = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
        res = await request_exec(sock_path, TOKEN, {"command": ["printf", "ok"]})
    assert replies == [
        {
            "type": "exec-res",
            "id": frame["id"],
            "ok": True,
            "payload": {"exitCode": 0, "timedOut": False, "success": True, "stdout": "echo hi", "stderr": ""},
        }
    ]
    assert res is not None and res["payload"]["stdout"] == "printf ok"


@pytest.mark.parametrize(
    ("mutate", "message", "reason"),
    [
        (lambda f: f.update(hmac="0" * 64), "invalid auth", "hmac"),
        (lambda f: f.update(hmac=f["hmac"][:-1]), "invalid auth", "hmac"),
        (lambda f: f.update(requestJson=f["requestJson"].replace("hi", "ho")), "invalid auth", "hmac"),
        (lambda f: f.update(nonce="not-hex-" * 4), "invalid auth", "hmac"),
    ],
)
async def test_exec_bad_hmac(sock_path: Path, mutate: Any, message: str, reason: str) -> None:
    ran: list[ExecHostRequest] = []

    async def handler(request: ExecHostRequest, decide: Any, peer: PeerInfo) -> ExecOutcome:
        ran.append(request)
        return await echo_exec(request, decide, peer)

    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=handler):
        frame = wire_exec(TOKEN, {"command": ["echo", "hi"]})
        mutate(frame)
        [res] = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
    assert res == {
        "type": "exec-res",
        "id": frame["id"],
        "ok": False,
        "error": {"code": "INVALID_REQUEST", "message": message, "reason": reason},
    }
    assert ran == []


async def test_exec_signed_with_wrong_token(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        frame = wire_exec("another-token", {"command": ["id"]})
        [res] = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
    assert res["error"]["reason"] == "hmac"


@pytest.mark.parametrize("skew_ms", [-10_500, 10_500, -3_600_000, 3_600_000])
async def test_exec_stale_or_future_timestamp(sock_path: Path, skew_ms: int) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        frame = wire_exec(TOKEN, {"command": ["id"]}, ts=int(time.time() * 1000) + skew_ms)
        [res] = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
    assert res["error"] == {"code": "INVALID_REQUEST", "message": "expired request", "reason": "ttl"}


async def test_exec_within_ttl_accepted(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        frame = wire_exec(TOKEN, {"command": ["id"]}, ts=int(time.time() * 1000) - 8_000)
        [res] = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
    assert res["ok"] is True


async def test_exec_replayed_nonce_refused(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        frame = wire_exec(TOKEN, {"command": ["id"]})
        line = json.dumps(frame).encode() + b"\n"
        [first] = await raw_exchange(sock_path, line)
        [again] = await raw_exchange(sock_path, line)
    assert first["ok"] is True
    assert again["error"] == {"code": "INVALID_REQUEST", "message": "replayed request", "reason": "nonce"}


async def test_exec_bad_request_json(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox(), exec_handler=echo_exec):
        for body in ('{"command": "not a list"}', "[1,2", '{"command": ["a"], "env": {"A": 1}}'):
            nonce, ts = secrets.token_hex(16), int(time.time() * 1000)
            mac = hmac.new(TOKEN.encode(), f"{nonce}:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
            frame = {"type": "exec", "id": "e1", "nonce": nonce, "ts": ts, "hmac": mac, "requestJson": body}
            [res] = await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n")
            assert res["error"] == {"code": "INVALID_REQUEST", "message": "invalid payload", "reason": "json"}


async def test_oversize_line_is_refused(sock_path: Path) -> None:
    inbox = Inbox()
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        big = {"type": "request", "token": TOKEN, "id": "big", "request": {"command": "x" * 300_000}}
        replies = await raw_exchange(sock_path, json.dumps(big).encode() + b"\n")
        # The server still answers the next well-formed client.
        assert await request_decision(sock_path, TOKEN, {"command": "ok"}) == "allow-once"
    assert replies[0]["type"] == "error" and "256000" in replies[0]["message"]
    assert [a.command for a in inbox.asked] == ["ok"]


async def test_junk_frames_are_answered_and_ask_nothing(sock_path: Path) -> None:
    """Issue 35: junk is answered INVALID_REQUEST (it used to be a silent close) and reaches no one."""
    inbox = Inbox()
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        for junk in (b"not json\n", b"[]\n", b'{"type":"nope"}\n', b"\n", b"\xff\xfe\n"):
            [reply] = await raw_exchange(sock_path, junk)
            assert reply["type"] == "error" and reply["code"] == "INVALID_REQUEST", junk
    assert inbox.asked == []


async def test_flood_from_one_peer_is_rate_limited(sock_path: Path) -> None:
    inbox = Inbox("allow-once")
    server = ApprovalSocketServer(
        sock_path, TOKEN, decider=inbox, rate_limit=RateLimit(burst=5, per_second=0.01)
    )
    async with server:
        results = []
        for i in range(12):
            frame = {"type": "request", "token": TOKEN, "id": f"f{i}", "request": {"command": "id"}}
            results.append(await raw_exchange(sock_path, json.dumps(frame).encode() + b"\n"))
    decided = [r for r in results if r and r[0]["type"] == "decision"]
    limited = [r for r in results if r and r[0].get("code") == "RATE_LIMITED"]
    assert len(decided) == 5 and len(limited) == 7
    assert len(inbox.asked) == 5


async def test_prompt_timeout_denies(sock_path: Path) -> None:
    inbox = Inbox("allow-once", delay=30)
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox, prompt_timeout=0.3):
        assert await request_decision(sock_path, TOKEN, {"command": "id"}) == "deny"
    assert inbox.cancelled == 1


async def test_peer_leaving_cancels_the_ask(sock_path: Path) -> None:
    inbox = Inbox("allow-once", delay=30)
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        # The OpenClaw client gives up after its timeout and closes; the inbox entry must go too.
        assert await request_decision(sock_path, TOKEN, {"command": "id"}, timeout=0.3) is None
        for _ in range(50):
            if inbox.cancelled:
                break
            await asyncio.sleep(0.05)
    assert inbox.cancelled == 1


async def test_live_socket_is_never_stolen(sock_path: Path) -> None:
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox("allow-always")):
        with pytest.raises(ApprovalSocketBusy):
            await ApprovalSocketServer(sock_path, TOKEN, decider=Inbox("deny")).start()
        assert await request_decision(sock_path, TOKEN, {"command": "id"}) == "allow-always"


async def test_live_foreign_server_is_never_stolen(sock_path: Path) -> None:
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(sock_path))
    other.listen(1)
    try:
        with pytest.raises(ApprovalSocketBusy):
            await ApprovalSocketServer(sock_path, TOKEN, decider=Inbox()).start()
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        other.close()


async def test_stale_socket_is_replaced(sock_path: Path) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock_path))
    dead.close()  # the file stays, nobody listens
    async with ApprovalSocketServer(sock_path, TOKEN, decider=Inbox("deny")):
        assert await request_decision(sock_path, TOKEN, {"command": "id"}) == "deny"


@pytest.mark.parametrize("kind", ["symlink", "file", "dir"])
async def test_non_socket_path_refused(sock_path: Path, kind: str, tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep me")
    if kind == "symlink":
        sock_path.symlink_to(target)
    elif kind == "file":
        sock_path.write_text("keep me")
    else:
        sock_path.mkdir()
    with pytest.raises(ApprovalSocketError, match="socket path invalid"):
        await ApprovalSocketServer(sock_path, TOKEN, decider=Inbox()).start()
    assert target.read_text() == "keep me"
    assert os.path.lexists(sock_path)


async def test_overlong_path_refused(tmp_path: Path) -> None:
    with pytest.raises(ApprovalSocketError, match="too long"):
        await ApprovalSocketServer(tmp_path / ("x" * 120), TOKEN, decider=Inbox()).start()


OTHER_USER = "ehsocktest"

OTHER_UID_CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(json.dumps({"type": "request", "token": sys.argv[2], "id": "u1",
                      "request": {"command": "id"}}).encode() + b"\n")
s.shutdown(socket.SHUT_WR)
print(s.makefile().readline().strip())
"""


@pytest.fixture
def other_user() -> str:
    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root, setpriv and /usr/bin/python3 to act as another UID")
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            check=True,
            capture_output=True,
        )
    return OTHER_USER


async def test_other_uid_is_denied_even_through_open_permissions(sock_path: Path, other_user: str) -> None:
    inbox = Inbox("allow-always")
    async with ApprovalSocketServer(sock_path, TOKEN, decider=inbox):
        # Simulate a misconfigured host: the filesystem lets the other user in; SO_PEERCRED must not.
        for p in (sock_path.parent, sock_path.parent.parent):
            os.chmod(p, 0o755)
        os.chmod(sock_path, 0o777)
        user = pwd.getpwnam(other_user)
        proc = await asyncio.create_subprocess_exec(
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            OTHER_UID_CLIENT,
            str(sock_path),
            TOKEN,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd="/",
        )
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    reply = json.loads(out)
    assert reply["type"] == "decision" and reply["decision"] == "deny"
    assert reply["id"] != "u1"  # like the app: a fresh id, nothing of the request echoed
    assert inbox.asked == []


def test_peer_info_is_the_kernels_word_and_path_problems_are_named(tmp_path: Path) -> None:
    from engine.unixsock import peer_info, socket_path_problem

    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        peer = peer_info(left)
    assert peer is not None and (peer.pid, peer.uid, peer.gid) == (os.getpid(), os.geteuid(), os.getegid())
    assert peer_info(None) is None
    assert socket_path_problem(tmp_path / "absent.sock") is None
    (tmp_path / "file").write_text("")
    assert socket_path_problem(tmp_path / "file") == "invalid (not a socket)"
    assert socket_path_problem(tmp_path / ("x" * 120)) == "too long (> 107 bytes)"
