"""A request frame decoded into its method's typed request, or the answer refusing it, before it is held."""

from __future__ import annotations

from engine.errors import ExecHostError
from engine.protocol.frames import ProtocolError, Request, RequestId, Response, decode_frame
from engine.protocol.requests import REQUESTS, Message
from engine.redact import scrub
from runner.gateway.handlers import HANDLERS


def typed_request(line: bytes) -> Response | tuple[RequestId, str, Message]:
    """One request frame decoded into its method's typed request (id, method, message), or the answer
    refusing it (an unknown method, a bad field: `bad_params`); ProtocolError for a frame that is no request.
    The frame's raw params are not kept: a field its method does not read is dropped here, before the
    request is held (fresh round 17 b)."""
    frame = decode_frame(line)
    if not isinstance(frame, Request):
        raise ProtocolError(f"expected a req frame, got {frame.type!r}")
    handler, message = HANDLERS.get(frame.method), REQUESTS.get(frame.method)
    if handler is None or message is None:
        error = {"code": "unknown_method", "message": f"unknown method {frame.method!r}"}
        return Response(id=frame.id, ok=False, error=error)
    try:
        return frame.id, frame.method, message.decode(frame.params)
    except ExecHostError as exc:
        return Response(id=frame.id, ok=False, error={"code": exc.code, "message": scrub(str(exc))})
