"""exec-approvals.sock's wire format (reference §4): frame shapes, HMAC signing and the one-shot client."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import jsontext, ostext
from engine.approvals.decisions import DECISIONS
from engine.errors import InvalidInput
from engine.unixsock import PeerInfo

log = logging.getLogger("exechost.approvals.socket")

MAX_FRAME_BYTES = 256_000  # the macOS app's readLineFromHandle(maxBytes:) cap
TTL_MS = 10_000  # |now - ts| beyond this is "expired request"
REQUEST_TIMEOUT_S = 15.0  # requestExecApprovalViaSocket's client timeout
EXEC_TIMEOUT_S = 20.0  # requestExecHostViaSocket's client timeout

Decider = Callable[["PromptRequest"], Awaitable[str]]
"""Asks a human (the console's inbox): returns "allow-once" | "allow-always" | "deny"."""


@dataclass(frozen=True)
class PromptRequest:
    """One ask, from a `request` frame or from an `exec` frame whose policy needs a human."""

    id: str
    command: str
    cwd: str | None = None
    host: str | None = None
    security: str | None = None
    ask: str | None = None
    # Who asks: the socket's principal (principal.frame_agent) for a `request` frame, the run's agent for an
    # `exec` frame's ask; never read from a frame (its agentId may only repeat it, its sessionKey is moved
    # into that agent's namespace: principal.frame_key).
    agent_id: str | None = None
    resolved_path: str | None = None
    session_key: str | None = None
    source: str = "socket"  # "socket" (request) | "socket-exec" (exec needing a prompt)
    peer_pid: int | None = None
    allowed_decisions: tuple[str, ...] = DECISIONS  # what the asker accepts; nothing else is offered
    # The local decision's warnings (an `exec` frame's: what the tree would run); never read from a frame.
    warnings: tuple[str, ...] = ()
    # An `exec` frame's env overrides, keys and values: what the command runs with beyond the sanitised
    # base, shown wherever the ask is (issue 27 §3); never read from a `request` frame.
    env: tuple[tuple[str, str], ...] = ()
    # Which socket token the frame proved (principals.credential_id, a digest, never the token): a relayed
    # ask is filed under it, so replacing the token ends what it asked (the gateway's `socket>` proof).
    token_id: str = ""

    def __post_init__(self) -> None:
        # An `exec` frame's ask names the paths this host resolved (its cwd, the program, the warnings): one
        # that is not UTF-8 in its one exact, showable form (engine.ostext), as the gateway's record shows it,
        # so relaying the ask (approvals.relay) neither fails nor loses its bytes to U+FFFD.
        for name in ("command", "cwd", "resolved_path"):
            text = getattr(self, name)
            if text is not None:
                object.__setattr__(self, name, ostext.shown(text))
        object.__setattr__(self, "warnings", ostext.shown_json(self.warnings))
        object.__setattr__(self, "env", ostext.shown_json(self.env))

    @classmethod
    def from_wire(
        cls, rid: str, body: Mapping[str, Any], peer_pid: int | None, agent_id: str, session_key: str | None
    ) -> PromptRequest:
        """A `request` frame's ask, as `agent_id` in `session_key` (the socket's principal and its key,
        decided by the server: principal.py)."""

        def opt(key: str) -> str | None:
            value = body.get(key)
            return value if isinstance(value, str) else None

        return cls(
            id=rid,
            command=str(body.get("command", "")),
            cwd=opt("cwd"),
            host=opt("host"),
            security=opt("security"),
            ask=opt("ask"),
            agent_id=agent_id,
            resolved_path=opt("resolvedPath"),
            session_key=session_key,
            peer_pid=peer_pid,
            allowed_decisions=_allowed(body.get("allowedDecisions")),
        )


def _allowed(raw: Any) -> tuple[str, ...]:
    """The request's allowedDecisions, in our order; absent or unusable = all three."""
    if not isinstance(raw, list):
        return DECISIONS
    chosen = tuple(d for d in DECISIONS if d in raw)
    return chosen or ("deny",)


@dataclass(frozen=True)
class ExecHostRequest:
    """The decoded `requestJson` of an `exec` frame (OpenClaw's ExecHostRequest)."""

    command: tuple[str, ...]
    raw_command: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_ms: int | None = None
    agent_id: str | None = None
    session_key: str | None = None
    approval_decision: str | None = None
    # The fingerprint of what the human was asked about on the `request` frame whose yes this frame claims
    # (Fingerprint, below): set by the server from its ledger, never read from a frame.
    approved_content: str | None = None
    # Which socket token signed the frame (principal.socket_token_id, a digest), set by the server, never
    # read from a frame: the frame's ask carries it (PromptRequest.token_id), so a relayed ask is filed
    # under it and ends when the token is replaced, as a `request` frame's does (fresh round 18 b).
    token_id: str = ""

    @classmethod
    def from_json(cls, text: str) -> ExecHostRequest:
        try:
            data = jsontext.loads_wire(text)
        except ValueError as exc:
            raise InvalidInput(f"requestJson is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInput("requestJson is not an object")
        argv = data.get("command")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise InvalidInput("command must be a list of strings")
        env = data.get("env")
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise InvalidInput("env must map strings to strings")
        cwd = data.get("cwd")
        texts = [*argv, cwd if isinstance(cwd, str) else "", *(env or {}), *(env or {}).values()]
        if any("\x00" in text for text in texts):
            raise InvalidInput("command, cwd and env must not contain a NUL byte")
        timeout = data.get("timeoutMs")
        decision = data.get("approvalDecision")
        return cls(
            command=tuple(argv),
            raw_command=data["rawCommand"] if isinstance(data.get("rawCommand"), str) else None,
            cwd=data["cwd"] if isinstance(data.get("cwd"), str) else None,
            env=env,
            timeout_ms=int(timeout) if isinstance(timeout, int | float) and timeout > 0 else None,
            agent_id=data["agentId"] if isinstance(data.get("agentId"), str) else None,
            session_key=data["sessionKey"] if isinstance(data.get("sessionKey"), str) else None,
            approval_decision=decision if decision in ("allow-once", "allow-always") else None,
        )


@dataclass
class ExecOutcome:
    """`exec-res`: ok with a payload, or an error {code, message, reason}."""

    ok: bool
    payload: dict[str, Any] | None = None
    error: dict[str, str] | None = None

    @classmethod
    def fail(cls, code: str, message: str, reason: str | None = None) -> ExecOutcome:
        err = {"code": code, "message": message}
        if reason is not None:
            err["reason"] = reason
        return cls(ok=False, error=err)

    def to_frame(self, rid: str) -> dict[str, Any]:
        """The `exec-res` frame answering request `rid`."""
        res: dict[str, Any] = {"type": "exec-res", "id": rid, "ok": self.ok}
        if self.ok:
            res["payload"] = self.payload or {}
        else:
            res["error"] = self.error or {}
        return res


ExecHandler = Callable[[ExecHostRequest, Decider, PeerInfo], Awaitable[ExecOutcome]]
"""Evaluates an authenticated exec request against this machine's policy, asks if needed, runs it."""

Fingerprint = Callable[[str, str | None, str], Awaitable[str | None]]
"""(command, cwd, agent) -> a digest of what that command would run (an exec handler's `fingerprint`, as
LocalExecHost has): taken when a `request` frame is asked, so its yes counts only for those bytes."""


def sign(token: str, nonce: str, ts: int, request_json: str) -> str:
    """HMAC-SHA256(key=token, msg="nonce:ts:requestJson") as lowercase hex."""
    msg = f"{nonce}:{ts}:{request_json}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def encode_frame(frame: Mapping[str, Any]) -> bytes:
    """One compact JSON line, as both ends of the socket write it (engine.jsontext: what loads_wire reads)."""
    return jsontext.dumps_wire(dict(frame))


def exec_frame(
    token: str,
    request: Mapping[str, Any],
    *,
    ts: int | None = None,
    nonce: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """An `exec` frame exactly as requestExecHostViaSocket builds it."""
    request_json = json.dumps(dict(request), separators=(",", ":"))
    nonce = nonce or secrets.token_hex(16)
    ts = int(time.time() * 1000) if ts is None else ts
    return {
        "type": "exec",
        "id": request_id or str(uuid.uuid4()),
        "nonce": nonce,
        "ts": ts,
        "hmac": sign(token, nonce, ts, request_json),
        "requestJson": request_json,
    }


# ---------------------------------------------------------------------------------------------- client


# Why the listener that accepted this connection is not one to speak to (None when it is): judged before
# the frame (its token) is written.
PeerCheck = Callable[[asyncio.StreamWriter], str | None]


async def _roundtrip(
    path: str | Path,
    frame: Mapping[str, Any],
    accept: Callable[[dict[str, Any]], bool],
    timeout: float,
    peer: PeerCheck | None = None,
) -> dict[str, Any] | None:
    """Connect, check the listener (`peer`), write one line, half-close, read lines until one is accepted;
    None on timeout/error or a listener `peer` refuses."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME_BYTES * 8)
            try:
                why = peer(writer) if peer is not None else None
                if why is not None:
                    log.warning("approvals socket %s: not asked (%s)", path, why)
                    return None
                writer.write(encode_frame(frame))
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                while True:
                    line = await reader.readline()
                    if not line:
                        return None
                    try:
                        msg = jsontext.loads_wire(line)
                    except ValueError:
                        continue
                    if isinstance(msg, dict) and accept(msg):
                        return msg
            finally:
                writer.close()
                with contextlib.suppress(OSError):  # the peer may already have reset the connection
                    await writer.wait_closed()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        return None


async def request_decision(
    path: str | Path,
    token: str,
    request: Mapping[str, Any],
    *,
    timeout: float = REQUEST_TIMEOUT_S,
    request_id: str | None = None,
    peer: PeerCheck | None = None,
) -> str | None:
    """`requestExecApprovalViaSocket`: a prompt request; the decision, or None (no answer in time, or a
    listener `peer` refuses: it never gets the token)."""
    if not path or not token:
        return None
    rid = request_id or str(uuid.uuid4())
    frame = {"type": "request", "token": token, "id": rid, "request": dict(request)}
    res = await _roundtrip(
        path, frame, lambda m: m.get("type") == "decision" and m.get("id") == rid, timeout, peer
    )
    decision = res.get("decision") if res else None
    return decision if decision in DECISIONS else None


async def request_exec(
    path: str | Path,
    token: str,
    request: Mapping[str, Any],
    *,
    timeout: float = EXEC_TIMEOUT_S,
    frame: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """`requestExecHostViaSocket`: the `exec-res` frame ({ok, payload} | {ok:false, error}) or None."""
    if not path or not token:
        return None
    frame = dict(frame) if frame is not None else exec_frame(token, request)

    def accept(msg: dict[str, Any]) -> bool:
        if msg.get("type") != "exec-res":
            return False
        return (
            isinstance(msg.get("payload"), dict)
            if msg.get("ok") is True
            else isinstance(msg.get("error"), dict)
        )

    return await _roundtrip(path, frame, accept, timeout)
