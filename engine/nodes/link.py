"""The gateway's link to one node: one asyncssh connection, `exechost node serve --stdio` on one channel,
JSON-lines requests with ids (many in flight), host keys always verified, reconnect with backoff."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import itertools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine import jsontext
from engine.config import nodekeys
from engine.config.model import NodeConfig
from engine.display import visible
from engine.lazymod import lazy
from engine.nodes.dial import (
    host_key_refusal,
    import_identity,
    judged_identity,
    judged_known_hosts,
    no_hello,
    open_agent,
    open_jumps,
    refuse_ssh_config_proxy,
    remote_command,
    why,
)
from engine.nodes.errors import NodeError as NodeError  # where every caller of a link takes it from
from engine.nodes.gateway_key import CAP as IDENTIFY_CAP
from engine.nodes.gateway_key import GatewayKey
from engine.nodes.linereader import LineReader
from engine.nodes.wire import (
    ACK_EVENT,
    MAX_LINE,
    PROTOCOL,
    PROTOCOLS_TAKEN,
    Hello,
    HelloError,
    NodeEvent,
    Request,
    Response,
    WireError,
    decode,
    encode,
)

if TYPE_CHECKING:
    import asyncssh
else:  # ~0.1 s of the gateway's start, for a library only a configured node needs
    asyncssh = lazy("asyncssh")

log = logging.getLogger("exechost.nodes")

_PRINCIPAL_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@-]")  # a request id stays clean text, `/` its one separator

CONNECT_TIMEOUT_SEC = 15.0
KEEPALIVE_SEC = 10
BACKOFF_MAX_SEC = 30.0

EventHandler = Callable[["NodeLink", NodeEvent], None]
# A node's own request (an approval relay), called as it is read: a plain function that takes what it needs
# of the frame, typed and cut, and returns what to await for the payload (which raises NodeError for an
# error response). Nothing that waits holds the decoded frame: a node's ask may wait for minutes.
RequestHandler = Callable[["NodeLink", Request], Awaitable[dict[str, Any]]]
HelloCheck = Callable[["NodeLink", Hello], None]  # raises NodeError to refuse the node
Connected = Callable[["NodeLink"], None]  # a link is through (first or again): settle what the last left


class NodeLink:
    """State: down | connecting | connected; `call` connects on first use."""

    def __init__(
        self,
        cfg: NodeConfig,
        *,
        on_event: EventHandler | None = None,
        on_request: RequestHandler | None = None,
        on_hello: HelloCheck | None = None,
        on_connected: Connected | None = None,
        gateway_key: GatewayKey | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_SEC,
        reconnect: bool = True,
    ) -> None:
        self.cfg = cfg
        self.on_event = on_event
        self.on_request = on_request
        self.on_hello = on_hello  # may refuse a node by its hello (raises NodeError) before it is connected
        self.on_connected = on_connected
        self.gateway_key = gateway_key  # proved to nodes that ask, so each files this gateway's work apart
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect
        self.state = "down"
        self.last_error: str | None = None
        self.rtt_ms: float | None = None
        self.hello: Hello | None = None
        self.connected_at_ms: int | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._proc: asyncssh.SSHClientProcess[bytes] | None = None
        self._jumps: list[asyncssh.SSHClientConnection] = []  # proxyJump hops, closed with the link
        self._pending: dict[str, asyncio.Future[Response]] = {}
        self._methods: dict[str, str] = {}  # request id -> method, for status: what a link is waiting on
        self._ids = itertools.count(1)
        self._connect_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reconnector: asyncio.Task[None] | None = None
        self._closed = False
        # (node instance, the highest event number handled from it): kept across links, so an event the
        # node sends again on a new link (it never heard our ack) is acknowledged, not handled twice.
        self._handled: tuple[str, int] = ("", 0)
        self._acking: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.cfg.name

    def status(self) -> dict[str, Any]:
        h = self.hello
        return {
            "name": self.cfg.name,
            "host": self.cfg.host,
            "port": self.cfg.port,  # None: from ~/.ssh/config
            "state": self.state,
            "lastError": self.last_error,
            "rttMs": None if self.rtt_ms is None else round(self.rtt_ms, 2),
            "nodeId": h.node_id if h else None,
            "displayName": self.cfg.display_name or (h.display_name if h else None),
            "version": h.version if h else None,
            "platform": h.platform if h else None,
            "caps": list(h.caps) if h else [],
            "mode": h.mode if h else None,
            "connectedAtMs": self.connected_at_ms,
            "inFlight": len(self._pending),
            "calls": dict(collections.Counter(self._methods.values())),
        }

    # -- connecting

    async def ensure(self) -> None:
        if self._closed:
            raise NodeError(f"node {self.name}: the link is closed")
        if self.state == "connected":
            return
        async with self._connect_lock:
            if self.state == "connected":
                return
            self.state = "connecting"
            try:
                await self._connect()
            except NodeError as exc:
                self._fail(str(exc))
                raise
            except (OSError, asyncssh.Error, TimeoutError, WireError) as exc:
                where = f"{self.cfg.host}:{self.cfg.port or 22}"
                text = f"node {self.name}: cannot connect to {where}: {why(exc)}"
                self._fail(text)
                raise NodeError(text) from None

    def _fail(self, text: str) -> None:
        self.state = "down"
        self.last_error = text
        self._teardown()

    async def _connect(self) -> None:
        cfg = self.cfg
        # judged, read once (in a thread), parsed on the loop's thread (asyncssh's lazy import is not
        # thread-safe): these bytes are what the connection checks, never the path again
        kh = asyncssh.import_known_hosts(await asyncio.to_thread(judged_known_hosts, cfg))
        problem = nodekeys.missing(cfg)
        if problem is not None:
            raise NodeError(problem)
        # Host, port and user may come from ~/.ssh/config (asyncssh reads it); the login credentials never
        # do: only the key and agent the node's table names (engine.config.nodekeys), the ones the host
        # view hides. No default key, no config IdentityFile or IdentityAgent, no PKCS#11, no agent
        # forwarding; no ProxyJump or ProxyCommand from the ssh config (a hop would log in with ssh's
        # default keys): hops are proxyJump's, with the node's credentials.
        options: dict[str, Any] = {
            "known_hosts": kh,  # never None: host keys are always checked
            "keepalive_interval": KEEPALIVE_SEC,
            "keepalive_count_max": 3,
            "agent_path": None,
            "pkcs11_provider": None,
            "agent_forwarding": False,
            "tunnel": None,
            "proxy_command": None,
        }
        if cfg.port:
            options["port"] = cfg.port
        if cfg.user:
            options["username"] = cfg.user
        await refuse_ssh_config_proxy(cfg)
        agent = await open_agent(cfg)
        try:
            keys: list[Any] = list(await agent.get_keys()) if agent is not None else []
            if cfg.identity_file:
                # judged, read once (in a thread), parsed on the loop's thread like known_hosts above:
                # asyncssh gets the key, never the path (engine.nodes.dial.judged_identity)
                data = await asyncio.to_thread(judged_identity, cfg)
                if data is not None:
                    keys.append(import_identity(cfg, data))
            if not keys:
                raise NodeError(f"node {self.name}: the ssh-agent at {nodekeys.agent_path(cfg)} holds no key")
            options["client_keys"] = keys
            if cfg.proxy_jump:
                # Each hop is its own connection with the node's known_hosts and credentials: asyncssh's
                # string tunnel would check the jump host against the default file and log in with the
                # default keys instead.
                options["tunnel"] = await open_jumps(
                    cfg, {k: v for k, v in options.items() if k != "port"}, self.connect_timeout, self._jumps
                )
            try:
                self._conn = await asyncio.wait_for(
                    asyncssh.connect(cfg.host, **options), self.connect_timeout
                )
            except asyncssh.HostKeyNotVerifiable:
                raise NodeError(host_key_refusal(cfg), "HOST_KEY_REFUSED") from None
        finally:
            if agent is not None:
                agent.close()  # the keys signed what they had to: logged in, or failed
                await agent.wait_closed()
        command = remote_command(cfg)
        started = time.monotonic()
        self._proc = await self._conn.create_process(command, encoding=None)
        reader = LineReader(self._proc.stdout)
        line = await asyncio.wait_for(reader.readline(), self.connect_timeout)
        if not line:
            raise NodeError(await no_hello(cfg, self._proc, command))
        try:
            frame = decode(line)
        except HelloError as exc:  # nothing of it is kept: the link is refused before it is connected
            raise NodeError(
                f"node {self.name}: its hello was refused ({exc}); nothing was run. Fix or remove the "
                f"nodeId in node.json in the node's state dir",
                "INVALID_REQUEST",
            ) from None
        except WireError as exc:
            raise NodeError(
                f"node {self.name}: `{command}` did not speak the node protocol ({exc})"
            ) from None
        if not isinstance(frame, Hello):
            raise NodeError(f"node {self.name}: expected a hello from `{command}`")
        if frame.protocol not in PROTOCOLS_TAKEN:
            raise NodeError(
                f"node {self.name}: exechost {frame.version} there speaks node protocol {frame.protocol}, "
                f"this gateway speaks {PROTOCOL}: install the same exechost version on the node"
            )
        if self.on_hello is not None:
            self.on_hello(self, frame)
        self.hello = frame
        if not frame.instance or frame.instance != self._handled[0]:
            self._handled = (frame.instance, 0)  # a new node process counts its events from 1 again
        self._spawn(self._read_loop(self._proc, reader))
        self._spawn(self._drain_stderr(self._proc))
        if self.gateway_key is not None and IDENTIFY_CAP in frame.caps:
            await self._identify(frame.node_id)  # before anything else may use the link
        self.rtt_ms = (time.monotonic() - started) * 1000
        self.state = "connected"
        self.last_error = None
        self.connected_at_ms = int(time.time() * 1000)
        if self.on_connected is not None:
            try:
                self.on_connected(self)
            except Exception:
                log.exception("node %s: connected handler failed", self.name)

    async def _identify(self, node_id: str) -> None:
        """Prove this gateway's key on the node's fresh challenge: the node files this link's sessions under
        the key's fingerprint, apart from every other gateway's (engine.nodes.gateway_key)."""
        assert self.gateway_key is not None
        challenge = await self._early_call("link.challenge", {})
        nonce = (challenge.payload or {}).get("nonce") if challenge.ok else None
        if not isinstance(nonce, str):
            raise NodeError(f"node {self.name}: no link challenge ({challenge.error})")
        answer = await self._early_call("link.identify", self.gateway_key.proof(node_id, nonce))
        if not answer.ok:
            raise NodeError(f"node {self.name}: refused this gateway's key ({answer.error})")

    async def _early_call(self, method: str, params: dict[str, Any]) -> Response:
        """A request while the link is still coming up (`call` would wait for it to be up)."""
        proc = self._proc
        if proc is None:
            raise NodeError(f"node {self.name}: link lost while connecting")
        rid = f"link-{next(self._ids)}"
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            async with self._write_lock:
                proc.stdin.write(encode(Request(rid, method, params)))
                await proc.stdin.drain()
            return await asyncio.wait_for(asyncio.shield(future), self.connect_timeout)
        finally:
            self._pending.pop(rid, None)

    # -- traffic

    async def call(
        self, method: str, params: dict[str, Any], timeout: float | None = None, principal: str | None = None
    ) -> Response:
        """One request; its response (ok or error). Raises NodeError when the link fails under it. The
        principal it is for (an agent) is named in its id: the node keeps each one's budget of requests it
        cannot read apart (runner.node.budget), so one agent's can never close the link for all."""
        await self.ensure()
        rid = str(next(self._ids))
        if principal:
            rid = f"{_PRINCIPAL_UNSAFE.sub('_', principal)[:64]}/{rid}"
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self._methods[rid] = method
        try:
            await self._send(self._admitted(encode(Request(rid, method, params)), method))
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except WireError as exc:
            raise NodeError(f"node {self.name}: {method} not sent: {exc}", "INVALID_REQUEST") from None
        except TimeoutError:
            raise NodeError(f"node {self.name}: no answer to {method} within {timeout:.0f}s") from None
        finally:
            self._pending.pop(rid, None)
            self._methods.pop(rid, None)

    def _admitted(self, data: bytes, method: str) -> bytes:
        """The request, once the node's own reader would take it (depth, int64, …): one it refuses is
        answered INVALID_REQUEST and counted against this link, which everyone's runs share, so a caller's
        value past those limits (params nested one level deeper here than in its own frame) fails here."""
        try:
            jsontext.loads_wire(data, max_bytes=MAX_LINE)
        except ValueError as exc:
            raise WireError(f"the node would refuse it ({exc})") from None
        return data

    async def ping(self) -> float:
        started = time.monotonic()
        res = await self.call("ping", {}, timeout=10)
        if not res.ok:
            raise NodeError(f"node {self.name}: ping failed: {res.error}")
        self.rtt_ms = (time.monotonic() - started) * 1000
        return self.rtt_ms

    async def _send(self, data: bytes) -> None:
        proc = self._proc
        if proc is None or self.state != "connected":
            raise NodeError(f"node {self.name}: not connected ({self.last_error or 'link down'})")
        async with self._write_lock:
            try:
                proc.stdin.write(data)
                await proc.stdin.drain()
            except (OSError, asyncssh.Error, BrokenPipeError) as exc:
                raise NodeError(f"node {self.name}: link lost while sending: {why(exc)}") from None

    async def _read_loop(self, proc: asyncssh.SSHClientProcess[bytes], reader: LineReader) -> None:
        reason = "the node closed the link"
        try:
            while self._take(await reader.readline()):
                pass  # no line nor frame stays alive in this loop while it waits for the next
        except WireError as exc:
            reason = f"protocol error: {exc}"
        except (OSError, asyncssh.Error) as exc:
            reason = why(exc)
        except asyncio.CancelledError:
            reason = "link closed"
            raise
        finally:
            if self._proc is proc:
                self._drop(reason)

    def _take(self, line: bytes) -> bool:
        """One line read: handed on by its kind. False at the end of the stream."""
        if not line:
            return False
        frame = decode(line)
        if isinstance(frame, Response):
            future = self._pending.get(frame.id)
            if future is not None and not future.done():
                future.set_result(frame)
        elif isinstance(frame, NodeEvent):
            self._take_event(frame)
        elif isinstance(frame, Request):
            self._take_request(frame)
        return True

    def _take_request(self, req: Request) -> None:
        """The handler reads the request now; only what it returns, and the id, wait for the answer."""
        try:
            if self.on_request is None:
                raise NodeError("this gateway takes no requests from nodes", "UNAVAILABLE")
            payload = self.on_request(self, req)
        except Exception as exc:
            payload = _raising(exc)
        self._spawn(self._answer(req.id, req.method, payload))

    def _take_event(self, frame: NodeEvent) -> None:
        """Hand an event to the hub; a numbered one once only, and acknowledged once handled (an event
        whose handler failed is acknowledged too: sent again, it would fail again)."""
        instance, handled = self._handled
        if frame.seq is not None and frame.seq <= handled:
            self._ack_soon()  # sent again: the node did not hear our ack before its link dropped
            return
        if self.on_event is not None:
            try:
                self.on_event(self, frame)
            except Exception:
                log.exception("node %s: event handler failed", self.name)
        if frame.seq is not None:
            self._handled = (instance, frame.seq)
            self._ack_soon()

    def _ack_soon(self) -> None:
        """One ack for whatever was handled by the time it goes (a burst of events costs one frame)."""
        if self._acking is None or self._acking.done():
            self._acking = asyncio.ensure_future(self._ack())

    async def _ack(self) -> None:
        await asyncio.sleep(0)  # let the rest of a burst already read be handled first
        with contextlib.suppress(NodeError, WireError):
            await self._send(encode(NodeEvent(ACK_EVENT, {"upTo": self._handled[1]})))

    async def _drain_stderr(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        """The node's log lines: read so they never hold up the channel's window, kept as the last error."""
        with contextlib.suppress(OSError, asyncssh.Error):
            while True:
                chunk = await proc.stderr.read(64 * 1024)
                if not chunk:
                    return
                for text in chunk.decode(errors="replace").splitlines()[:20]:
                    if text.strip():
                        log.warning("node %s: %s", self.name, visible(text.strip()[:500]))

    async def _answer(self, rid: str, method: str, payload: Awaitable[dict[str, Any]]) -> None:
        try:
            res = Response(rid, True, payload=await payload)
        except NodeError as exc:
            res = Response(rid, False, error={"code": exc.error_code, "message": str(exc)})
        except Exception as exc:
            log.exception("node %s: request %s failed", self.name, method)
            res = Response(rid, False, error={"code": "INTERNAL", "message": str(exc)})
        try:
            data = encode(res)
        except WireError as exc:  # an answer JSON cannot carry: said once, and the node still gets one
            log.error("node %s: the answer to %s could not be encoded: %s", self.name, method, exc)
            data = encode(Response(rid, False, error={"code": "INTERNAL", "message": str(exc)}))
        with contextlib.suppress(NodeError):
            await self._send(data)

    def _drop(self, reason: str) -> None:
        text = f"node {self.name}: link lost ({reason})"
        self.state = "down"
        self.last_error = text
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    NodeError(f"{text}; the command's outcome on the node is unknown", "NODE_LINK_LOST")
                )
        self._teardown()
        if self.reconnect and not self._closed and (self._reconnector is None or self._reconnector.done()):
            self._reconnector = asyncio.ensure_future(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        delay = 0.25
        while not self._closed and self.state != "connected":
            await asyncio.sleep(delay)
            with contextlib.suppress(NodeError):
                await self.ensure()
            delay = min(delay * 2, BACKOFF_MAX_SEC)

    def _teardown(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.close()
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        jumps, self._jumps = self._jumps, []
        for jump in reversed(jumps):
            with contextlib.suppress(Exception):
                jump.close()

    def _spawn(self, coro: Any) -> None:
        # A fresh context: the link's tasks (its reader above all, and what it answers for the node) are
        # no caller's, so they never act under the stamp of whichever call happened to open the link.
        task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closed = True
        if self._reconnector is not None:
            self._reconnector.cancel()
        self.state = "down"
        self._teardown()
        if self._acking is not None:
            self._acking.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(NodeError(f"node {self.name}: the link is closed"))
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _raising(exc: Exception) -> dict[str, Any]:
    """A request refused as it was read, answered as one refused while it waited."""
    raise exc
