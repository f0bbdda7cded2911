"""exec-approvals.sock in OpenClaw's wire format (reference §4): the hardened server and a client."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import select
import shlex
import socket
import stat
import struct
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import statefs

MAX_FRAME_BYTES = 256_000  # the macOS app's readLineFromHandle(maxBytes:) cap
TTL_MS = 10_000  # |now - ts| beyond this is "expired request"
REQUEST_TIMEOUT_S = 15.0  # requestExecApprovalViaSocket's client timeout
EXEC_TIMEOUT_S = 20.0  # requestExecHostViaSocket's client timeout
SUN_PATH_MAX = 107
DECISIONS = ("allow-once", "allow-always", "deny")
OUTPUT_CAP = 200_000  # chars of stdout/stderr returned per exec

Decider = Callable[["PromptRequest"], Awaitable[str]]
"""Asks a human (the console's inbox): returns "allow-once" | "allow-always" | "deny"."""


class ApprovalSocketError(Exception):
    """The socket path is unusable (symlink, wrong type, too long)."""


class ApprovalSocketBusy(ApprovalSocketError):
    """Another live server (a second console, or OpenClaw's app) already answers on this path."""


@dataclass(frozen=True)
class PromptRequest:
    """One ask, from a `request` frame or from an `exec` frame whose policy needs a human."""

    id: str
    command: str
    cwd: str | None = None
    host: str | None = None
    security: str | None = None
    ask: str | None = None
    agent_id: str | None = None
    resolved_path: str | None = None
    session_key: str | None = None
    source: str = "socket"  # "socket" (request) | "socket-exec" (exec needing a prompt)
    peer_pid: int | None = None

    @classmethod
    def from_wire(cls, rid: str, body: Mapping[str, Any], peer_pid: int | None) -> PromptRequest:
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
            agent_id=opt("agentId"),
            resolved_path=opt("resolvedPath"),
            session_key=opt("sessionKey"),
            peer_pid=peer_pid,
        )


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

    @classmethod
    def from_json(cls, text: str) -> ExecHostRequest:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("requestJson is not an object")
        argv = data.get("command")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("command must be a list of strings")
        env = data.get("env")
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ValueError("env must map strings to strings")
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


ExecHandler = Callable[[ExecHostRequest, Decider, "PeerInfo"], Awaitable[ExecOutcome]]
"""Evaluates an authenticated exec request against this machine's policy, asks if needed, runs it."""


@dataclass(frozen=True)
class PeerInfo:
    pid: int
    uid: int
    gid: int


def sign(token: str, nonce: str, ts: int, request_json: str) -> str:
    """HMAC-SHA256(key=token, msg="nonce:ts:requestJson") as lowercase hex."""
    msg = f"{nonce}:{ts}:{request_json}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def _deny_frame(rid: str) -> dict[str, Any]:
    return {"type": "decision", "id": rid, "decision": "deny"}


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class RateLimit:
    """Token bucket per peer pid: `burst` frames at once, then `per_second`."""

    burst: int = 20
    per_second: float = 5.0
    _buckets: dict[int, _Bucket] = field(default_factory=dict)

    def allow(self, key: int, now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) > 4096:  # pids come and go; forget idle ones
                self._buckets = {k: b for k, b in self._buckets.items() if now - b.stamp < 60}
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.per_second)
        bucket.stamp = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True


class NonceCache:
    """Nonces seen within the TTL window; full cache fails closed rather than forgetting early."""

    def __init__(self, ttl_ms: int = TTL_MS, capacity: int = 65_536) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._ttl = 2 * ttl_ms / 1000  # a nonce is only valid within ±ttl, so 2×ttl covers every reuse
        self._capacity = capacity

    def add(self, nonce: str, now: float) -> bool:
        """Record `nonce`; False if it was already used (or the cache is full of live nonces)."""
        while self._seen:
            oldest, stamp = next(iter(self._seen.items()))
            if now - stamp <= self._ttl:
                break
            del self._seen[oldest]
        if nonce in self._seen or len(self._seen) >= self._capacity:
            return False
        self._seen[nonce] = now
        return True


def _peer_info(sock: socket.socket | None) -> PeerInfo | None:
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerInfo(pid=pid, uid=uid, gid=gid)


def check_socket_path(path: Path) -> None:
    """Refuse a path that is too long or holds anything but a socket (reference: symlink/dir/file)."""
    if len(os.fsencode(str(path))) > SUN_PATH_MAX:
        raise ApprovalSocketError(f"socket path too long (> {SUN_PATH_MAX} bytes): {path}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ApprovalSocketError(f"socket path invalid (symlink): {path}")
    if not stat.S_ISSOCK(st.st_mode):
        kind = "directory" if stat.S_ISDIR(st.st_mode) else "not a socket"
        raise ApprovalSocketError(f"socket path invalid ({kind}): {path}")


def socket_is_live(path: Path, timeout: float = 0.5) -> bool:
    """A connect probe: asyncio's unix server would silently unlink a live socket (pueue's stale check)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


class ApprovalSocketServer:
    """Serves `request` → `decision` and `exec` → `exec-res`, one JSON line per connection.

    Hardening beyond OpenClaw's app: a lifetime lock plus a connect probe so a live socket is never
    stolen, same-UID peers only, constant-time token and HMAC compares, a nonce replay cache, a frame
    cap, a per-peer rate limit and a cap on concurrent connections.
    """

    def __init__(
        self,
        path: str | Path,
        token: str,
        *,
        decider: Decider,
        exec_handler: ExecHandler | None = None,
        prompt_timeout: float = 300.0,
        rate_limit: RateLimit | None = None,
        max_connections: int = 64,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not token:
            raise ApprovalSocketError("approval socket token is empty")
        self.path = Path(path)
        self._token = token.encode()
        self._decider = decider
        self._exec_handler = exec_handler
        self._prompt_timeout = prompt_timeout
        self._rate = rate_limit or RateLimit()
        self._nonces = NonceCache()
        self._clock = clock
        self._slots = asyncio.Semaphore(max_connections)
        self._server: asyncio.Server | None = None
        self._lock_fd: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats: dict[str, int] = {"accepted": 0, "rejected": 0}

    async def start(self) -> None:
        """Claim the path (never from a live server), bind 0600 inside a 0700 dir, listen."""
        statefs.ensure_private_dir(self.path.parent)
        check_socket_path(self.path)
        lock_path = self.path.with_name(self.path.name + ".lock")
        statefs.refuse_symlink(lock_path)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ApprovalSocketBusy(f"another console already serves {self.path}") from None
        try:
            if os.path.lexists(self.path):
                if await asyncio.to_thread(socket_is_live, self.path):
                    raise ApprovalSocketBusy(f"a live server already answers on {self.path}")
                os.unlink(self.path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(self.path))
                os.chmod(self.path, 0o600)  # between bind and listen: nobody can connect yet
                sock.listen(16)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=MAX_FRAME_BYTES + 1)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    async def close(self) -> None:
        """Stop listening, cancel in-flight prompts (their peers get deny), remove the socket."""
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def __aenter__(self) -> ApprovalSocketServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._slots.locked():
                self.stats["rejected"] += 1
                return
            async with self._slots:
                await self._handle(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            await _discard_input(reader, writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
        writer.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
        await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_info(writer.get_extra_info("socket"))
        if peer is None or peer.uid != os.geteuid():
            self.stats["rejected"] += 1
            await self._send(writer, _deny_frame(str(uuid.uuid4())))
            return
        if not self._rate.allow(peer.pid, self._clock()):
            self.stats["rejected"] += 1
            await self._send(writer, {"type": "error", "code": "RATE_LIMITED", "message": "rate limited"})
            return
        line = await self._read_line(reader)
        if line is None:
            self.stats["rejected"] += 1
            await self._send(
                writer,
                {
                    "type": "error",
                    "code": "INVALID_REQUEST",
                    "message": f"frame exceeds {MAX_FRAME_BYTES} bytes",
                },
            )
            return
        try:
            frame = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            frame = None
        if not isinstance(frame, dict):
            self.stats["rejected"] += 1
            return
        kind = frame.get("type")
        if kind == "request":
            await self._on_request(frame, peer, writer)
        elif kind == "exec":
            await self._on_exec(frame, peer, writer)
        else:
            self.stats["rejected"] += 1

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes | None:
        """One line up to the cap; None when the peer sends more than the cap without a newline."""
        try:
            async with asyncio.timeout(5.0):
                return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial  # the peer half-closed without a trailing newline
        except asyncio.LimitOverrunError:
            return None
        except TimeoutError:
            return b""

    def _token_ok(self, given: object) -> bool:
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self._token)

    async def _on_request(self, frame: dict[str, Any], peer: PeerInfo, writer: asyncio.StreamWriter) -> None:
        rid = frame.get("id")
        rid = rid if isinstance(rid, str) and 0 < len(rid) <= 128 else str(uuid.uuid4())
        body = frame.get("request")
        if not self._token_ok(frame.get("token")) or not isinstance(body, dict) or not body.get("command"):
            self.stats["rejected"] += 1
            await self._send(writer, _deny_frame(rid))
            return
        self.stats["accepted"] += 1
        decision = await self._ask(PromptRequest.from_wire(rid, body, peer.pid), writer)
        await self._send(writer, {"type": "decision", "id": rid, "decision": decision})

    async def _ask(self, request: PromptRequest, writer: asyncio.StreamWriter) -> str:
        """The decider's answer; deny on timeout, on error, or when the peer goes away first."""
        ask = asyncio.ensure_future(self._decider(request))
        gone = asyncio.ensure_future(_wait_closing(writer))
        try:
            done, _ = await asyncio.wait(
                {ask, gone}, timeout=self._prompt_timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            gone.cancel()
            if not ask.done():
                ask.cancel()
        if ask in done and not ask.cancelled() and ask.exception() is None:
            decision = ask.result()
            if decision in DECISIONS:
                return decision
        return "deny"

    async def _on_exec(self, frame: dict[str, Any], peer: PeerInfo, writer: asyncio.StreamWriter) -> None:
        rid = frame.get("id")
        rid = rid if isinstance(rid, str) and 0 < len(rid) <= 128 else str(uuid.uuid4())

        async def reply(outcome: ExecOutcome) -> None:
            res: dict[str, Any] = {"type": "exec-res", "id": rid, "ok": outcome.ok}
            if outcome.ok:
                res["payload"] = outcome.payload or {}
            else:
                res["error"] = outcome.error or {}
            await self._send(writer, res)

        nonce, ts, mac, request_json = (frame.get(k) for k in ("nonce", "ts", "hmac", "requestJson"))
        if (
            not isinstance(nonce, str)
            or not 16 <= len(nonce) <= 128
            or any(c not in "0123456789abcdef" for c in nonce)
            or not isinstance(ts, int)
            or isinstance(ts, bool)
            or not isinstance(mac, str)
            or not isinstance(request_json, str)
        ):
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", "invalid auth", "hmac"))
            return
        now = self._clock()
        if abs(now * 1000 - ts) > TTL_MS:
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", "expired request", "ttl"))
            return
        expected = sign(self._token.decode(), nonce, ts, request_json)
        if not hmac.compare_digest(mac.lower().encode(), expected.encode()):
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", "invalid auth", "hmac"))
            return
        if not self._nonces.add(nonce, now):
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", "replayed request", "nonce"))
            return
        try:
            request = ExecHostRequest.from_json(request_json)
        except (ValueError, TypeError):
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", "invalid payload", "json"))
            return
        if not request.command:
            await reply(ExecOutcome.fail("INVALID_REQUEST", "command required", "json"))
            return
        if self._exec_handler is None:
            await reply(ExecOutcome.fail("UNAVAILABLE", "exec host unavailable", "companion-unavailable"))
            return
        self.stats["accepted"] += 1

        async def decide(prompt: PromptRequest) -> str:
            return await self._ask(prompt, writer)

        try:
            outcome = await self._exec_handler(request, decide, peer)
        except Exception as exc:
            outcome = ExecOutcome.fail("UNAVAILABLE", f"exec failed: {exc}", "runtime-error")
        await reply(outcome)


async def _discard_input(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close, then swallow what the peer still sends (briefly): closing a Unix socket with unread
    input makes the peer's read fail with ECONNRESET before it sees our reply."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(1.0):
            while await reader.read(65536):
                pass


async def _wait_closing(writer: asyncio.StreamWriter) -> None:
    """Returns once the peer has fully gone; its half-close after the request must not count.

    asyncio stops reading after EOF, so a later full close is only visible as POLLHUP on the fd.
    """
    sock = writer.get_extra_info("socket")
    poller = select.poll()
    if sock is not None:
        poller.register(sock.fileno(), select.POLLHUP | select.POLLERR)
    while not writer.transport.is_closing():
        if any(ev & (select.POLLHUP | select.POLLERR) for _, ev in poller.poll(0)):
            return
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------------------------- client


async def _roundtrip(
    path: str | Path, frame: Mapping[str, Any], accept: Callable[[dict[str, Any]], bool], timeout: float
) -> dict[str, Any] | None:
    """Connect, write one line, half-close, read lines until one is accepted; None on timeout/error."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME_BYTES * 8)
            try:
                writer.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                while True:
                    line = await reader.readline()
                    if not line:
                        return None
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(msg, dict) and accept(msg):
                        return msg
            finally:
                writer.close()
                with contextlib.suppress(Exception):
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
) -> str | None:
    """`requestExecApprovalViaSocket`: a prompt request; the decision, or None (no answer in time)."""
    if not path or not token:
        return None
    rid = request_id or str(uuid.uuid4())
    frame = {"type": "request", "token": token, "id": rid, "request": dict(request)}
    res = await _roundtrip(path, frame, lambda m: m.get("type") == "decision" and m.get("id") == rid, timeout)
    decision = res.get("decision") if res else None
    return decision if decision in DECISIONS else None


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


# ------------------------------------------------------------------------------ policy + run (exec frames)


@dataclass
class LocalExecHost:
    """Evaluates `exec` frames against this machine's config and approvals file, asks, then runs.

    What runs is exactly the evaluated argv (no shell re-parse), with a sanitised environment.
    """

    config_path: str | Path | None = None
    approvals_path: Path | None = None

    async def __call__(self, request: ExecHostRequest, decide: Decider, peer: PeerInfo) -> ExecOutcome:
        from engine.approvals_store import ApprovalsStore
        from engine.config import load_config
        from engine.decision import evaluate
        from engine.hostenv import sanitize_host_env
        from engine.results import ToolError

        command = shlex.join(request.command)
        agent_id = request.agent_id or "main"
        cwd = request.cwd or os.getcwd()
        try:
            env = sanitize_host_env(os.environ, request.env).env
        except ToolError as exc:
            return ExecOutcome.fail("INVALID_REQUEST", str(exc), "env")
        config = await asyncio.to_thread(load_config, self.config_path)
        store = ApprovalsStore(self.approvals_path)
        verdict = await asyncio.to_thread(
            evaluate,
            command,
            config=config,
            agent_id=agent_id,
            params={"host": "gateway"},
            store=store,
            cwd=cwd,
            env=env,
        )
        security = verdict.security
        if security is None:  # the policy itself refused (e.g. host=gateway not allowed here)
            return ExecOutcome.fail("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {verdict.reason}", "policy")
        if security == "deny":
            return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DISABLED: security=deny", "security=deny")
        if verdict.decision == "deny":
            # A decision sent by the client answers an ask; it never overrides a deny (unlike OpenClaw).
            return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: allowlist miss", "allowlist-miss")
        decision = request.approval_decision
        if verdict.decision == "ask" and decision is None:
            resolved = next((s.get("resolvedPath") for s in verdict.segments if s.get("resolvedPath")), None)
            decision = await decide(
                PromptRequest(
                    id=str(uuid.uuid4()),
                    command=command,
                    cwd=cwd,
                    host="gateway",
                    security=security,
                    ask=verdict.ask,
                    agent_id=agent_id,
                    resolved_path=resolved,
                    session_key=request.session_key,
                    source="socket-exec",
                    peer_pid=peer.pid,
                )
            )
            if decision == "deny":
                return ExecOutcome.fail("UNAVAILABLE", "SYSTEM_RUN_DENIED: user denied", "user-denied")
        if decision is not None and decision not in verdict.allowed_decisions:
            decision = "allow-once"  # e.g. allow-always under ask=always
        if decision == "allow-always" and verdict.allow_always_patterns:
            await asyncio.to_thread(store.persist_allow_always, agent_id, verdict.allow_always_patterns)
        timeout = (request.timeout_ms or 1_800_000) / 1000
        return ExecOutcome(
            ok=True, payload=await run_argv(list(request.command), cwd=cwd, env=env, timeout=timeout)
        )


async def run_argv(argv: list[str], *, cwd: str, env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    """Run argv (no shell) in its own process group; the exec-res payload shape."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return {
            "exitCode": None,
            "timedOut": False,
            "success": False,
            "stdout": "",
            "stderr": "",
            "error": str(exc),
        }
    timed_out = False
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        out, err = await proc.communicate()
    code = proc.returncode
    return {
        "exitCode": code,
        "timedOut": timed_out,
        "success": code == 0 and not timed_out,
        "stdout": out.decode("utf-8", "replace")[-OUTPUT_CAP:],
        "stderr": err.decode("utf-8", "replace")[-OUTPUT_CAP:],
    }
