"""The control-protocol codec: frames round-trip, hostile lines are refused with a reason."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.protocol.frames import (
    MAX_FRAME_BYTES,
    ErrorFrame,
    Event,
    Hello,
    ProtocolError,
    Request,
    Response,
    Welcome,
    decode_frame,
    encode_frame,
    ensure_token,
    read_token,
    token_path,
)


@pytest.mark.parametrize(
    "frame",
    [
        Hello(token="t" * 32, client="console", name="op"),
        Welcome(pid=42),
        ErrorFrame(code="auth", message="invalid gateway token"),
        Request(id=7, method="exec", params={"command": "ls"}),
        Request(id="abc", method="status"),
        Response(id=7, ok=True, result={"text": "ok", "details": {}}),
        Response(id="x", ok=False, error={"code": "tool_error", "message": "nope"}),
        Event(event="system.event", data={"sessionKey": "k", "text": "hi"}),
    ],
)
def test_round_trip(frame: object) -> None:
    line = encode_frame(frame)  # type: ignore[arg-type]
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_frame(line) == frame


def test_wire_shape_matches_architecture() -> None:
    assert json.loads(encode_frame(Request(id=1, method="status"))) == {
        "type": "req",
        "id": 1,
        "method": "status",
        "params": {},
    }
    assert json.loads(encode_frame(Hello(token="x" * 20))) == {
        "type": "hello",
        "version": 1,
        "token": "x" * 20,
        "client": "cli",
        "name": "",
        "operator": "",
        "credential": "",  # an agent's own credential (docs/ARCHITECTURE.md, hello)
    }
    name, data = Event(event="e", data={"a": 1})
    assert (name, data) == ("e", {"a": 1})


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"not json\n", "invalid JSON"),
        (b"[1,2]\n", "JSON object"),
        (b'{"type":"nope"}\n', "unknown frame type"),
        (b'{"type":"req","id":true,"method":"x"}\n', "'id'"),
        (b'{"type":"req","id":null,"method":"x"}\n', "'id'"),
        (b'{"type":"req","id":1,"method":""}\n', "'method'"),
        (b'{"type":"req","id":1,"method":"x","params":[]}\n', "'params'"),
        (b'{"type":"hello","version":"1","token":"x"}\n', "'version'"),
        (b'{"type":"hello","version":1}\n', "missing field 'token'"),
        (b"\xff\xfe\n", "not UTF-8"),
    ],
)
def test_hostile_lines_are_refused(line: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode_frame(line)


def test_frame_cap_both_ways() -> None:
    with pytest.raises(ProtocolError, match="cap"):
        encode_frame(Request(id=1, method="exec", params={"command": "x" * MAX_FRAME_BYTES}))
    with pytest.raises(ProtocolError, match="cap"):
        decode_frame(b"{" + b" " * MAX_FRAME_BYTES + b"}\n")


@given(st.binary(max_size=200))
def test_decode_never_crashes(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_frame(data)


def test_token_file_created_private_and_stable(state_dir) -> None:  # type: ignore[no-untyped-def]
    assert read_token(state_dir) is None
    token = ensure_token(state_dir)
    assert len(token) >= 32
    assert ensure_token(state_dir) == token
    mode = token_path(state_dir).stat().st_mode & 0o777
    assert mode == 0o600
    assert json.loads(token_path(state_dir).read_text()) == {"version": 1, "token": token}
