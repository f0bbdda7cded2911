"""Every method's typed request: one per Method, decoded once, encoded back byte for byte, and a wrong field
type refused with the method and the field named."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.jsontext import held_bytes
from engine.protocol.frames import RemoteError, Request, decode_frame, encode_frame
from engine.protocol.methods import Method
from engine.protocol.requests import (
    KINDS,
    PROCESS_FIELDS,
    REQUESTS,
    BadParams,
    ExecRequest,
    Message,
    ProcessRequest,
)
from runner.gateway.handlers import HANDLERS
from tests.helpers.gateway import connect, gateway

# One admissible value of each kind, and one of the wrong type for it.
GOOD: dict[str, Any] = {
    "str": "value",
    "path": "/tmp/dir",
    "bool": True,
    "int": 7,
    "number": 2.5,
    "id": "call-1",
    "strs": ["a", "b"],
    "env": {"FOO": "bar"},
    "object": {"uses": 3},
}
BAD: dict[str, Any] = {
    "str": 5,
    "path": ["/tmp"],
    "bool": "yes",
    "int": True,  # a bool is not an integer on this wire
    "number": "1",
    "id": False,
    "strs": ["a", 1],
    "env": {"FOO": 1},
    "object": [],
}


def full_params(cls: type[Message]) -> dict[str, Any]:
    return {spec.wire: GOOD[spec.kind] for spec in cls.specs()}


def test_every_method_has_one_message_and_one_handler() -> None:
    assert set(REQUESTS) == set(HANDLERS) == {m.value for m in Method}
    assert all(method == cls.METHOD for method, cls in REQUESTS.items())
    assert set(KINDS) == set(GOOD) == set(BAD)


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_a_decoded_request_encodes_back_to_the_same_bytes(method: str) -> None:
    cls = REQUESTS[method]
    params = full_params(cls)
    if cls.PASS_THROUGH:
        params["action"] = params.get("action", "snapshot")
        # the action's own field, passed through untouched (one the method reads, where it names them)
        extra = "extra" if cls.PASS_FIELDS is None else sorted(cls.PASS_FIELDS)[0]
        params[extra] = {"nested": [1, 2]}
    wire = encode_frame(Request(id=1, method=method, params=params))
    frame = decode_frame(wire)
    assert isinstance(frame, Request)
    msg = cls.decode(frame.params)
    assert encode_frame(Request(id=1, method=method, params=msg.params())) == wire
    # Only what was given goes back: a message with nothing optional sends just its required fields.
    required = {s.wire: GOOD[s.kind] for s in cls.specs() if s.required}
    assert cls.decode(required).params() == required


@pytest.mark.parametrize(
    ("method", "field", "kind"),
    sorted((m, s.wire, s.kind) for m, cls in REQUESTS.items() for s in cls.specs()),
)
def test_a_wrong_type_names_the_method_and_the_field(method: str, field: str, kind: str) -> None:
    cls = REQUESTS[method]
    params = {**full_params(cls), field: BAD[kind]}
    with pytest.raises(BadParams) as err:
        cls.decode(params)
    assert str(err.value) == f"{method}: {field} must be {KINDS[kind][1]}"
    assert err.value.code == "bad_params"


def test_required_fields_absent_null_or_blank_are_named() -> None:
    for params in ({}, {"action": None}, {"action": "  "}):
        with pytest.raises(BadParams, match=r"^process: action is required$"):
            ProcessRequest.decode(params)


def test_a_nul_byte_in_a_path_field_is_refused_by_name() -> None:
    with pytest.raises(BadParams, match=r"^exec: workdir contains a NUL byte$"):
        ExecRequest.decode({"command": "ls", "workdir": "/tmp\x00x"})


def test_null_means_not_given_and_unknown_fields_are_not_kept() -> None:
    msg = ExecRequest.decode({"command": "ls", "yieldMs": None, "unknown": 1})
    assert msg == ExecRequest(command="ls")
    assert msg.params() == {"command": "ls"}


def test_process_passes_its_actions_fields_through() -> None:
    msg = ProcessRequest.decode({"action": "write", "sessionId": "s1", "data": "x\n", "eof": True})
    assert msg.tool_params() == {"data": "x\n", "eof": True, "sessionId": "s1"}
    assert msg.params() == {"action": "write", "sessionId": "s1", "data": "x\n", "eof": True}


async def test_the_gateway_answers_a_bad_field_with_one_error_naming_it(state_dir: Path) -> None:
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            for method, params, message in (
                ("exec", {"command": "ls", "pty": "yes"}, "exec: pty must be a boolean"),
                (
                    "sessions.output",
                    {"sessionId": "x", "offset": "0"},
                    "sessions.output: offset must be an integer",
                ),
                ("events", {"agentId": 3}, "events: agentId must be a string"),
            ):
                with pytest.raises(RemoteError) as err:
                    await client.request(method, params)
                assert (err.value.code, err.value.message) == ("bad_params", message)
            assert (await client.request(Method.STATUS))["pid"]  # the connection keeps serving
        finally:
            await client.close()


def test_a_process_field_no_action_reads_is_dropped_at_decode() -> None:
    """Fresh round 17 b: a field the process tool does not read is not held while the request runs (a
    ~1 MiB `pad` of `{}`s held ~24 MiB of Python per waiting poll); the fields it reads are kept."""
    msg = ProcessRequest.decode({"action": "poll", "sessionId": "s", "timeout": 5, "pad": [{}] * 1000})
    assert msg.args == {"timeout": 5}
    assert msg.held_bytes() < 1000


def test_process_fields_cover_the_process_tools_schema() -> None:
    from runner.mcp_schema import PROCESS_SCHEMA

    named = {spec.wire for spec in ProcessRequest.specs()}
    # timeoutMs is sent as timeout (runner.mcp_schema.to_gateway); approvalId goes to approvals.status
    wanted = set(PROCESS_SCHEMA["properties"]) - named - {"timeoutMs", "approvalId"}
    assert wanted <= PROCESS_FIELDS


def test_held_bytes_is_what_the_values_hold_not_their_text() -> None:
    import tracemalloc

    text = "[" + ",".join(["{}"] * 10_000) + "]"
    tracemalloc.start()
    value = json.loads(text)
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held_bytes(value) >= traced > 20 * len(text)
    assert held_bytes(["ab"] * 1000) == sys.getsizeof(["ab"] * 1000) + 1000 * sys.getsizeof("ab")
    assert held_bytes({"k": "v"}) == sys.getsizeof({"k": "v"}) + 2 * sys.getsizeof("k")
