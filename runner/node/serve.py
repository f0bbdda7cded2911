"""`exechost node serve --stdio`: answers `system.run` (reference §5.4) over JSON lines on stdin/stdout,
deciding with this node's OWN config and exec-approvals.json through the engine's exec tool."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import statefs
from engine.approvals.grants import GrantStore
from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs, hostoutside
from engine.config.loader import config_path, load_config
from engine.config.model import Config
from engine.nodes import gateway_key
from engine.nodes.identity import load_or_create
from engine.nodes.wire import (
    ACK_EVENT,
    AGENT_REVOKE,
    CAPS,
    MAX_LINE,
    Hello,
    NodeEvent,
    Request,
    Response,
    WireError,
    decode,
)
from engine.sessions import SessionManager, SystemEvents
from engine.tools.exec import ExecTool
from runner import daemonproc
from runner.node import gateways
from runner.node.approvals import RelayedApprovals
from runner.node.budget import BadFrames
from runner.node.links import Links, Output
from runner.node.quota import NodeQuota
from runner.node.relay import peer_is_us, relay_to_service
from runner.node.revoke import Revoked, RevokeError
from runner.node.runs import RunLedger
from runner.node.sysrun import ID, SPLIT_CAP, RunError, SystemRun

log = logging.getLogger("exechost.node")

ANSWER_ON_CLOSE_SEC = 10.0  # what a link admitted before an unreadable line may take to be answered


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version

    try:
        return pkg_version("exechost")
    except PackageNotFoundError:
        return "0"


def _console_peer(writer: asyncio.StreamWriter) -> str | None:
    """Why the approvals socket's listener is no console of this node's (None when it is one)."""
    ok, why = peer_is_us(writer)
    return None if ok else why


class NodeServer:
    """The node's own policy, sessions and approvals, and at most one link to a gateway at a time.

    Under `serve --stdio` it lives and dies with its one link. Under `node run` (service=True) it outlives
    links: sessions keep running, and events with no link to go to wait in a bounded queue for the next."""

    def __init__(self, state_dir: Path, *, service: bool = False) -> None:
        self.state_dir = state_dir
        self.service = service
        # every host view of this account covers this node's state dir, as a gateway's (fresh round 15 b)
        # (trusted only when made now or recorded: a host run may have planted it, keys and all)
        gatewaydirs.adopt(hostoutside.home_dir(), str(state_dir), resolved=True)
        self.identity = load_or_create(state_dir)
        self.runs = RunLedger()  # the gateway's runs received here: asked about after a dropped link
        # This process (event numbers count within it; the runs it knows are the ones it received).
        self.instance = secrets.token_hex(8)
        self._tasks: set[asyncio.Task[None]] = set()
        self._config: Config | None = None
        self._config_stamp: tuple[int, ...] | None = None
        self.approvals = RelayedApprovals(self._relay_ask, self._ask_local_console)
        self.store = ApprovalsStore(state_dir / "exec-approvals.json")
        # Limited yeses from the gateway's operator (`approve --uses/--for/--session`) live here.
        self.grants = GrantStore(state_dir / "exec-grants.json")
        config = self.config()
        self.sessions = SessionManager(
            state_dir,
            log_cap_bytes=config.exec.log_cap_bytes,
            cleanup_ms=config.exec.cleanup_ms,
            events=SystemEvents(),
            timeout_sec=float(config.exec.timeout_sec),
            background_ms=config.exec.background_ms,
            split_stream_chars=SPLIT_CAP,  # system.run answers stdout and stderr apart (reference §5.4)
            # Every gateway's agents share this node's sessions and disk: each its own caps (NodeQuota).
            quota=NodeQuota(config=self.config),
        )
        self.links = Links(self.sessions)  # each gateway's newest link, and the events it is owed
        self._sandbox_config: tuple[Config, Config] | None = None
        self.tool = self._exec_tool(self.config)
        # Commands the gateway sandboxed: same sessions and approvals, the node's sandbox settings.
        self.sandbox_tool = self._exec_tool(self.sandbox_config)
        # Background exits and the like: the gateway queues them for the agent's session.
        self.sessions.events.subscribe(self._forward_event)
        # Sessions starting and ending: the gateway's consoles list them live (not queued while unlinked:
        # the next `sessions.list` says the same).
        self.sessions.add_listener(self._forward_session_event)
        # Watched sessions' output and every session's byte total, pushed while a gateway is linked.
        from runner.node.output import NodeOutput

        self.output = NodeOutput(self.sessions, lambda ev: self.links.emit(ev, queue=False))
        # This node's sandboxes' egress proxy (its policy, asks relayed to the gateway): from the first link.
        from runner.node.egress import node_egress

        # owner (namespace + agent) -> (gateway namespace, run id) of the gateways' runs running here
        self.runs_in_flight: dict[str, list[tuple[str, str]]] = {}
        self.egress = node_egress(
            self.approvals, self.store, self.grants, state_dir, self.sandbox_config, self.runs_in_flight
        )
        self._egress_started = False
        self.revoked = Revoked(self.sessions, self.approvals.generations)  # the gateways' revoked agents
        self.system = SystemRun(
            self.tool,
            self.sandbox_tool,
            self.sessions,
            self.runs,
            self.approvals,
            self.links.emit,
            self.runs_in_flight,
            self.revoked,
        )

    def _exec_tool(self, config: Callable[[], Config]) -> ExecTool:
        return ExecTool(
            config=config,
            sessions=self.sessions,
            approvals=self.approvals,
            store=self.store,
            grants=self.grants,
            events=self.sessions.events,
            has_approver=lambda: True,  # the gateway is always asked; its inbox holds the ask until decided
            overrides={},
        )

    def sandbox_config(self) -> Config:
        from runner.node.sandboxes import forced_sandbox_config

        base = self.config()
        if self._sandbox_config is None or self._sandbox_config[0] is not base:
            self._sandbox_config = (base, forced_sandbox_config(base))
        return self._sandbox_config[1]

    def config(self) -> Config:
        """This node's config.toml, reloaded when it changes; a broken edit keeps the last good one."""
        path = config_path()
        try:
            st = path.stat()
            stamp: tuple[int, ...] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if self._config is None or stamp != self._config_stamp:
            try:
                self._config = load_config(path)
            except Exception as exc:
                if self._config is None:
                    raise
                log.error("config reload failed, keeping the previous one: %s", exc)
            self._config_stamp = stamp
        return self._config

    def hello(self) -> Hello:
        return Hello(
            node_id=self.identity.node_id,
            display_name=self.identity.display_name,
            version=version(),
            platform=sys.platform,
            caps=[*CAPS, gateway_key.CAP],
            path_env=os.environ.get("PATH", ""),
            mode="service" if self.service else "stdio",
            instance=self.instance,
            # where a gateway of this account on this machine covers it (gatewaydirs: its HOME may differ)
            state_dir=os.path.realpath(self.state_dir),
            place=gatewaydirs.place(),
        )

    # -- requests from the gateway

    async def handle(self, req: Request, link: Output | None = None) -> None:
        gateways.CURRENT_GATEWAY.set(link.gateway if link is not None else "")  # this request's task only
        try:
            if req.method in ("link.challenge", "link.identify"):
                res = Response(req.id, True, payload=self._identify(req.method, req.params, link))
                if req.method == "link.identify" and link is not None:
                    # The proof names this link's gateway: its answer, then what waited for that gateway,
                    # before any new event of its can go out (the gateway handles each number once, in order).
                    with contextlib.suppress(ConnectionError, OSError):
                        await self.links.resend_to(link, res)
                    return
            elif req.method == "system.run":
                res = Response(req.id, True, payload=await self.system.run(req.params))
            elif req.method == "runs.status":
                try:
                    ns = gateways.CURRENT_GATEWAY.get()
                    res = Response(req.id, True, payload=self.runs.status(req.params.get("runIds"), ns))
                except ValueError as exc:
                    raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: {exc}") from None
            elif req.method == AGENT_REVOKE:
                try:
                    res = Response(req.id, True, payload=await self.revoked.revoke(req.params))
                except RevokeError as exc:
                    raise RunError("INVALID_REQUEST", str(exc)) from None
            elif req.method == "ping":
                res = Response(req.id, True, payload={"pong": True, "nodeId": self.identity.node_id})
            elif req.method == "process":
                res = Response(req.id, True, payload=await self.process(req.params))
            elif req.method == "system.which":
                res = Response(req.id, True, payload=self.system_which(req.params))
            elif req.method in ("sessions.watch", "sessions.unwatch"):
                from runner.node.output import WatchError

                sid = req.params.get("sessionId")
                if sid is not None and (not isinstance(sid, str) or not ID.match(sid)):
                    raise RunError("INVALID_REQUEST", "INVALID_REQUEST: bad sessionId")
                try:
                    if req.method == "sessions.watch":
                        if sid is None:
                            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: sessionId is required")
                        if not gateways.session_of(self.sessions, gateways.CURRENT_GATEWAY.get(), sid):
                            raise WatchError(f"No session found for {sid}")
                        payload = self.output.watch(sid)
                    else:
                        ns = gateways.CURRENT_GATEWAY.get()
                        mine = functools.partial(gateways.session_of, self.sessions, ns)
                        payload = self.output.unwatch(sid, mine)
                except WatchError as exc:
                    raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: {exc}") from None
                res = Response(req.id, True, payload=payload)
            elif req.method.startswith("sessions."):
                from runner.node import views

                try:
                    ns = gateways.CURRENT_GATEWAY.get()
                    res = Response(
                        req.id, True, payload=await views.handle(self.sessions, req.method, req.params, ns)
                    )
                except views.ViewRequestError as exc:
                    raise RunError("INVALID_REQUEST", str(exc)) from None
            elif req.method.startswith("grants."):
                from runner.node import grants

                try:
                    payload = await grants.handle(self.grants, req.method, req.params)
                except grants.GrantRequestError as exc:
                    raise RunError("INVALID_REQUEST", str(exc)) from None
                res = Response(req.id, True, payload=payload)
            elif req.method.startswith("sandbox."):
                from runner.node import sandboxes

                try:
                    ns = gateways.CURRENT_GATEWAY.get()
                    payload = await sandboxes.handle(req.method, req.params, self.config(), ns)
                except sandboxes.SandboxRequestError as exc:
                    raise RunError(exc.code, str(exc)) from None
                res = Response(req.id, True, payload=payload)
            else:
                res = Response(
                    req.id, False, error={"code": "UNAVAILABLE", "message": "command not supported"}
                )
        except RunError as exc:
            res = Response(req.id, False, error={**exc.extra, "code": exc.code, "message": str(exc)})
        except Exception as exc:
            log.exception("request %s failed", req.method)
            res = Response(req.id, False, error={"code": "INTERNAL", "message": f"node error: {exc}"})
        with contextlib.suppress(ConnectionError, OSError):
            try:
                await self.links.send(res, link)
            except (
                WireError
            ) as exc:  # the answer held what JSON cannot carry: say so, never leave it unanswered
                log.error("the answer to %s could not be encoded: %s", req.method, exc)
                error = {"code": "INTERNAL", "message": f"node error: {exc}"}
                await self.links.send(Response(req.id, False, error=error), link)

    def _identify(self, method: str, params: dict[str, Any], link: Output | None) -> dict[str, Any]:
        """`link.challenge` then `link.identify`: the gateway signs this link's fresh nonce with its key, and
        from then on the link sees only the sessions filed under that key's fingerprint. Once per link."""
        if link is None or link.gateway:
            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: this link already proved a gateway key")
        if method == "link.challenge":
            link.nonce = gateway_key.new_nonce()
            return {"nonce": link.nonce}
        nonce, link.nonce = link.nonce, None  # one answer per challenge
        found = gateway_key.verify(params, self.identity.node_id, nonce) if nonce else None
        if found is None:
            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: the gateway key's proof does not verify")
        link.gateway = found + gateways.SEP
        return {"gateway": found}

    def system_which(self, params: dict[str, Any]) -> dict[str, Any]:
        bins = params.get("bins") or []
        found: dict[str, str] = {}
        for name in bins if isinstance(bins, list) else []:
            if isinstance(name, str) and name and "/" not in name and "\x00" not in name:
                path = shutil.which(name)
                if path:
                    found[name] = path
        return {"bins": found}

    async def close_tools(self) -> None:
        """Let both exec tools finish their bookkeeping (allowlist use stamps) before the process goes."""
        await self.tool.close()
        await self.sandbox_tool.close()
        await self.egress.close()

    async def process(self, p: dict[str, Any]) -> dict[str, Any]:
        """The `process` verb on this node's sessions, in the scope the gateway names (never all scopes)."""
        action, params, scope = p.get("action"), p.get("params"), p.get("scope")
        if (
            not isinstance(action, str)
            or not isinstance(params, dict)
            or not isinstance(scope, str)
            or not scope
        ):
            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: process needs action, params and scope")
        try:
            scope = gateways.scoped(scope)
        except gateways.ForeignScope as exc:
            raise RunError("INVALID_REQUEST", str(exc)) from None
        sid = params.get("sessionId")
        if isinstance(sid, str) and sid:
            await self.sessions.ready(sid)
            if not gateways.session_of(self.sessions, gateways.CURRENT_GATEWAY.get(), sid):
                # Another gateway's session reads exactly as one that never was.
                raise RunError("INVALID_REQUEST", f"No session found for {sid}")
        result = await self.sessions.process(action, params, scope)
        return result.to_dict()

    def _forward_session_event(self, event: str, data: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self.links.emit(NodeEvent(event, {"session": data}), queue=False))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forward_event(self, session_key: str, text: str) -> None:
        task = asyncio.ensure_future(
            self.links.emit(NodeEvent("system.event", {"sessionKey": session_key, "text": text}))
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the node's own requests (approval relay)

    async def _ask_local_console(self, view: dict[str, Any]) -> str | None:
        """A console on this node's own exec-approvals.sock is asked first (DESIGN §10); None when no
        console listens there or it gave no answer."""
        from engine.approvals.socket.wire import request_decision
        from engine.unixsock import socket_is_live

        current = await asyncio.to_thread(self.store.load)
        path, token = current.socket_path, current.socket_token
        if not path or not token:
            return None  # no console ever set one up here
        path = os.path.expanduser(path)
        if not await asyncio.to_thread(socket_is_live, Path(path)):
            return None
        keys = ("command", "cwd", "agentId", "sessionKey", "security", "ask", "askFallback", "resolvedPath")
        request = {k: view.get(k) for k in keys}
        request["host"] = "node"
        # Only a console in this service's own namespaces gets the token and a say: with a socket.path
        # outside the state dir a gateway's host run of this account (a view of its own) could listen
        # there and answer this node's asks (the same peer check as node.sock's relay, runner.node.peerns).
        return await request_decision(path, token, request, peer=_console_peer)

    async def _relay_ask(self, approval_id: str, view: dict[str, Any]) -> dict[str, Any]:
        view = {**view, "nodeId": self.identity.node_id, "nodeDisplayName": self.identity.display_name}
        res = await self.links.request("approval.request", {"approvalId": approval_id, "request": view})
        return res.payload or {} if res.ok else {}

    # -- the loop

    async def _attach(self, link: Output) -> None:
        """Hello, then whatever waited for a link, in order, before anything new can go out."""
        await self.links.attach(link, self.hello())
        self.output.linked()

    def _detach(self, link: Output) -> None:
        self.links.detach(link)
        if self.links.of(link.gateway) is not None:
            return  # a newer link of its gateway took over: its watches go on there
        self.output.unlinked(
            lambda sid: gateways.session_of(self.sessions, link.gateway, sid), last=not self.links.up
        )

    async def _answer_admitted(self) -> None:
        """Before a link closes on a line it cannot read, the requests admitted before that line are answered
        (bounded: a long run goes on in its session, and its caller asks again on the next link)."""
        running = [task for task in self._tasks if not task.done()]
        if running:
            await asyncio.wait(running, timeout=ANSWER_ON_CLOSE_SEC)

    async def serve(self, reader: asyncio.StreamReader, link: Output) -> None:
        """One link, until its reader ends (the gateway left, or a newer link took over)."""
        bad = BadFrames()  # each principal's own budget (runner.node.budget)
        try:
            try:
                await self._attach(link)
            except (ConnectionError, OSError) as exc:  # gone before its hello was through: the next one
                log.warning("a link dropped before its hello was through: %s", exc)  # carries the rest
                return
            if not self._egress_started:
                self._egress_started = True
                await self.egress.start()
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    log.error("frame longer than %d bytes; closing", MAX_LINE)
                    await self._answer_admitted()
                    break
                if not line:
                    break
                try:
                    frame = decode(line)
                except WireError as exc:
                    if exc.request_id is None or not bad.count(exc.request_id):
                        log.error("bad frame from the gateway: %s; closing", exc)
                        await self._answer_admitted()
                        break
                    # A request whose id was sound: answered, counted for its principal, the link goes on.
                    error = {"code": "INVALID_REQUEST", "message": f"INVALID_REQUEST: {exc}"}
                    with contextlib.suppress(ConnectionError, OSError):
                        await self.links.send(Response(exc.request_id, False, error=error), link)
                    continue
                if isinstance(frame, Request) and (why := bad.refused(frame.id)) is not None:
                    with contextlib.suppress(ConnectionError, OSError):
                        refusal = {"code": "INVALID_REQUEST", "message": why}
                        await self.links.send(Response(frame.id, False, error=refusal), link)
                elif isinstance(frame, Request):
                    if link.resend_pending and frame.method not in ("link.challenge", "link.identify"):
                        with contextlib.suppress(ConnectionError, OSError):
                            await self.links.resend_to(link)
                    task = asyncio.ensure_future(self.handle(frame, link))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif isinstance(frame, Response):
                    self.links.answered(frame, link)
                elif isinstance(frame, NodeEvent) and frame.event == ACK_EVENT:
                    up_to = frame.payload.get("upTo")
                    if isinstance(up_to, int) and not isinstance(up_to, bool):
                        self.links.acked(up_to, link)
        finally:
            self._detach(link)
            if not self.service:
                self.approvals.close()  # the gateway left and this process goes with it: asks fall back


async def serve_stdio(notes: list[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="exechost node: %(message)s")
    daemonproc.log_notes(notes or [])
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
        writer = Output(asyncio.StreamWriter(transport, protocol, reader, loop))
    except ValueError:  # a regular file
        writer = Output(None)
    refused = hostoutside.home_refused()
    if refused:  # as the gateway does: every view this node makes would protect the wrong home
        print(f"exechost node: {refused}", file=sys.stderr)
        return 1
    statefs.settle_umask()  # as the gateway's: sshd's or the login's, never looser than 022
    state = statefs.ensure_private_dir(daemonproc.pinned_state_dir())
    relayed = await relay_to_service(state, reader, writer)
    if relayed is not None:
        return relayed  # a `node run` service answered: its sessions outlive this link
    server = NodeServer(state)
    try:
        await server.serve(reader, writer)
    finally:
        await server.close_tools()
        await server.sessions.close()
    return 0
