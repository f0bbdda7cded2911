"""exec-approvals.sock's hardened server (hosted by the console); re-exports approval_wire, approval_exec."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import os
import select
import shlex
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import jsontext, redact, statefs
from engine.approvals.socket.principal import REASON as PRINCIPAL
from engine.approvals.socket.principal import NotThisPrincipal, frame_agent, frame_key, socket_token_id
from engine.approvals.socket.wire import EXEC_TIMEOUT_S as EXEC_TIMEOUT_S
from engine.approvals.socket.wire import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from engine.approvals.socket.wire import REQUEST_TIMEOUT_S as REQUEST_TIMEOUT_S
from engine.approvals.socket.wire import TTL_MS as TTL_MS
from engine.approvals.socket.wire import Decider as Decider
from engine.approvals.socket.wire import ExecHandler as ExecHandler
from engine.approvals.socket.wire import ExecHostRequest as ExecHostRequest
from engine.approvals.socket.wire import ExecOutcome as ExecOutcome
from engine.approvals.socket.wire import Fingerprint, encode_frame
from engine.approvals.socket.wire import PromptRequest as PromptRequest
from engine.approvals.socket.wire import exec_frame as exec_frame
from engine.approvals.socket.wire import request_decision as request_decision
from engine.approvals.socket.wire import request_exec as request_exec
from engine.approvals.socket.wire import sign as sign
from engine.commands.rawcommand import raw_command_matches
from engine.config.loader import load_config
from engine.errors import ExecHostError, InvalidInput
from engine.unixsock import PeerInfo as PeerInfo
from engine.unixsock import peer_info, socket_path_problem
from engine.unixsock import socket_is_live as socket_is_live

log = logging.getLogger("exechost.approvals")

GRANT_TTL_S = 300.0  # a human decision on a `request` stays usable by the matching `exec` this long
GRANTS_MAX = 1024


class ApprovalSocketError(ExecHostError):
    """The socket path is unusable (symlink, wrong type, too long)."""


class ApprovalSocketBusy(ApprovalSocketError):
    """Another live server (a second console, or OpenClaw's app) already answers on this path."""


def _deny_frame(rid: str) -> dict[str, Any]:
    return {"type": "decision", "id": rid, "decision": "deny"}


def _error_frame(message: str, code: str = "INVALID_REQUEST") -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}


def _invalid_reply(line: bytes, why: str) -> dict[str, Any]:
    """The answer to a line the strict reader refused, in the shape its sender waits for when the line
    parses leniently: `exec-res` for an exec frame, a deny `decision` for a request frame (both naming
    INVALID_REQUEST), else a bare error frame."""
    loose = jsontext.peek(line)
    kind = loose.get("type") if loose is not None else None
    if loose is None or kind not in ("exec", "request"):
        return _error_frame(why)
    rid = _frame_id(loose)
    if jsontext.clean_text(rid) != rid:
        rid = str(uuid.uuid4())
    if kind == "exec":
        return ExecOutcome.fail("INVALID_REQUEST", why, "json").to_frame(rid)
    return {**_deny_frame(rid), "error": {"code": "INVALID_REQUEST", "message": why}}


def _frame_id(frame: dict[str, Any]) -> str:
    """The frame's id when it is a sane string, else a fresh one (replies always carry an id)."""
    rid = frame.get("id")
    return rid if isinstance(rid, str) and 0 < len(rid) <= 128 else str(uuid.uuid4())


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


def check_socket_path(path: Path) -> None:
    """Refuse a path that is too long or holds anything but a socket (reference: symlink/dir/file)."""
    problem = socket_path_problem(path)
    if problem is not None:
        raise ApprovalSocketError(f"socket path {problem}: {path}")


class ApprovalSocketServer:
    """Serves `request` → `decision` and `exec` → `exec-res`, one JSON line per connection.

    Hardening beyond OpenClaw's app: a lifetime lock plus a connect probe so a live socket is never
    stolen, same-UID peers only, constant-time token and HMAC compares, a nonce replay cache, a frame
    cap, a per-peer rate limit and a cap on concurrent connections. Every frame acts as the socket's
    principal (principal.frame_agent, from the config at `config_path` as it is at that frame): the
    human is shown that agent and a command runs as it; a frame naming another agent is refused.
    """

    def __init__(
        self,
        path: str | Path,
        token: str | Callable[[], str],
        *,
        decider: Decider,
        exec_handler: ExecHandler | None = None,
        prompt_timeout: float = 300.0,
        rate_limit: RateLimit | None = None,
        max_connections: int = 64,
        clock: Callable[[], float] = time.time,
        config_path: str | Path | None = None,
    ) -> None:
        # A callable is the token as exec-approvals.json holds it now: a rotated token takes effect at the
        # next frame, never at the next console start (issue 27 §1, like the gateway's tokens).
        self._token_of: Callable[[], str] = token if callable(token) else (lambda: token)
        first = self._token_of()
        if not first:
            raise ApprovalSocketError("approval socket token is empty")
        redact.register(first)
        self.path = Path(path)
        self._decider = decider
        self._exec_handler = exec_handler
        self._prompt_timeout = prompt_timeout
        self._rate = rate_limit or RateLimit()
        self._nonces = NonceCache()
        self._clock = clock
        self._config_path = config_path
        self._slots = asyncio.Semaphore(max_connections)
        self._server: asyncio.Server | None = None
        self._lock_fd: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats: dict[str, int] = {"accepted": 0, "rejected": 0}
        # Decisions a human made on `request` frames: id -> (decision, command, cwd, agent, expiry, what the
        # command would run when the human was asked). An `exec` frame's approvalDecision counts only when
        # it names one of these for the same command, cwd and agent (the socket's principal then and now: a
        # config change in between voids the yes), and its run only for those bytes (the exec handler
        # compares them with its own decision's: LocalExecHost).
        self._granted: dict[str, tuple[str, str, str | None, str, float, str | None]] = {}

    async def start(self) -> None:
        """Claim the path (never from a live server), bind 0600 inside a 0700 dir, listen."""
        statefs.ensure_private_dir(self.path.parent)
        check_socket_path(self.path)
        fd = statefs.try_lock(self.path)
        if fd is None:
            raise ApprovalSocketBusy(f"another console already serves {self.path}")
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
        except Exception as exc:
            # A bug, not the peer's fault: logged once, and the peer is told rather than just dropped.
            log.exception("exec-approvals.sock: a frame failed")
            with contextlib.suppress(Exception):
                await self._send(writer, _error_frame(f"internal error: {type(exc).__name__}", "INTERNAL"))
        finally:
            if task is not None:
                self._tasks.discard(task)
            await _discard_input(reader, writer)
            writer.close()
            with contextlib.suppress(OSError):  # the peer may already have reset the connection
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
        writer.write(encode_frame(frame))
        await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_info(writer.get_extra_info("socket"))
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
            frame = jsontext.loads_wire(line, max_bytes=MAX_FRAME_BYTES)
        except ValueError as exc:
            self.stats["rejected"] += 1
            await self._send(writer, _invalid_reply(line, str(exc) if line.strip() else "no frame"))
            return
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "request":
            handler = self._on_request(frame, peer, writer)
        elif kind == "exec":
            handler = self._on_exec(frame, peer, writer)
        else:
            self.stats["rejected"] += 1
            await self._send(writer, _error_frame("frame must be an object of type request or exec"))
            return
        # What waits (for a human, up to the prompt timeout) is what the handler took from the frame, never
        # the frame: ~250 KB of `{}`s the socket never reads is ~6 MB of Python (fresh round 17 b's class)
        del frame, line
        await handler

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

    async def _token(self) -> str:
        """The token now ("" when the file cannot say: such a token matches nothing)."""
        try:
            token = await asyncio.to_thread(self._token_of)
        except (ExecHostError, OSError):
            return ""
        if token:
            redact.register(token)
        return token

    async def _token_ok(self, given: object) -> bool:
        token = await self._token()
        return bool(token) and isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())

    async def _principal(self, named: object, key: object, kind: str) -> tuple[str, str | None]:
        """The agent this frame acts as and its session key (principal.py, the one rule), under the config
        as it is now; NotThisPrincipal when it names another agent, or the socket proves nobody (or the
        config cannot say who)."""
        try:
            config = await asyncio.to_thread(load_config, self._config_path)
        except (ExecHostError, OSError) as exc:
            raise NotThisPrincipal(
                f"the config is unreadable, so the socket proves no agent: {exc}"
            ) from None
        agent = frame_agent(config, named, kind)
        return agent, frame_key(agent, key, kind)

    async def _on_request(self, frame: dict[str, Any], peer: PeerInfo, writer: asyncio.StreamWriter) -> None:
        rid = _frame_id(frame)
        body = frame.get("request")
        if (
            not await self._token_ok(frame.get("token"))
            or not isinstance(body, dict)
            or not body.get("command")
        ):
            self.stats["rejected"] += 1
            await self._send(writer, _deny_frame(rid))
            return
        try:
            agent, key = await self._principal(body.get("agentId"), body.get("sessionKey"), "request")
        except NotThisPrincipal as exc:
            # Refused before any human sees it: a frame never shows a human, nor saves for, another agent.
            self.stats["rejected"] += 1
            error = {"code": "INVALID_REQUEST", "reason": PRINCIPAL, "message": str(exc)}
            await self._send(writer, {**_deny_frame(rid), "error": error})
            return
        self.stats["accepted"] += 1
        prompt = PromptRequest.from_wire(rid, body, peer.pid, agent, key)
        prompt = dataclasses.replace(prompt, token_id=socket_token_id(str(frame.get("token"))))
        del frame, body  # the prompt waits for the human, not the frame it came in (_handle)
        seen = await self._fingerprint(prompt.command, prompt.cwd, agent)  # before the human looks
        decision = await self._ask(prompt, writer)
        if decision != "deny":
            self._grant(rid, decision, prompt.command, prompt.cwd, agent, seen)
        await self._send(writer, {"type": "decision", "id": rid, "decision": decision})

    async def _fingerprint(self, command: str, cwd: str | None, agent: str) -> str | None:
        """What `command` would run, per the exec handler (its `fingerprint`), or None: a yes recorded
        with None is honoured by no handler that binds content."""
        fingerprint: Fingerprint | None = getattr(self._exec_handler, "fingerprint", None)
        if fingerprint is None:
            return None
        try:
            return await fingerprint(command, cwd, agent)
        except Exception:
            log.exception("exec-approvals.sock: a request's content could not be read")
            return None

    def _grant(
        self, rid: str, decision: str, command: str, cwd: str | None, agent: str, seen: str | None
    ) -> None:
        now = self._clock()
        for key in [k for k, v in self._granted.items() if v[4] < now]:
            del self._granted[key]
        if len(self._granted) >= GRANTS_MAX:
            self._granted.pop(next(iter(self._granted)))
        self._granted[rid] = (decision, command, cwd, agent, now + GRANT_TTL_S, seen)

    def _vetted(self, rid: str, request: ExecHostRequest) -> ExecHostRequest:
        """The request with its approvalDecision kept only if a human made that decision for this id and
        this command (consumed once); otherwise dropped, so the policy asks a human itself."""
        claimed = request.approval_decision
        if claimed is None:
            return request
        grant = self._granted.pop(rid, None)
        command = request.raw_command or shlex.join(request.command)
        if (
            grant is not None
            and grant[4] >= self._clock()
            and grant[1] in (command, shlex.join(request.command))
            # The directory the human was shown, exactly: none shown is the host's default, never any.
            and grant[2] == request.cwd
            and grant[3] == request.agent_id
            and (grant[0] == claimed or (grant[0] == "allow-always" and claimed == "allow-once"))
        ):
            # The yes counts for this one run. What lasts of it was kept where the human answered: the
            # gateway's relay saved the grant with its limits (or its patterns), and an OpenClaw client
            # keeps its own; a second store here would make a one-use (or session, or 10-minute) grant a
            # permanent entry (fresh round 18 b).
            return dataclasses.replace(request, approval_decision="allow-once", approved_content=grant[5])
        return dataclasses.replace(request, approval_decision=None)

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
            if decision in request.allowed_decisions:
                return decision
            if decision == "allow-always" and "allow-once" in request.allowed_decisions:
                return "allow-once"  # the asker accepts only once: never widen it to always
        return "deny"

    async def _on_exec(self, frame: dict[str, Any], peer: PeerInfo, writer: asyncio.StreamWriter) -> None:
        rid = _frame_id(frame)

        async def reply(outcome: ExecOutcome) -> None:
            await self._send(writer, outcome.to_frame(rid))

        nonce, ts, mac, request_json = (frame.get(k) for k in ("nonce", "ts", "hmac", "requestJson"))
        del frame  # its other fields are not held while the command runs (_handle)
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
        token = await self._token()
        expected = sign(token, nonce, ts, request_json)
        if not token or not hmac.compare_digest(mac.lower().encode(), expected.encode()):
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
        if not raw_command_matches(request.command, request.raw_command):
            # The text a human approved (a `request` frame shows rawCommand) must be the argv that runs.
            self.stats["rejected"] += 1
            await reply(
                ExecOutcome.fail(
                    "INVALID_REQUEST", "rawCommand does not match command", "raw-command-mismatch"
                )
            )
            return
        if self._exec_handler is None:
            await reply(ExecOutcome.fail("UNAVAILABLE", "exec host unavailable", "companion-unavailable"))
            return
        try:
            agent, key = await self._principal(request.agent_id, request.session_key, "exec")
        except NotThisPrincipal as exc:
            self.stats["rejected"] += 1
            await reply(ExecOutcome.fail("INVALID_REQUEST", str(exc), PRINCIPAL))
            return
        self.stats["accepted"] += 1

        async def decide(prompt: PromptRequest) -> str:
            return await self._ask(prompt, writer)

        # The token that signed it, by its id: its ask is filed under it (PromptRequest.token_id).
        proved = socket_token_id(token)
        request = self._vetted(
            rid, dataclasses.replace(request, agent_id=agent, session_key=key, token_id=proved)
        )
        try:
            outcome = await self._exec_handler(request, decide, peer)
        except InvalidInput as exc:  # the request's own fault (an agentId that is no id): said as such
            outcome = ExecOutcome.fail("INVALID_REQUEST", str(exc), "json")
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
