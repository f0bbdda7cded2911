"""The JSON-lines protocol between the gateway and `exechost node serve --stdio`, one frame per line."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from engine import jsontext
from engine.principals import valid_name

# 2: numbered events a gateway acknowledges (`seq`, `events.ack`), `instance`, `runs.status`. A gateway
# of an older protocol would never acknowledge, and be sent every event again on each link: it is refused
# (its own check); this one still takes a protocol-1 node (no numbers, no runs.status: as before).
PROTOCOL = 2
PROTOCOLS_TAKEN = (1, 2)
MAX_LINE = 16 * 1024 * 1024  # one frame; a longer line is a broken or hostile peer
AGENT_REVOKE = "agent.revoke"  # gateway -> node: one of its agents was revoked (AgentRevoke)
CAPS = ("system.run", "system.which", "sandbox", "sessions.watch", "runs.status", AGENT_REVOKE)
# A hello is kept for its link's life (NodeLink.hello): each field is cut (or, for the id, refused) at a
# size, and caps to a count of short names, so a node's hello holds kilobytes, never its frame's 16 MiB.
HELLO_ID_CHARS = 128
# What a node id may be, by construction rather than by a list of bad cases: it is pinned to a node name in
# the gateway's state (node-keys.json), shown in status and the inbox, and matched in selection, so it is
# short clean text (a uuid4, the default, fits). Anything else is refused at read, never cut or cleaned:
# a cut or cleaned id would name another node.
NODE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:@+-]{{0,{HELLO_ID_CHARS - 1}}}")
NODE_ID_RULE = (
    f"1 to {HELLO_ID_CHARS} characters of letters, digits and . _ : @ + -, starting with a letter or digit"
)
HELLO_TEXT_CHARS = 256
HELLO_PATH_CHARS = 16 * 1024
HELLO_CAP_CHARS = 64
HELLO_CAPS = 64
ACK_EVENT = "events.ack"  # gateway -> node: every numbered event up to `upTo` was handled there


class WireError(ValueError):
    """A frame that is not what the protocol says. A request whose id was sound (`request_id`) is answered
    INVALID_REQUEST; any other bad line drops the link."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class HelloError(WireError):
    """A hello the gateway refuses by its content (a malformed node id, a missing field): the node spoke the
    protocol, and its own state (node.json) is what to fix."""


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
    # This node process, new each time it starts: a run in flight when a link dropped can be asked about
    # only of the process that received it, and event numbers (`seq`) count within one process.
    instance: str = ""
    # Where this node keeps its state and whose machine account it is (engine.commands.gatewaydirs.place):
    # a gateway of the same account on the same machine covers that state dir in its host views.
    state_dir: str = ""
    place: str = ""

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
            "instance": self.instance,
            "stateDir": self.state_dir,
            "place": self.place,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Hello:
        try:
            return cls(
                node_id=_node_id(d),
                display_name=_str(d, "displayName")[:HELLO_TEXT_CHARS],
                version=_str(d, "version")[:HELLO_TEXT_CHARS],
                platform=_str(d, "platform")[:HELLO_TEXT_CHARS],
                caps=_caps(d.get("caps")),
                path_env=str(d.get("pathEnv") or "")[:HELLO_PATH_CHARS],
                protocol=_int(d, "protocol"),
                mode="service" if d.get("mode") == "service" else "stdio",
                instance=str(d.get("instance") or "")[:128],
                state_dir=str(d.get("stateDir") or "")[:4096],
                place=str(d.get("place") or "")[:64],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HelloError(f"bad hello: {exc}") from None


@dataclass
class AgentRevoke:
    """`agent.revoke`'s params: the sending gateway's agent `agent` was revoked. The node ends every session
    and run of that gateway's agent (never another gateway's agent of the same name) and refuses later runs
    stamped with the revoked credential (`system.run`'s `credential`, `credential_stamp`); a new credential
    (the agent added again) runs. `revocation` names this revocation: the gateway keeps it until the node
    answered it (engine.nodes.revocations), and sends it again on every link until then."""

    agent: str
    revocation: str
    credential: str = ""  # credential_stamp of the revoked credential; "" when it had none
    # The credential was replaced (`agents rotate`), the agent stays: its old credential's later runs are
    # refused and its sandboxes' egress stops until a run enters again, but its sessions run on.
    rotated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "revocation": self.revocation,
            "credential": self.credential,
            "rotated": self.rotated,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AgentRevoke:
        agent, revocation, credential = d.get("agent"), d.get("revocation"), d.get("credential") or ""
        rotated = d.get("rotated", False)
        if not isinstance(rotated, bool):
            raise WireError("agent.revoke: bad rotated")
        if rotated and not credential:
            raise WireError("agent.revoke: a rotation names the credential it ends")
        if not valid_name(agent):
            raise WireError("agent.revoke: bad agent")
        if not isinstance(revocation, str) or not _STAMP.match(revocation):
            raise WireError("agent.revoke: bad revocation")
        if not isinstance(credential, str) or (credential and not _STAMP.match(credential)):
            raise WireError("agent.revoke: bad credential")
        assert isinstance(agent, str)
        return cls(agent, revocation, credential, rotated)


_STAMP = re.compile(r"^[0-9a-f]{8,64}$")


def credential_stamp(credential: str) -> str:
    """What a node is told of a credential (`principals.credential_id`, "" for none): a digest of its digest,
    enough to tell one credential from another and nothing a gateway would take."""
    if not credential:
        return ""
    return hashlib.sha256(b"exechost node credential\0" + credential.encode()).hexdigest()[:32]


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
    # An event the node keeps until the gateway acknowledges it (`events.ack` up to this number), and
    # sends again on the next link if it does not: a link can drop with it written but never delivered.
    seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "event", "event": self.event, "payload": self.payload}
        if self.seq is not None:
            out["seq"] = self.seq
        return out


Frame = Hello | Request | Response | NodeEvent


def _caps(value: Any) -> list[str]:
    """A hello's capabilities as kept for the link's life: names only (a cap is a short word), at most
    HELLO_CAPS of them. Anything else a node lists is no capability of ours and is not kept."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError("caps must be a list")
    kept: list[str] = []
    for cap in value:
        if isinstance(cap, str) and 0 < len(cap) <= HELLO_CAP_CHARS and cap not in kept:
            kept.append(cap)
            if len(kept) == HELLO_CAPS:
                break
    return kept


def node_id_problem(value: object) -> str | None:
    """Why `value` is not a node id (NODE_ID), or None when it is one. The value itself is never quoted: it
    may be megabytes, or hold what a terminal would act on."""
    if not isinstance(value, str):
        return f"a node id is a string, not {type(value).__name__}"
    if len(value) > HELLO_ID_CHARS:
        return f"a node id of {len(value)} characters is too long: it must be {NODE_ID_RULE}"
    if NODE_ID.fullmatch(value) is None:
        return f"a node id must be {NODE_ID_RULE}"
    return None


def is_node_id(value: object) -> bool:
    return node_id_problem(value) is None


def _node_id(d: dict[str, Any]) -> str:
    """The hello's `nodeId`, refused (never cut) unless it is a node id (NODE_ID)."""
    value = _str(d, "nodeId")
    problem = node_id_problem(value)
    if problem is not None:
        raise ValueError(f"nodeId refused: {problem}")
    return value


def _str(d: dict[str, Any], key: str) -> str:
    value = d[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def _int(d: dict[str, Any], key: str) -> int:
    value = d[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key} must be an integer")
    return value


def encode(frame: Frame) -> bytes:
    """One line; WireError when the frame holds what JSON cannot carry (NaN, Infinity, an object)."""
    try:
        return jsontext.dumps_wire(frame.to_json())
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(f"frame cannot be encoded: {exc}") from None


def decode(line: bytes | str) -> Frame:
    """One frame from one line; anything malformed is a WireError (never a half-parsed frame): the strict
    reader the control socket uses (engine.jsontext.loads_wire), then the frame's shape."""
    if len(line) > MAX_LINE:
        raise WireError("frame too long")
    try:
        d = jsontext.loads_wire(line)
    except ValueError as exc:
        raise WireError(str(exc), _salvage_id(line)) from None
    try:
        return _frame(d)
    except WireError as exc:
        rid = d.get("id") if isinstance(d, dict) and d.get("type") == "req" else None
        exc.request_id = rid if _sound_id(rid) else None
        raise


def _sound_id(rid: Any) -> bool:
    return isinstance(rid, str) and 0 < len(rid) <= 128 and jsontext.clean_text(rid) == rid


def _salvage_id(line: bytes | str) -> str | None:
    """A refused request's id, when the line parses leniently and the id itself is sound."""
    d = jsontext.peek(line)
    rid = d.get("id") if d is not None and d.get("type") == "req" else None
    return rid if _sound_id(rid) else None


def _frame(d: Any) -> Frame:
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
        seq = d.get("seq")
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < 1):
            raise WireError("seq must be a positive integer")
        return NodeEvent(event=d["event"], payload=payload, seq=seq)
    raise WireError(f"unknown frame type {kind!r}")
