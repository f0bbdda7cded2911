"""The host-side egress proxy: an HTTP forward proxy (absolute-form requests and CONNECT) per sandbox.

Each sandbox has its own Unix socket (so who asks is known by where it asks, never by what it says); the
in-sandbox forwarder hands over each loopback connection as a file descriptor with a NUL byte, and the
proxy talks to that TCP socket directly. A request's name is decided (deny, allow, approved, ask — the
gateway's `decide`), then resolved and checked here (`addresses`: no loopback or private address unless
the operator's `resolve` map says so, nor to one a `deny` entry names), and the connection goes to that very
address. Bytes are relayed in worker threads, off the event loop. Every connection ends as one
`Connection` record, and every refusal is answered (an HTTP status or a SOCKS reply) as well as recorded.

The sandbox's socket shares its open file description with whatever copy the sandbox kept, so its flags are
the sandbox's to change at any time: every read and write of it goes through `sockio`, which never depends
on O_NONBLOCK (a sandbox that clears it cannot make the gateway's event loop block), and it is closed with
linger off in a worker thread (SO_LINGER is the sandbox's to set too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.config.egress import MAX_CONNECTIONS, Pattern
from engine.principals import SHARED_SCOPE
from engine.sandbox.egress import handoff, httphead, sockio, socks
from engine.sandbox.egress.addresses import Refused, Target, resolve
from engine.sandbox.egress.dialects import Http, Socks, refusal

log = logging.getLogger(__name__)

HEAD_TIMEOUT_SEC = 30.0
CONNECT_TIMEOUT_SEC = 30.0
HANDOFF_TIMEOUT_SEC = 5.0  # the forwarder sends its descriptor at once; a silent peer is not it
# Connections at once (from accept to close; each holds at most two descriptors and two relay threads):
# past these a new one is closed unread, so no sandbox can run the gateway out of descriptors or threads.
MAX_PER_SANDBOX = 256
MAX_TOTAL = 1024
# Per principal, connections still reading their head beyond its `maxConnections` (those past their head
# are answered 429 at the cap); past this too, a new one is closed unread like past the caps above.
UNREAD_HEADROOM = 64
# Whatever an agent's `maxConnections` says (up to 1,024), its sandboxes together never hold more than this
# share of MAX_TOTAL: the rest stays for every other agent (a session scope per sandbox gives an agent as
# many sandboxes as it likes, so the per-sandbox cap alone bounds nothing per agent).
MAX_PER_PRINCIPAL = MAX_TOTAL * 3 // 4
# Closes of one listener's refused connections in flight (each may release a lingering descriptor the
# sandbox sent, and waits in a worker thread for it): past it, that listener accepts nothing until they end.
CLOSING_MAX = 8
CHUNK = 1 << 20  # one relay buffer (per direction of a connection)
SHARED = SHARED_SCOPE  # the principal of the shared-scope sandbox's connections (see `listen`)


@dataclass(frozen=True)
class Request:
    """What is decided: who asks (agent, sandbox) and for which name and port."""

    agent_id: str
    sandbox: str
    name: str
    port: int
    method: str
    # The agent's credential generation its sandbox was last served under (engine.approvals.generations),
    # None for the shared sandbox (nobody's own): the decider refuses a request of an older one than now.
    generation: int | None = None
    # The proof that made that run's caller the agent when not a credential (a uid mapping, the gateway
    # token alone), at its generation: refused too once the config cut that proof off.
    proof: str = ""
    proof_generation: int = 0

    @property
    def tunnel(self) -> bool:
        """CONNECT or SOCKS5: bytes the proxy relays unread (a port-less entry admits 443 for these)."""
        return self.method in ("CONNECT", socks.METHOD)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str  # what decided, in words: "allow entry 'pypi.org'", "approved by operator (allow-once)"
    by: str = "policy"  # policy | operator (or the approver's name) | expired | ask-failed
    resolve: dict[str, str] = field(default_factory=dict)  # the agent's `resolve` map (normalised)
    deny: tuple[Pattern, ...] = ()  # the agent's `deny` entries, checked again on every resolved address


@dataclass
class Connection:
    """One connection as the history and `sandbox egress` show it."""

    agentId: str  # whose egress settings, approvals and grants decided it
    sandbox: str
    name: str
    port: int
    method: str
    decision: str  # allowed | refused
    rule: str
    decidedBy: str
    address: str | None = None
    bytesUp: int = 0
    bytesDown: int = 0
    startedAtMs: int = 0
    durationMs: int = 0
    status: int | None = None  # what the proxy itself answered (200 for a tunnel, 403, 400, 429, 502)
    error: str | None = None
    # Who made it: the agent, or SHARED for the shared-scope sandbox, where every agent's commands run
    # as one uid behind one loopback and a TCP connection carries nothing that says whose command opened it.
    principal: str = ""
    # What only the operator sees (OPERATOR_ONLY): the addresses a refusal withheld from the sandbox.
    detail: str | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def capped(self) -> Connection:
        """Text fields cut to RECORD_TEXT_MAX: a refusal may quote what the sandbox sent (a 60 KiB header),
        and one shared history must not be rotated away by a few long lines."""
        for key in ("rule", "error", "detail", "method", "name"):
            value = getattr(self, key)
            if isinstance(value, str) and len(value) > RECORD_TEXT_MAX:
                setattr(self, key, value[:RECORD_TEXT_MAX] + "…")
        return self


RECORD_TEXT_MAX = 300
# Fields of a record an agent's `sandbox egress` never shows: where its names resolve to is what its
# refusals withheld (internal DNS, /etc/hosts, a `resolve` entry's private address).
OPERATOR_ONLY = ("address", "error", "detail")


Decide = Callable[[Request], Awaitable[Decision]]
Record = Callable[[Connection], None]
Cap = Callable[[str], int]  # agent -> its `maxConnections`


@dataclass
class _Listener:
    sandbox: str
    agent_id: str
    principal: str
    path: str
    sock: socket.socket
    task: asyncio.Task[None]
    active: int = 0
    closing: int = 0
    drained: asyncio.Event = field(default_factory=asyncio.Event)  # set while closing < CLOSING_MAX
    generation: int | None = None  # its agent's credential generation when a run of its last served it
    proof: str = ""  # and the proof that run's caller was the agent by, when not a credential
    proof_generation: int = 0


@dataclass(eq=False)
class _Live:
    """One connection past its head, as `cut` reaches it: its sockets, and whether it was cut."""

    client: socket.socket
    upstream: socket.socket | None = None
    cut: bool = False
    relaying: bool = False  # past its answer: a cut shuts its sockets (before, it is refused and answered)


class EgressProxy:
    """Every sandbox's listener of one process (the gateway's)."""

    def __init__(self, decide: Decide, record: Record, cap: Cap | None = None) -> None:
        self.decide = decide
        self.record = record
        self.cap = cap or (lambda _agent: MAX_CONNECTIONS)
        self._listeners: dict[str, _Listener] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pool = ThreadPoolExecutor(max_workers=2 * MAX_TOTAL, thread_name_prefix="egress")
        self._closer = ThreadPoolExecutor(max_workers=MAX_TOTAL, thread_name_prefix="egress-close")
        self.active = 0  # connections of every sandbox
        self.open: dict[str, int] = {}  # per principal: connections from accept to close
        self.held: dict[str, int] = {}  # per principal: connections past their head (deciding or relaying)
        self._live: dict[str, set[_Live]] = {}  # per agent and proof: connections past their head (`cut`)

    def listening(self, sandbox: str) -> bool:
        known = self._listeners.get(sandbox)
        return known is not None and not known.task.done() and os.path.exists(known.path)

    async def listen(
        self,
        sandbox: str,
        agent_id: str,
        directory: Path,
        uid: int | None = None,
        shared: bool = False,
        generation: int | None = None,
        proof: tuple[str, int] = ("", 0),
    ) -> None:
        """Serve `sandbox` on `<directory>/proxy.sock` (replacing a stale socket; `uid` may connect).
        `shared`: the shared-scope sandbox, whose connections are recorded as the principal SHARED (and
        counted against one cap together), decided under `agent_id`'s settings, the global ones.
        `generation`: the agent's credential generation this serving is under (each request carries it);
        `proof`: the proof key and generation that made the serving run's caller the agent, "" when a
        credential did (each request carries it too)."""
        known = self._listeners.get(sandbox)
        if known is not None and self.listening(sandbox):
            # Kept as it is: a sandbox's name is its agent's (only the one `shared` sandbox serves several),
            # and re-binding would refuse connects meanwhile. A run of the agent's current credential
            # served it again: its requests are that generation's from now on.
            # Never an older one (a run taken up before a revoke entering after a newer run did): that
            # would refuse the newer credential's runs, and a stale run is refused at its spawn anyway.
            newer = generation is not None and (known.generation is None or generation >= known.generation)
            if known.agent_id == agent_id and newer:
                known.generation = generation
                known.proof, known.proof_generation = proof
            return
        if known is not None:
            self.stop(sandbox)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink("proxy.sock", dir_fd=dir_fd)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Bound through the dir fd: the path's length is then never the state dir's.
            sock.bind(f"/proc/self/fd/{dir_fd}/proxy.sock")
            os.chmod("proxy.sock", 0o600, dir_fd=dir_fd, follow_symlinks=False)
            if uid is not None and uid != os.geteuid():
                os.chown("proxy.sock", uid, -1, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
        sock.listen(1024)
        sock.setblocking(False)
        path = str(directory / "proxy.sock")
        task = asyncio.get_running_loop().create_task(self._accept(sandbox, sock))
        principal = SHARED if shared else agent_id
        self._listeners[sandbox] = _Listener(
            sandbox,
            agent_id,
            principal,
            path,
            sock,
            task,
            generation=generation,
            proof=proof[0],
            proof_generation=proof[1],
        )
        self._listeners[sandbox].drained.set()

    def served_under(self, sandbox: str, agent_id: str) -> tuple[int | None, str, int] | None:
        """The generation and proof `agent_id`'s listener of `sandbox` serves under; None when none (no stat:
        one whose socket went is still what the sandbox's processes were served under)."""
        known = self._listeners.get(sandbox)
        if known is None or known.agent_id != agent_id or known.task.done():
            return None
        return known.generation, known.proof, known.proof_generation

    def stop(self, sandbox: str) -> None:
        known = self._listeners.pop(sandbox, None)
        if known is not None:
            known.task.cancel()
            known.sock.close()

    def cut(self, agent_id: str) -> int:
        """End every connection of `agent_id`'s sandboxes past its head at once (its agent was revoked; or
        `agent_id` is a proof key the config cut off: that proof's connections only): a relay's sockets
        shut, so it ends in both directions; one still deciding or connecting is refused (and answered so)
        before it relays a byte. The number cut."""
        live = self._live.get(agent_id, set())
        for entry in live:
            entry.cut = True
            for sock in (entry.client, entry.upstream) if entry.relaying else ():
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
        return len(live)

    async def close(self) -> None:
        for name in list(self._listeners):
            self.stop(name)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._closer.shutdown(wait=False)

    async def _accept(self, sandbox: str, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            known = self._listeners.get(sandbox)
            if known is not None:
                await known.drained.wait()
            try:
                conn, _ = await loop.sock_accept(lsock)
            except OSError as exc:
                log.warning("egress listener of %s: %s", sandbox, exc)
                await asyncio.sleep(0.05)
                continue
            listener = self._listeners.get(sandbox)
            if (
                listener is None
                or listener.active >= MAX_PER_SANDBOX
                or self.active >= MAX_TOTAL
                or self.open.get(listener.principal, 0) >= self.open_limit(listener.agent_id)
            ):
                self._release(listener, conn)  # (the descriptor in flight, unread, goes with it)
                continue
            listener.active += 1
            self.active += 1
            self.open[listener.principal] = self.open.get(listener.principal, 0) + 1
            task = loop.create_task(self._handoff(listener, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def open_limit(self, agent_id: str) -> int:
        """Connections one principal may hold from accept to close: its cap past the head, the headroom
        for heads still coming, and never more than its share of all."""
        return min(self._cap(agent_id) + UNREAD_HEADROOM, MAX_PER_PRINCIPAL)

    def _cap(self, agent_id: str) -> int:
        try:
            return self.cap(agent_id)
        except Exception:  # (a config the reload could not read: the listener must keep accepting)
            log.exception("egress: maxConnections of %s", agent_id)
            return MAX_CONNECTIONS

    def _release(self, listener: _Listener | None, conn: socket.socket) -> None:
        """Close a Unix connection unread, in a closer thread: the descriptors in flight on it are released
        by that close(2), and a lingering TCP socket's release waits for its peer's acknowledgement."""
        try:
            done = asyncio.get_running_loop().run_in_executor(self._closer, conn.close)
        except RuntimeError:  # the proxy is closing
            conn.close()
            return
        if listener is None:
            return
        listener.closing += 1
        if listener.closing >= CLOSING_MAX:
            listener.drained.clear()

        def closed(_: object) -> None:
            listener.closing -= 1
            if listener.closing < CLOSING_MAX:
                listener.drained.set()

        done.add_done_callback(closed)

    async def _handoff(self, listener: _Listener, conn: socket.socket) -> None:
        """The forwarder's message: one NUL byte and one descriptor, a TCP socket of the sandbox."""
        loop = asyncio.get_running_loop()
        handed = False
        try:
            if await handoff.readable(conn, HANDOFF_TIMEOUT_SEC):
                taken = loop.run_in_executor(self._pool, handoff.take_socket, conn)  # (closes conn)
                handed = True
                client = await taken
                if client is not None:
                    await self.serve(
                        client,
                        listener.agent_id,
                        listener.sandbox,
                        listener.principal,
                        generation=listener.generation,
                        proof=(listener.proof, listener.proof_generation),
                    )
        finally:
            if not handed:
                self._release(listener, conn)
            listener.active -= 1
            self.active -= 1
            self.open[listener.principal] -= 1
            if not self.open[listener.principal]:
                del self.open[listener.principal]

    # -- one connection ---------------------------------------------------------------------------

    async def serve(
        self,
        client: socket.socket,
        agent_id: str,
        sandbox: str,
        principal: str | None = None,
        *,
        generation: int | None = None,
        proof: tuple[str, int] = ("", 0),
    ) -> None:
        """Read the request (HTTP, or SOCKS5 when its first byte says so), decide, connect, relay; always
        one record (unless the client sent nothing at all), and every refusal answered."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        who = principal or agent_id
        rec = Connection(agent_id, sandbox, "", 0, "", "refused", "", "proxy", startedAtMs=_now_ms())
        rec.principal = who
        upstream: socket.socket | None = None
        talk: Http | Socks = Http(client)
        counted = False
        live = _Live(client)
        try:
            client.setblocking(False)  # (for the loop's sake only: sockio never depends on it)
            try:
                async with asyncio.timeout(HEAD_TIMEOUT_SEC):
                    first = await sockio.recv(client, 16384)
                    if first[:1] == bytes([socks.VERSION]):
                        talk = Socks(client)
                    parsed = await talk.read(first)
            except httphead.BadRequest as exc:
                rec.rule, rec.method = str(exc), talk.method
                rec.status = await talk.refuse("bad", f"exechost egress: {exc}")
                return
            except TimeoutError:
                rec.rule, rec.method = f"no complete request within {HEAD_TIMEOUT_SEC:g} s", talk.method
                rec.status = await talk.refuse("timeout", f"exechost egress: {rec.rule}")
                return
            except OSError as exc:  # (ConnectionError too) nothing is left to answer to
                rec.rule, rec.method = "the client went away before its request ended", talk.method
                rec.error = str(exc)
                return
            except Exception as exc:  # a parser's slip is still answered and recorded, never a silent drop
                log.exception("egress: a request head not understood")
                rec.rule, rec.method = f"request not understood ({exc.__class__.__name__})", talk.method
                rec.status = await talk.refuse("bad", f"exechost egress: {rec.rule}")
                return
            if parsed is None:
                if first:
                    rec.rule, rec.method = "the client went away before its request ended", talk.method
                return
            method, name, port, forward, rest, body = parsed
            rec.name, rec.port, rec.method = name, port, method
            cap = self._cap(agent_id)
            if self.held.get(who, 0) >= cap:
                # Before the decision: a capped sandbox makes no asks either.
                rec.rule = f"{who} holds {cap} proxy connections already (sandbox.egress.maxConnections)"
                rec.status = await talk.refuse("busy", refusal(name, port, rec.rule))
                return
            self.held[who] = self.held.get(who, 0) + 1
            counted = True
            if generation is not None:  # the agent's own sandbox (not the shared one): a revoke cuts it
                self._live.setdefault(agent_id, set()).add(live)
            if proof[0]:  # and the end of the proof its serving run's caller was the agent by
                self._live.setdefault(proof[0], set()).add(live)
            request = Request(agent_id, sandbox, name, port, method, generation, *proof)
            decision = await self.decide(request)
            rec.rule, rec.decidedBy = decision.rule, decision.by
            if not decision.allowed:
                rec.status = await talk.refuse("forbidden", refusal(name, port, decision.rule))
                return
            try:
                target = await resolve(
                    name, port, decision.resolve, decision.deny, tunnel=request.tunnel, principal=who
                )
            except Refused as exc:
                rec.rule = f"{decision.rule}; refused: {exc}"
                rec.detail = exc.detail
                rec.status = await talk.refuse("forbidden", refusal(name, port, str(exc)))
                return
            rec.address = target.address
            try:
                upstream = live.upstream = await _connect(loop, target)
            except OSError as exc:
                # (asyncio's own message names the address: "Connect call failed ('10.0.0.5', 80)")
                why = os.strerror(exc.errno) if exc.errno else exc.__class__.__name__
                rec.error = f"connect {target.address}:{port}: {why}"
                # (the address stays in the record: a `resolve` entry may map the name somewhere private)
                rec.status = await talk.refuse("unreachable", f"exechost egress: {name}:{port}: {why}")
                return
            if live.cut:  # its agent was revoked while this was decided or connected: not a byte relayed
                rec.rule = f"{decision.rule}; then the agent {agent_id} was revoked"
                rec.status = await talk.refuse("forbidden", refusal(name, port, "agent revoked"))
                return
            live.relaying = True  # (no await since the check above: a cut from now on shuts it)
            rec.decision = "allowed"
            rec.status = await talk.established()
            more: int | None = None  # body bytes still to come from the client (None: no end)
            if body is not None:
                rest = rest[:body]
                more = body - len(rest)
            first = forward + rest
            if first:
                await loop.sock_sendall(upstream, first)  # (our own socket: its flags are ours)
            up, down = await self._relay(client, upstream, more)
            rec.bytesUp, rec.bytesDown = up + len(first), down
        except OSError as exc:
            rec.error = rec.error or str(exc)
        finally:
            if counted:
                self.held[who] -= 1
                if not self.held[who]:
                    del self.held[who]
                for key in (agent_id, proof[0]):
                    mine = self._live.get(key)
                    if mine is not None:
                        mine.discard(live)
                        if not mine:
                            del self._live[key]
            if upstream is not None:
                upstream.close()
            if rec.name or rec.status or rec.rule:
                rec.durationMs = int((time.monotonic() - started) * 1000)
                try:
                    self.record(rec.capped())
                except Exception:
                    log.exception("egress record failed")
            await self._dispose(client)

    async def _dispose(self, client: socket.socket) -> None:
        """Close the sandbox's socket in a worker thread: SO_LINGER on it is the sandbox's to set, and a
        lingering close(2) of the last reference waits until the unread bytes are acknowledged."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, handoff.close_unlingered, client)
        except RuntimeError:  # the pool is shut down (the proxy is closing): the descriptor must still go
            handoff.close_unlingered(client)

    async def _relay(
        self, client: socket.socket, upstream: socket.socket, up_limit: int | None
    ) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        client.setblocking(True)
        upstream.setblocking(True)
        up = loop.run_in_executor(self._pool, _pump, client, upstream, up_limit)
        down = loop.run_in_executor(self._pool, _pump, upstream, client)
        sent_up, sent_down = await asyncio.gather(up, down)
        return sent_up, sent_down


async def _connect(loop: asyncio.AbstractEventLoop, target: Target) -> socket.socket:
    sock = socket.socket(target.family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SEC):
            await loop.sock_connect(sock, (target.address, target.port))
    except TimeoutError:
        sock.close()
        raise OSError(110, "timed out") from None
    except BaseException:
        sock.close()
        raise
    return sock


def _pump(src: socket.socket, dst: socket.socket, limit: int | None = None) -> int:
    """Move bytes src → dst through one buffer (recv_into, send) until EOF (then half-close dst), `limit`
    bytes (then stop reading src, and leave dst as it is), or an error (then shut both, so the other
    direction's thread ends too). The count of bytes moved.

    A copy, not splice(2): spliced pages reach the receiver as segments of many small fragments, which cost
    the client (curl, pip: the sandbox's side) half again the CPU of its direct download, and on a busy box
    that client is the bottleneck; one 1 MiB copy through user space costs the proxy less than that (see
    docs/BENCHMARKS.md, "Egress"). The buffer is an anonymous mapping: only the pages a transfer touches
    are ever memory."""
    total = 0
    if limit is not None and limit <= 0:
        return 0
    buf = mmap.mmap(-1, CHUNK)
    view = memoryview(buf)
    clean = stopped = False
    try:
        while True:
            if limit is not None and total >= limit:
                stopped = True
                break
            want = CHUNK if limit is None else min(CHUNK, limit - total)
            n = _recv(src, view, want)
            if n == 0:
                clean = True
                break
            _send(dst, view, n)
            total += n
    except OSError:
        pass
    finally:
        view.release()
        buf.close()
        with contextlib.suppress(OSError):
            if clean:
                dst.shutdown(socket.SHUT_WR)
            elif not stopped:
                src.shutdown(socket.SHUT_RDWR)
                dst.shutdown(socket.SHUT_RDWR)
    return total


# The sandbox's socket may turn non-blocking at any time (its sandbox may set the flag on the description it
# shares): a call that finds it so waits in poll(2) and tries again, rather than take EAGAIN for an end.


def _recv(sock: socket.socket, view: memoryview, size: int) -> int:
    while True:
        try:
            return sock.recv_into(view, size)
        except (BlockingIOError, InterruptedError):
            sockio.wait(sock.fileno(), False)


def _send(sock: socket.socket, view: memoryview, size: int) -> None:
    sent = 0
    while sent < size:
        with view[sent:size] as rest:
            try:
                sent += sock.send(rest)
            except (BlockingIOError, InterruptedError):
                sockio.wait(sock.fileno(), True)


def _now_ms() -> int:
    return int(time.time() * 1000)
