"""The JSON-lines protocol between the gateway and `exechost node serve --stdio`, one frame per line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PROTOCOL = 1
MAX_LINE = 16 * 1024 * 1024  # one frame; a longer line is a broken or hostile peer
CAPS = ("system.run", "system.which", "sandbox", "sessions.watch")


class WireError(ValueError):
    """A frame that is not what the protocol says; the link is dropped."""


@dataclass
class Hello:
    """The node's first line: who it is and what it speaks."""

    node_id: str
    display_name: str
    version: str
    platform: str
    caps: list[str]
    path_env: str
    protocol: int = PROTOCOL
    # "service": a long-lived `node run` answers (sessions outlive the link); "stdio": they die with it.
    mode: str = "stdio"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "protocol": self.protocol,
            "nodeId": self.node_id,
            "displayName": self.display_name,
            "version": self.version,
            "platform": self.platform,
            "caps": list(self.caps),
            "pathEnv": self.path_env,
            "mode": self.mode,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Hello:
        try:
            return cls(
                node_id=_str(d, "nodeId"),
                display_name=_str(d, "displayName"),
                version=_str(d, "version"),
                platform=_str(d, "platform"),
                caps=[str(c) for c in d.get("caps") or []],
                path_env=str(d.get("pathEnv") or ""),
                protocol=int(d["protocol"]),
                mode="service" if d.get("mode") == "service" else "stdio",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"bad hello: {exc}") from None


@dataclass
class Request:
    id: str
    method: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": "req", "id": self.id, "method": self.method, "params": self.params}


@dataclass
class Response:
    id: str
    ok: bool
    payload: dict[str, Any] | None = None
    error: dict[str, str] | None = None  # {code, message}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "res", "id": self.id, "ok": self.ok}
        if self.payload is not None:
            out["payload"] = self.payload
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class NodeEvent:
    event: str
    payload: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"type": "event", "event": self.event, "payload": self.payload}


Frame = Hello | Request | Response | NodeEvent


def _str(d: dict[str, Any], key: str) -> str:
    value = d[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def encode(frame: Frame) -> bytes:
    return json.dumps(frame.to_json(), separators=(",", ":")).encode() + b"\n"


def decode(line: bytes | str) -> Frame:
    """One frame from one line; anything malformed is a WireError (never a half-parsed frame)."""
    if len(line) > MAX_LINE:
        raise WireError("frame too long")
    try:
        d = json.loads(line)
    except ValueError as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise WireError("frame must be an object")
    kind = d.get("type")
    if kind == "hello":
        return Hello.from_json(d)
    if kind in ("req", "res", "event") and not isinstance(d.get("id", ""), str):
        raise WireError("id must be a string")
    if kind == "req":
        params = d.get("params") or {}
        if not isinstance(d.get("method"), str) or not isinstance(params, dict):
            raise WireError("bad request")
        return Request(id=d.get("id", ""), method=d["method"], params=params)
    if kind == "res":
        payload, error = d.get("payload"), d.get("error")
        if payload is not None and not isinstance(payload, dict):
            raise WireError("payload must be an object")
        if error is not None and not (
            isinstance(error, dict) and all(isinstance(v, str) for v in error.values())
        ):
            raise WireError("error must be {code, message}")
        return Response(id=d.get("id", ""), ok=d.get("ok") is True, payload=payload, error=error)
    if kind == "event":
        payload = d.get("payload") or {}
        if not isinstance(d.get("event"), str) or not isinstance(payload, dict):
            raise WireError("bad event")
        return NodeEvent(event=d["event"], payload=payload)
    raise WireError(f"unknown frame type {kind!r}")
