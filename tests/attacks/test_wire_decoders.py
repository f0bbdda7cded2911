"""Issue 35: what the three wires' decoders admit. Each defect the fuzzing found is one test here: a frame the
encoder could never send back (a lone surrogate, Infinity, a 400-digit number, a 200k-deep line) is that
wire's own error before any handler sees it, and the client always gets an answer."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.socket.server import ApprovalSocketServer, sign
from engine.nodes.wire import Hello, Request, WireError, decode
from engine.protocol.frames import read_token
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import ALLOWLIST, REPO, connect, gateway, write_config
from tests.helpers.peers import hello, raw, still_works

SURROGATE = (
    b"\\ud800"  # a lone UTF-16 surrogate as JSON writes it: json.loads accepts it, UTF-8 cannot hold it
)


async def line(reader: asyncio.StreamReader) -> dict[str, Any]:
    data = await asyncio.wait_for(reader.readline(), 10)
    assert data, "the connection closed without an answer"
    return dict(json.loads(data))


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Logged once as an error is fine; an exception escaping a task (a traceback) is not."""
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "never retrieved" not in record.getMessage()


# ---- control socket -----------------------------------------------------------------------------------


async def test_a_lone_surrogate_in_a_command_does_not_break_the_operators_inbox(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 1: the agent's own request is refused as bad input; the operator's inbox keeps working."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            reader, writer = await raw(state_dir)
            assert (await hello(state_dir, writer, reader))["type"] == "welcome"
            writer.write(
                b'{"type":"req","id":7,"method":"exec","params":{"command":"echo ' + SURROGATE + b'"}}\n'
            )
            reply = await line(reader)
            assert reply["id"] == 7 and reply["ok"] is False
            assert reply["error"]["code"] == "bad_frame" and "surrogate" in reply["error"]["message"]
            assert (await operator.request("approvals.pending"))["approvals"] == []
            writer.close()
        finally:
            await operator.close()
    no_traceback(caplog)


@pytest.mark.parametrize(
    "frame",
    [
        b'{"type":"req","id":"' + SURROGATE + b'","method":"status"}',
        b'{"type":"req","id":3,"method":"' + SURROGATE + b'"}',
        b'{"type":"req","id":3,"method":"sessions.poll","params":{"sessionId":"' + SURROGATE + b'"}}',
        b'{"type":"req","id":3,"method":"status","params":{"n":1e400}}',
        b'{"type":"req","id":3,"method":"status","params":{"n":NaN}}',
        b'{"type":"req","id":3,"method":"status","params":{"n":' + b"9" * 400 + b"}}",
        b'{"type":"req","id":' + b"9" * 40 + b',"method":"status"}',
    ],
)
async def test_every_request_gets_an_answer(
    state_dir: Path, frame: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 2: a lone surrogate (or a number JSON's peers cannot hold) anywhere in a request: the client gets
    a bad_frame answer, with its id when the id itself was sound, and the connection keeps serving."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        reader, writer = await raw(state_dir)
        assert (await hello(state_dir, writer, reader))["type"] == "welcome"
        writer.write(frame + b"\n")
        writer.write(b'{"type":"req","id":4,"method":"status"}\n')
        reply, after = await line(reader), await line(reader)
        assert reply["ok"] is False and reply["error"]["code"] == "bad_frame"
        assert reply["id"] in (3, None)
        assert after["id"] == 4 and after["ok"] is True
        writer.close()
        await still_works(state_dir)
    no_traceback(caplog)


@pytest.mark.parametrize("field", ["token", "operator", "credential", "client", "name"])
async def test_a_lone_surrogate_in_the_hello_is_answered_before_authentication(
    state_dir: Path, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 3: an error frame, never a dropped connection with a traceback in the log."""
    async with gateway(state_dir):
        reader, writer = await raw(state_dir)
        fields = {"type": "hello", "version": 1, "token": read_token(state_dir) or "", "client": "raw"}
        text = json.dumps({**fields, field: "x"}).replace('"x"', '"' + SURROGATE.decode() + '"')
        writer.write(text.encode() + b"\n")
        reply = await line(reader)
        assert reply["type"] == "error" and reply["code"] in ("handshake", "auth")
        writer.close()
        await still_works(state_dir)
    no_traceback(caplog)


async def test_a_hello_whose_token_cannot_be_compared_is_an_auth_error(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 3, behind the decoder: whatever reaches the principal check and raises is an `auth` answer."""
    async with gateway(state_dir) as server:

        def broken(*args: object) -> None:
            raise RuntimeError("lookup failed")

        server._principal = broken  # type: ignore[method-assign]
        reader, writer = await raw(state_dir)
        writer.write(b'{"type":"hello","version":1,"token":"x","client":"raw"}\n')
        reply = await line(reader)
        assert reply["type"] == "error" and reply["code"] == "auth"
        writer.close()
    assert sum("handshake failed" in r.getMessage() for r in caplog.records) == 1


# ---- node wire ----------------------------------------------------------------------------------------


def test_a_deeply_nested_node_line_is_a_wire_error() -> None:
    """Item 5: the node wire shares the depth-guarded reader."""
    with pytest.raises(WireError, match="nested"):
        decode(
            b'{"type":"req","id":"1","method":"ping","params":{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
        )


@pytest.mark.parametrize(
    "value", [b"Infinity", b"-Infinity", b"NaN", b"1e400", b"9" * 400, b'"1"', b"1.5", b"true"]
)
def test_a_node_hello_with_an_impossible_protocol_is_a_wire_error(value: bytes) -> None:
    """Item 6: `"protocol": Infinity` raised OverflowError out of Hello.from_json."""
    good = Hello("n1", "n", "1", "linux", [], "").to_json()
    text = (
        json.dumps(good).replace(f'"protocol": {good["protocol"]}', '"protocol": ' + value.decode()).encode()
    )
    with pytest.raises(WireError):
        decode(text)


@pytest.mark.parametrize(
    "text",
    [
        b'{"type":"req","id":"' + SURROGATE + b'","method":"ping"}',
        b'{"type":"req","id":"1","method":"ping","params":{"x":"' + SURROGATE + b'"}}',
        b'{"type":"res","id":"1","ok":true,"payload":{"x":-Infinity}}',
        b'{"type":"event","event":"x","payload":{"n":' + b"1" * 30 + b"}}",
        b'\xff{"type":"req"}',
    ],
)
def test_the_node_wire_admits_only_what_it_can_send_back(text: bytes) -> None:
    with pytest.raises(WireError):
        decode(text)


def test_the_node_wire_round_trips_what_it_admits() -> None:
    req = Request("r1", "system.run", {"command": ["echo", "é 😀"], "timeoutMs": 1500, "x": [1.5, None]})
    assert decode(encode_line(req)) == req


def encode_line(frame: Any) -> bytes:
    from engine.nodes.wire import encode

    return encode(frame)


def test_node_serve_answers_bad_requests_and_survives_bad_lines(state_dir: Path) -> None:
    """Items 5 and 6 end to end: `node serve --stdio` answers a request it cannot admit with INVALID_REQUEST
    (its id was sound), closes the link on a line it cannot read at all (logged once), and never prints a
    traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    deep = b'{"type":"req","id":"9","method":"ping","params":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    lines = [
        b'{"type":"req","id":"1","method":"ping","params":{"x":"' + SURROGATE + b'"}}',
        b'{"type":"req","id":"2","method":"ping","params":{"n":Infinity}}',
        b'{"type":"req","id":"3","method":"ping"}',
        deep,
        b"\xff not even JSON",
        b'{"type":"req","id":"4","method":"ping"}',
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "node", "serve", "--stdio"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        env=env,
        cwd=str(REPO),
        timeout=60,
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    frames = [decode(ln) for ln in proc.stdout.splitlines()]
    answers = {f.id: f for f in frames if not isinstance(f, Hello)}
    assert answers["1"].error["code"] == "INVALID_REQUEST"  # type: ignore[union-attr]
    assert answers["2"].error["code"] == "INVALID_REQUEST"  # type: ignore[union-attr]
    assert answers["3"].ok  # type: ignore[union-attr]
    assert "9" not in answers and "4" not in answers and b"nested" in proc.stderr  # closed at the deep line


# ---- exec-approvals.sock ------------------------------------------------------------------------------

TOKEN = "t" * 32


async def approvals_roundtrip(path: Path, data: bytes) -> dict[str, Any]:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 22)
    writer.write(data + b"\n")
    await writer.drain()
    writer.write_eof()
    try:
        return await line(reader)
    finally:
        writer.close()


def signed(request_json: str, *, ts: int | None = None, mac: str | None = None) -> dict[str, Any]:
    nonce = os.urandom(16).hex()
    ts = int(time.time() * 1000) if ts is None else ts
    return {
        "type": "exec",
        "id": "e1",
        "nonce": nonce,
        "ts": ts,
        "hmac": mac or sign(TOKEN, nonce, ts, request_json),
        "requestJson": request_json,
    }


async def test_the_approvals_socket_answers_what_it_cannot_admit(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 7: each of these closed the connection with a traceback; each is INVALID_REQUEST now."""
    path = state_dir / "exec-approvals.sock"

    async def operator(request: object) -> str:
        return "deny"

    sur = SURROGATE.decode()
    good_json = json.dumps({"command": ["true"]})
    cases = [
        json.dumps(signed(good_json, ts=1)).replace('"ts": 1', '"ts": ' + "1" * 400),
        json.dumps(signed(good_json)).replace(good_json.replace('"', '\\"'), "x" + sur),
        json.dumps(signed(good_json, mac="ab")).replace('"ab"', '"' + sur + '"'),
        # A valid HMAC over a requestJson whose timeoutMs no JSON peer can hold.
        json.dumps(signed('{"command":["true"],"timeoutMs":Infinity}')),
        json.dumps(signed('{"command":["true"],"cwd":"' + sur + '"}')),
        # Found by scripts/fuzz.sh: an agentId that is no id was "exec failed … runtime-error".
        json.dumps(signed(json.dumps({"command": ["true"], "agentId": "\x1b[2J"}))),
    ]
    async with ApprovalSocketServer(
        path, TOKEN, decider=operator, exec_handler=LocalExecHost(), rate_limit=None
    ) as server:
        server._rate.burst = 1000
        for text in cases:
            reply = await approvals_roundtrip(path, text.encode())
            assert reply["type"] == "exec-res" and reply["ok"] is False, text
            assert reply["error"]["code"] == "INVALID_REQUEST", reply
        token_case = json.dumps({"type": "request", "id": "r1", "token": "x", "request": {"command": "true"}})
        reply = await approvals_roundtrip(path, token_case.replace('"x"', '"' + sur + '"').encode())
        assert reply["type"] == "decision" and reply["decision"] == "deny"
        assert reply["error"]["code"] == "INVALID_REQUEST"
        for junk in (b"\xff\xfe", b"[1,2]", b'{"type":"other"}', b"1e400"):
            reply = await approvals_roundtrip(path, junk)
            assert reply["type"] == "error" and reply["code"] == "INVALID_REQUEST", junk
    no_traceback(caplog)


# ---- item 8 -------------------------------------------------------------------------------------------


async def test_a_nul_byte_in_the_relayed_cwd_is_an_input_error_naming_the_field(state_dir: Path) -> None:
    from engine.protocol.frames import RemoteError

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            with pytest.raises(RemoteError) as err:
                await operator.request("approvals.relay", {"id": "s1", "command": "ls", "cwd": "/tmp\x00x"})
            assert err.value.code == "bad_params" and "cwd" in err.value.message
            with pytest.raises(RemoteError) as err:
                await operator.request("approvals.relay", {"id": "s1", "command": "ls\x00", "cwd": "/tmp"})
            assert err.value.code == "bad_params" and "command" in err.value.message
            # Found by scripts/fuzz.sh: the same NUL in policy.check's cwd was `internal` with a traceback.
            with pytest.raises(RemoteError) as err:
                await operator.request("policy.check", {"command": "ls", "cwd": "/tmp\x00x"})
            assert err.value.code == "bad_params" and "cwd" in err.value.message
        finally:
            await operator.close()


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
