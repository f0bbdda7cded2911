"""`exechost node serve --stdio`: answers `system.run` (reference §5.4) over JSON lines on stdin/stdout,
deciding with this node's OWN config and exec-approvals.json through the engine's exec tool."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import statefs
from engine.approvals.grants import GrantStore
from engine.approvals.store import ApprovalsStore
from engine.commands.rawcommand import format_exec_command
from engine.config.loader import config_path, load_config
from engine.config.model import Config
from engine.errors import InvalidInput
from engine.nodes import gateway_key
from engine.nodes.identity import load_or_create
from engine.nodes.wire import (
    ACK_EVENT,
    CAPS,
    MAX_LINE,
    Hello,
    NodeEvent,
    Request,
    Response,
    WireError,
    decode,
    encode,
)
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.sessions import SessionManager, SystemEvents
from engine.tools.exec import ExecContext, ExecTool
from runner.node import gateways
from runner.node.approvals import CURRENT_RUN, RelayedApprovals
from runner.node.budget import BadFrames
from runner.node.outbox import Outbox
from runner.node.relay import relay_to_service
from runner.node.runs import RunLedger

log = logging.getLogger("exechost.node")

OUTPUT_CAP = 1_000_000  # characters of the merged output in one system.run result (the tail is kept)
SPLIT_CAP = 200_000  # characters of stdout and of stderr kept apart per run (reference OUTPUT_CAP)
ANSWER_ON_CLOSE_SEC = 10.0  # what a link admitted before an unreadable line may take to be answered
EVENT_OUTPUT_CAP = 20_000  # reference §5.5: exec.finished carries the last 20k
SHELL_WRAPPERS = {("/bin/sh", "-lc"), ("sh", "-lc"), ("/bin/sh", "-c"), ("sh", "-c"), ("/bin/bash", "-lc")}
_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version

    try:
        return pkg_version("exechost")
    except PackageNotFoundError:
        return "0"


def _streams(details: dict[str, Any], merged: str) -> dict[str, str]:
    """stdout and stderr apart as the reference answers them, `... (truncated)` on the one that ends it."""
    stdout, stderr = details.get("stdout"), details.get("stderr")
    if not isinstance(stdout, str) or not isinstance(stderr, str):  # not kept apart: all of it is stdout
        return {"stdout": merged[-OUTPUT_CAP:], "stderr": ""}
    if details.get("streamsTruncated"):
        if stderr:
            stderr += "\n... (truncated)"
        else:
            stdout += "\n... (truncated)"
    return {"stdout": stdout, "stderr": stderr}


class RunError(Exception):
    def __init__(self, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra or {}


def command_text(argv: Any, raw: Any) -> str:
    """The shell text to decide and run; refuses argv/rawCommand that disagree (RAW_COMMAND_MISMATCH)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise RunError("INVALID_REQUEST", "INVALID_REQUEST: command must be a non-empty array of strings")
    if any("\x00" in a for a in argv):
        raise RunError("INVALID_REQUEST", "INVALID_REQUEST: command contains a NUL byte")
    payload = argv[2] if len(argv) == 3 and (argv[0], argv[1]) in SHELL_WRAPPERS else None
    if raw is not None and (not isinstance(raw, str) or raw not in (format_exec_command(argv), payload)):
        raise RunError("RAW_COMMAND_MISMATCH", "INVALID_REQUEST: rawCommand does not match command")
    if payload is not None:
        return payload
    import shlex

    return shlex.join(argv)


class Output:
    """One link's byte sink: a pipe transport under sshd, a Unix socket under `node run`, plain blocking
    writes for a file."""

    def __init__(self, writer: asyncio.StreamWriter | None) -> None:
        self._writer = writer
        self.gateway = ""  # the namespace of the gateway key this link proved (runner.node.gateways)
        self.nonce: str | None = None  # this link's challenge, until a key answers it
        # What waited for a gateway goes out once this link says whose it is: after its key's proof, or
        # before its first other request (a link that proves no key). Until then no event goes out on it,
        # so the gateway gets every event of its own once, in number order.
        self.resend_pending = True

    async def write(self, data: bytes) -> None:
        if self._writer is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        self._writer.write(data)
        await self._writer.drain()

    def close(self) -> None:
        """End this link (its reader sees EOF): a newer link took over."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()


class NodeServer:
    """The node's own policy, sessions and approvals, and at most one link to a gateway at a time.

    Under `serve --stdio` it lives and dies with its one link. Under `node run` (service=True) it outlives
    links: sessions keep running, and events with no link to go to wait in a bounded queue for the next."""

    def __init__(self, state_dir: Path, *, service: bool = False) -> None:
        self.state_dir = state_dir
        self.service = service
        self.identity = load_or_create(state_dir)
        self._link: Output | None = None
        self._write_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        # Relayed asks in flight, with the link they went out on (a dropped link fails only its own).
        self._pending: dict[str, tuple[Output, asyncio.Future[Response]]] = {}
        self.runs = RunLedger()  # the gateway's runs received here: asked about after a dropped link
        self.outbox = Outbox()  # events kept until the gateway acknowledges them, sent again on a new link
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
        )
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

        self.output = NodeOutput(self.sessions, lambda ev: self.emit(ev, queue=False))
        # This node's sandboxes' egress proxy (its policy, asks relayed to the gateway): from the first link.
        from runner.node.egress import node_egress

        self.runs_in_flight: dict[str, list[str]] = {}  # agent -> the gateway's run ids running here
        self.egress = node_egress(
            self.approvals, self.store, self.grants, state_dir, self.sandbox_config, self.runs_in_flight
        )
        self._egress_started = False

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
        )

    async def send(self, frame: Any, link: Output | None = None) -> None:
        """To the current link (or only to `link`, if it is still the current one); ConnectionError when
        there is none: an answer never goes to a link other than the one that asked."""
        async with self._write_lock:
            current = self._link
            if current is None or (link is not None and link is not current):
                raise ConnectionError("no link to the gateway")
            if isinstance(frame, NodeEvent):
                if current.resend_pending:  # kept (if queued) for the resend that names its gateway
                    raise ConnectionError("the link has not said whose it is yet")
                frame = gateways.for_link(frame, current.gateway, self.sessions)
                if frame is None:  # another gateway's: never on this link
                    raise ConnectionError("the linked gateway is not this event's")
            await current.write(encode(frame))

    async def emit(self, event: NodeEvent, *, queue: bool = True) -> None:
        """An event for the gateway: sent now if a link is up, and with `queue` kept (numbered, bounded,
        oldest dropped) until the gateway acknowledges it, so the next link carries it if this one did not."""
        try:
            encode(event)
        except WireError as exc:  # a bug: an event JSON cannot carry (NaN); said once, never a dead task
            log.error("event %s could not be sent: %s", event.event, exc)
            return
        if queue:
            event = self.outbox.number(event)
        with contextlib.suppress(ConnectionError, OSError):
            await self.send(event)

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
                        async with self._write_lock:
                            if self._link is link:
                                await link.write(encode(res))
                                await self._resend(link)
                    return
            elif req.method == "system.run":
                res = Response(req.id, True, payload=await self.system_run(req.params))
            elif req.method == "runs.status":
                try:
                    res = Response(req.id, True, payload=self.runs.status(req.params.get("runIds")))
                except ValueError as exc:
                    raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: {exc}") from None
            elif req.method == "ping":
                res = Response(req.id, True, payload={"pong": True, "nodeId": self.identity.node_id})
            elif req.method == "process":
                res = Response(req.id, True, payload=await self.process(req.params))
            elif req.method == "system.which":
                res = Response(req.id, True, payload=self.system_which(req.params))
            elif req.method in ("sessions.watch", "sessions.unwatch"):
                from runner.node.output import WatchError

                sid = req.params.get("sessionId")
                if sid is not None and (not isinstance(sid, str) or not _ID.match(sid)):
                    raise RunError("INVALID_REQUEST", "INVALID_REQUEST: bad sessionId")
                try:
                    if req.method == "sessions.watch":
                        if sid is None:
                            raise RunError("INVALID_REQUEST", "INVALID_REQUEST: sessionId is required")
                        if not gateways.session_of(self.sessions, gateways.CURRENT_GATEWAY.get(), sid):
                            raise WatchError(f"No session found for {sid}")
                        payload = self.output.watch(sid)
                    else:
                        payload = self.output.unwatch(sid)
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
                    payload = await sandboxes.handle(req.method, req.params, self.config())
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
                await self.send(res, link)
            except (
                WireError
            ) as exc:  # the answer held what JSON cannot carry: say so, never leave it unanswered
                log.error("the answer to %s could not be encoded: %s", req.method, exc)
                error = {"code": "INTERNAL", "message": f"node error: {exc}"}
                await self.send(Response(req.id, False, error=error), link)

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

    async def system_run(self, p: dict[str, Any]) -> dict[str, Any]:
        text = command_text(p.get("command"), p.get("rawCommand"))
        agent_id = p.get("agentId") or "main"
        session_key = p.get("sessionKey") or "node"
        run_id = p.get("runId") or ""
        for label, value in (("agentId", agent_id), ("sessionKey", session_key), ("runId", run_id or "x")):
            if not isinstance(value, str) or not _ID.match(value):
                raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: bad {label}")
        if not run_id:
            return await self._system_run(p, text, agent_id, session_key, run_id)
        self.runs.began(run_id)
        outcome: dict[str, Any] = {"state": "failed", "message": "node error"}
        try:
            answer = await self._system_run(p, text, agent_id, session_key, run_id)
            sid = answer.get("sessionId")
            running = answer.get("status") == "running" and isinstance(sid, str)
            outcome = {"state": "running-session", "sessionId": sid} if running else {"state": "ended"}
            return answer
        except RunError as exc:
            # A denial was told by its exec.denied event; any other refusal only by this answer.
            denied = str(exc).startswith("SYSTEM_RUN_DENIED")
            outcome = {"state": "ended"} if denied else {"state": "failed", "message": str(exc)[:500]}
            raise
        finally:
            self.runs.answered(run_id, outcome)

    async def _system_run(
        self, p: dict[str, Any], text: str, agent_id: str, session_key: str, run_id: str
    ) -> dict[str, Any]:
        background = p.get("background") is True
        sandboxed = p.get("sandbox") is True
        params: dict[str, Any] = {"command": text, "yieldMs": 120_000, "background": background}
        if sandboxed:
            params["host"] = "sandbox"  # in a container on this node's Docker, shaped by its settings
        if p.get("pty") is True:
            params["pty"] = True  # a terminal on the node: send-keys/paste/write reach it through `process`
        # The gateway's effective policy rides along as per-call values: they can only tighten here.
        for key in ("security", "ask"):
            if p.get(key) is not None:
                params[key] = p[key]
        if isinstance(p.get("cwd"), str) and p["cwd"]:
            params["workdir"] = p["cwd"]
        if p.get("env") is not None:
            params["env"] = p["env"]
        timeout_ms = p.get("timeoutMs")
        if isinstance(timeout_ms, (int, float)) and not isinstance(timeout_ms, bool) and timeout_ms > 0:
            params["timeout"] = max(1, int(timeout_ms // 1000))
        # The scope is the gateway's (its sessionKey, else the agent's): `process` there finds these sessions.
        try:
            call = ExecRequest.decode(params)
        except InvalidInput as exc:
            raise RunError("INVALID_REQUEST", f"INVALID_REQUEST: {exc}") from None
        # Filed under the gateway's key (runner.node.gateways): another gateway's agent of the same name
        # finds nothing of it; its events go only to this gateway's link, in its own terms.
        ns = gateways.CURRENT_GATEWAY.get()
        own = p.get("sessionKey") or ""
        ctx = ExecContext(agent_id=agent_id, session_key=ns + (own or f"agent:{agent_id}") if ns else own)
        session_key = ns + session_key
        suppress = bool(p.get("suppressNotifyOnExit"))
        token = CURRENT_RUN.set(run_id)
        in_flight = self.runs_in_flight.setdefault(agent_id, [])
        in_flight.append(run_id)  # (its sandbox's egress asks go as part of it: runner.node.egress)
        try:
            result = await (self.sandbox_tool if sandboxed else self.tool).run(call, ctx)
        except ToolError as exc:
            await self._event_denied(session_key, run_id, text, str(exc), suppress)
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {exc}") from None
        finally:
            CURRENT_RUN.reset(token)
            in_flight.remove(run_id)
            if not in_flight:
                self.runs_in_flight.pop(agent_id, None)
        details = result.details
        if details.get("status") == "denied":
            reason = str(details.get("reason") or "denied")
            await self._event_denied(session_key, run_id, text, reason, suppress)
            # A human's (or the clock's) denial, apart from a policy refusal: the gateway answers it as a
            # denied result (exit 11), with the operator's own words when they gave some.
            extra = {"denied": reason}
            record = self.approvals.lookup(str(details.get("approvalId") or ""))
            said = record.reason if record is not None else None
            if said:
                extra["operatorReason"] = said
            raise RunError("UNAVAILABLE", f"SYSTEM_RUN_DENIED: {reason}", extra)
        if details.get("status") == "running" and background:
            return {
                "status": "running",
                "sessionId": details.get("sessionId"),
                "pid": details.get("pid"),
                "text": result.text,
            }
        if details.get("status") == "running":
            result = await self._wait(str(details.get("sessionId") or ""), ctx.scope_key, result)
            details = result.details
        return await self._finished(result, session_key, run_id, text, suppress)

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

    async def _wait(self, session_id: str, scope_key: str, result: ToolResult) -> ToolResult:
        session = self.sessions.get(session_id, scope_key)
        if session is None:
            return result
        await session.done.wait()
        details: dict[str, Any] = {
            "status": "completed" if session.exit_code == 0 else "failed",
            "exitCode": session.exit_code,
            "timedOut": session.timed_out,
            "aggregated": session.output.aggregated(),
            "cwd": session.cwd,
        }
        streams = session.output.streams()
        if streams is not None:
            details["stdout"], details["stderr"], details["streamsTruncated"] = streams
        return ToolResult("", details)

    async def _finished(
        self, result: ToolResult, session_key: str, run_id: str, text: str, suppress: bool
    ) -> dict[str, Any]:
        d = result.details
        output = str(d.get("aggregated") or "")
        exit_code = d.get("exitCode")
        # The local result appends its exit note; the node reports the code as a field instead.
        note = f"(Command exited with code {exit_code})"
        if output.endswith(note):
            output = output[: -len(note)].rstrip("\n")
        timed_out = bool(d.get("timedOut"))
        payload = {
            "exitCode": exit_code,
            "timedOut": timed_out,
            "success": exit_code == 0 and not timed_out,
            # Reference fields apart; `output` is both merged as they were read, which the gateway
            # shows the agent (the reference's `stdout || stderr` would hide stderr whenever stdout exists).
            **_streams(d, output),
            "output": output if len(output) <= OUTPUT_CAP else output[-OUTPUT_CAP:],
            "error": None if d.get("status") == "completed" else (result.text if not output else None),
            "durationMs": d.get("durationMs"),
            "cwd": d.get("cwd"),
        }
        event = {
            "sessionKey": session_key,
            "runId": run_id,
            "host": "node",
            "command": text,
            "exitCode": exit_code,
            "timedOut": timed_out,
            "success": payload["success"],
            "output": output[-EVENT_OUTPUT_CAP:],
            "suppressNotifyOnExit": suppress,
        }
        await self.emit(NodeEvent("exec.finished", event))
        return payload

    async def _event_denied(
        self, session_key: str, run_id: str, text: str, reason: str, suppress: bool
    ) -> None:
        payload = {
            "sessionKey": session_key,
            "runId": run_id,
            "host": "node",
            "command": text,
            "reason": reason,
            "suppressNotifyOnExit": suppress,
        }
        await self.emit(NodeEvent("exec.denied", payload))

    def _forward_session_event(self, event: str, data: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self.emit(NodeEvent(event, {"session": data}), queue=False))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forward_event(self, session_key: str, text: str) -> None:
        task = asyncio.ensure_future(
            self.emit(NodeEvent("system.event", {"sessionKey": session_key, "text": text}))
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
        return await request_decision(path, token, request)

    async def _relay_ask(self, approval_id: str, view: dict[str, Any]) -> dict[str, Any]:
        rid = f"n{next(self._ids)}"
        link = self._link
        if link is None:
            raise ConnectionError("no link to the gateway")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (link, future)
        try:
            view = {**view, "nodeId": self.identity.node_id, "nodeDisplayName": self.identity.display_name}
            request = Request(rid, "approval.request", {"approvalId": approval_id, "request": view})
            await self.send(request, link)
            res = await future
        finally:
            self._pending.pop(rid, None)
        return res.payload or {} if res.ok else {}

    # -- the loop

    async def _attach(self, link: Output) -> None:
        """Hello, then whatever waited for a link, in order, before anything new can go out."""
        async with self._write_lock:
            previous, self._link = self._link, None
            if previous is not None:
                previous.close()  # the newest link wins: the old one is a gateway that already gave up
            await link.write(encode(self.hello()))
            if self.outbox.dropped:
                log.warning("%d events were dropped while no gateway took them", self.outbox.dropped)
                self.outbox.dropped = 0
            self._link = link
        self.output.linked()

    async def _resend(self, link: Output) -> None:
        """What this link's gateway has not acknowledged, oldest first (called with the write lock held)."""
        link.resend_pending = False
        for event in self.outbox.unacked():
            mine = gateways.for_link(event, link.gateway, self.sessions)
            if mine is not None:  # another gateway's events never go to this one (runner.node.gateways)
                await link.write(encode(mine))

    def _detach(self, link: Output) -> None:
        if self._link is link:
            self._link = None
            self.output.unlinked()
        for rid, (owner, future) in list(self._pending.items()):
            if owner is link and not future.done():
                future.set_result(Response(rid, False, error={"code": "LINK_LOST", "message": "link lost"}))

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
                        await self.send(Response(exc.request_id, False, error=error), link)
                    continue
                if isinstance(frame, Request) and (why := bad.refused(frame.id)) is not None:
                    with contextlib.suppress(ConnectionError, OSError):
                        refusal = {"code": "INVALID_REQUEST", "message": why}
                        await self.send(Response(frame.id, False, error=refusal), link)
                elif isinstance(frame, Request):
                    if link.resend_pending and frame.method not in ("link.challenge", "link.identify"):
                        with contextlib.suppress(ConnectionError, OSError):
                            async with self._write_lock:
                                if self._link is link:
                                    await self._resend(link)
                    task = asyncio.ensure_future(self.handle(frame, link))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif isinstance(frame, Response):
                    pending = self._pending.get(frame.id)
                    if pending is not None and pending[0] is link and not pending[1].done():
                        pending[1].set_result(frame)
                elif isinstance(frame, NodeEvent) and frame.event == ACK_EVENT:
                    up_to = frame.payload.get("upTo")
                    if isinstance(up_to, int) and not isinstance(up_to, bool):
                        self.outbox.acked(
                            up_to, lambda e: gateways.for_link(e, link.gateway, self.sessions) is not None
                        )
        finally:
            self._detach(link)
            if not self.service:
                self.approvals.close()  # the gateway left and this process goes with it: asks fall back


async def serve_stdio() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="exechost node: %(message)s")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
        writer = Output(asyncio.StreamWriter(transport, protocol, reader, loop))
    except ValueError:  # a regular file
        writer = Output(None)
    state = statefs.ensure_private_dir(statefs.state_dir())
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
