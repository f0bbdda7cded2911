"""Issue 35: property tests for the three wires' decoders and handlers. Each decoder admits only what its
encoder can send back (the round trip holds) and refuses everything else with its own error; each handler
answers every admitted request with its result or a deliberate error, never `internal`.

The examples are derandomised by the profile tests/conftest.py loads; no test here chooses its own seed."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine import jsontext
from engine.approvals.socket.server import ApprovalSocketServer, ExecHostRequest, RateLimit
from engine.errors import InvalidInput
from engine.nodes import wire as node_wire
from engine.protocol.frames import ProtocolError, decode_frame, encode_frame
from engine.protocol.methods import Method
from engine.tools.exec_host import LocalExecHost

LONE = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
CHARS = st.characters(codec=None, exclude_categories=())  # surrogates included
TEXT = st.one_of(
    st.text(max_size=12), st.text(CHARS, max_size=6), st.tuples(st.text(max_size=3), LONE).map("".join)
)
NUMBER = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(
    SCALAR,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(TEXT, kids, max_size=4)),
    max_leaves=16,
)
HOSTILE_BYTES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"NaN", b"-Infinity", b"1e400", b"1" * 40, b"[" * 3000, b'"\\ud800"', b"\xed\xa0\x80"]),
)


def hostile_dumps(value: Any) -> str:
    """As a hostile peer writes it: lone surrogates as escapes, NaN and Infinity as bare words."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


def admissible(value: Any) -> bool:
    """What the wire may carry: no lone surrogate, no NaN/Infinity, numbers in int64 range."""
    if isinstance(value, str):
        return jsontext.clean_text(value) == value
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return abs(value) <= jsontext.INT_MAX
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) <= jsontext.INT_MAX
    if isinstance(value, list):
        return all(admissible(v) for v in value)
    return all(admissible(k) and admissible(v) for k, v in value.items())


# ---- the shared strict reader ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(JSON)
@example("\ud800")
@example({"\udc00": 1})
@example([float("inf")])
@example(2**63)
@example(-(2**63) + 1)
def test_loads_wire_admits_exactly_what_dumps_wire_can_send_back(value: Any) -> None:
    text = hostile_dumps(value)
    if not admissible(value):
        with pytest.raises(jsontext.BadJSON):
            jsontext.loads_wire(text)
        return
    got = jsontext.loads_wire(text)
    again = jsontext.loads_wire(jsontext.dumps_wire(got))
    assert again == got


@settings(max_examples=300, deadline=None)
@given(HOSTILE_BYTES)
def test_loads_wire_refuses_with_its_own_error_only(data: bytes) -> None:
    try:
        value = jsontext.loads_wire(data)
    except jsontext.BadJSON:
        return
    assert jsontext.loads_wire(jsontext.dumps_wire(value)) == value


# ---- the control socket's decoder ----------------------------------------------------------------------

FRAME_TYPES = st.sampled_from(["req", "res", "event", "hello", "welcome", "error", "nope"])


@st.composite
def control_lines(draw: st.DrawFn) -> bytes:
    frame: dict[str, Any] = {"type": draw(FRAME_TYPES), "id": draw(st.one_of(st.integers(), TEXT, st.none()))}
    frame.update(draw(st.dictionaries(st.sampled_from(["method", "params", "token", "version", "ok"]), JSON)))
    line = hostile_dumps(frame).encode()
    cut = draw(st.integers(min_value=0, max_value=len(line)))
    return line if draw(st.booleans()) else line[:cut] + draw(HOSTILE_BYTES) + line[cut:]


@settings(max_examples=300, deadline=None)
@given(control_lines())
def test_control_frames_decode_to_what_encodes_back_or_to_a_protocol_error(line: bytes) -> None:
    try:
        frame = decode_frame(line)
    except ProtocolError as exc:
        assert exc.request_id is None or jsontext.clean_text(str(exc.request_id)) == str(exc.request_id)
        return
    assert decode_frame(encode_frame(frame)) == frame


# ---- the node wire's decoder ---------------------------------------------------------------------------


@st.composite
def node_lines(draw: st.DrawFn) -> bytes:
    frame: dict[str, Any] = {"type": draw(FRAME_TYPES), "id": draw(st.one_of(TEXT, st.integers()))}
    keys = ["method", "params", "payload", "error", "event", "ok", "protocol", "nodeId", "displayName"]
    frame.update(draw(st.dictionaries(st.sampled_from(keys), JSON)))
    line = hostile_dumps(frame).encode()
    return line if draw(st.booleans()) else line + draw(HOSTILE_BYTES)


@settings(max_examples=300, deadline=None)
@given(node_lines())
def test_node_frames_decode_to_what_encodes_back_or_to_a_wire_error(line: bytes) -> None:
    try:
        frame = node_wire.decode(line)
    except node_wire.WireError:
        return
    assert node_wire.decode(node_wire.encode(frame)) == frame


# ---- exec-approvals.sock: requestJson and the server ---------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["command", "cwd", "env", "timeoutMs", "rawCommand", "agentId"]), JSON)
)
def test_request_json_is_a_request_or_invalid_input(body: dict[str, Any]) -> None:
    try:
        request = ExecHostRequest.from_json(hostile_dumps(body))
    except InvalidInput:
        return
    assert all("\x00" not in a and jsontext.clean_text(a) == a for a in request.command)
    assert request.timeout_ms is None or 0 < request.timeout_ms <= jsontext.INT_MAX


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(control_lines(), node_lines(), HOSTILE_BYTES))
def test_the_approvals_socket_answers_every_line_once(state_dir: Path, line: bytes) -> None:
    """Whatever one connection sends, it gets exactly one JSON line back, and nobody is asked."""
    asked: list[object] = []

    async def decider(request: object) -> str:
        asked.append(request)
        return "deny"

    async def exchange() -> list[bytes]:
        path = state_dir / "a.sock"
        server = ApprovalSocketServer(
            path, "t" * 32, decider=decider, exec_handler=LocalExecHost(), rate_limit=RateLimit(burst=10**6)
        )
        async with server:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 22)
            writer.write(line.replace(b"\n", b" ") + b"\n")
            writer.write_eof()
            replies = (await asyncio.wait_for(reader.read(), 30)).splitlines()
            writer.close()
            return replies

    replies = asyncio.run(exchange())
    assert len(replies) == 1
    assert isinstance(json.loads(replies[0]), dict)
    assert asked == []


# ---- handlers: the gateway's verbs and the node's methods ----------------------------------------------

HARMLESS = st.sampled_from(["true", "echo fuzz", "ls", "printf x", "echo \ud800", "true\x00", "pwd"])
PARAM_KEYS = st.sampled_from(
    [
        "command",
        "sessionId",
        "id",
        "action",
        "cwd",
        "workdir",
        "env",
        "timeoutMs",
        "offset",
        "limit",
        "agentId",
        "sessionKey",
        "topics",
        "decision",
        "pattern",
        "background",
        "yieldMs",
        "pty",
        "host",
        "security",
        "ask",
        "data",
        "keys",
        "cols",
        "rows",
    ]
)
PARAMS = st.dictionaries(PARAM_KEYS, st.one_of(JSON, HARMLESS), max_size=5)
AGENT_METHODS = [m.value for m in Method if m not in (Method.SHUTDOWN, Method.BROWSER_START, Method.BROWSER)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from(AGENT_METHODS), PARAMS), min_size=1, max_size=7)
)  # < MAX_BAD_FRAMES
def test_every_gateway_verb_answers_an_agent_with_a_result_or_a_deliberate_error(
    state_dir: Path, requests: list[tuple[str, dict[str, Any]]]
) -> None:
    from tests.helpers.gateway import ALLOWLIST, gateway, write_config
    from tests.helpers.peers import hello, raw

    write_config(state_dir, ALLOWLIST)

    async def run() -> list[dict[str, Any]]:
        async with gateway(state_dir):
            reader, writer = await raw(state_dir)
            assert (await hello(state_dir, writer, reader))["type"] == "welcome"
            for n, (method, params) in enumerate(requests):
                writer.write(
                    hostile_dumps({"type": "req", "id": n, "method": method, "params": params}).encode()
                )
                writer.write(b"\n")
            answers = []
            while len(answers) < len(requests):
                frame = json.loads(await asyncio.wait_for(reader.readline(), 30))
                assert frame.get("type") != "error", frame
                if frame.get("type") == "res":
                    answers.append(frame)
            writer.close()
            return answers

    answers = asyncio.run(run())
    named = [a["id"] for a in answers if a["id"] is not None]
    assert len(named) == len(set(named)) and set(named) <= set(range(len(requests)))
    assert [a for a in answers if not a["ok"] and a["error"]["code"] == "internal"] == []


class _Sink:
    """The node's link as bytes in a list (its Output writes through `write`)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.gateway = ""  # an anonymous link (no gateway key proved): runner.node.links.Output
        self.nonce: str | None = None
        self.resend_pending = False
        self.lock = asyncio.Lock()

    async def write(self, data: bytes) -> None:
        self.lines.append(data)

    def close(self) -> None:
        pass


NODE_METHODS = st.sampled_from(
    ["ping", "system.run", "system.which", "process", "sessions.list", "sessions.output", "sessions.watch"]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(NODE_METHODS, PARAMS, st.booleans())
def test_every_node_method_answers_with_a_result_or_a_deliberate_error(
    state_dir: Path, method: str, params: dict[str, Any], as_argv: bool
) -> None:
    from runner.node.serve import NodeServer

    if method == "system.run" and as_argv and isinstance(params.get("command"), str):
        params["command"] = ["sh", "-c", params["command"]]
    line = hostile_dumps({"type": "req", "id": "p1", "method": method, "params": params}).encode()
    try:
        req = node_wire.decode(line)
    except node_wire.WireError:
        return  # refused before any handler: the decoder's property above
    assert isinstance(req, node_wire.Request)

    async def run() -> list[bytes]:
        server = NodeServer(state_dir)
        sink = _Sink()
        server.links.up.append(sink)  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(server.handle(req, sink), 60)  # type: ignore[arg-type]
        finally:
            await server.close_tools()
            await server.sessions.close()
        return sink.lines

    answers = [node_wire.decode(data) for data in asyncio.run(run())]
    responses = [a for a in answers if isinstance(a, node_wire.Response)]
    assert len(responses) == 1 and responses[0].id == "p1"
    assert (responses[0].error or {}).get("code") != "INTERNAL", responses[0].error
