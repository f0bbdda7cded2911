"""The gateway's nodes: one link per `[nodes.<name>]`, host=node runs, relayed asks, lifecycle events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.approvals.decisions import DECISIONS
from engine.approvals.pending import ApprovalError, ApprovalRecord, ApprovalRequest, env_hash
from engine.nodes.link import NodeError, NodeLink
from engine.nodes.select import Candidate, NodeSelectError, select_node
from engine.nodes.wire import NodeEvent, Request, Response
from engine.policy.decision import Decision
from engine.protocol.frames import Event
from engine.results import ToolError, ToolResult
from engine.sessions.output import sanitize
from engine.tools.exec import ExecContext
from engine.tools.texts import FOLLOWUP_OUTPUT_CHARS, approval_pending_text

if TYPE_CHECKING:
    from runner.gateway.services import Services

log = logging.getLogger("exechost.gateway.nodes")

EVENT_OUTPUT_CHARS = 180  # reference §5.5: the finished text's output, compacted
SANDBOX_ADMIN_TIMEOUT_SEC = 120.0  # a prune or recreate removes containers one by one
MAX_PENDING_PER_NODE = 64
MAX_OUTPUT_CHARS = 128 * 1024  # one node output frame passed on (the node sends ≤ 64 KiB of bytes)
MAX_NODE_SESSIONS = 1000  # byte totals kept per node (a hostile node cannot grow the gateway's memory)
_APPROVAL_ID = re.compile(
    r"[A-Za-z0-9_.:-]{1,128}"
)  # a node flooding the inbox gets refused (askFallback), not shown


def _compact(text: str, limit: int) -> str:
    flat = " ".join(sanitize(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class NodeRun:
    """One system.run in flight, and the asks its node relayed for it (tied by runId on this link)."""

    link: NodeLink
    run_id: str
    command: str
    sandboxed: bool
    started: float
    records: list[ApprovalRecord] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    detached: bool = False

    def where(self) -> str:
        """Where it ran, in the words every result uses (`details.ranOn`)."""
        return f"sandbox on node {self.link.name}" if self.sandboxed else f"node {self.link.name}"


def _waiting_data(record: ApprovalRecord) -> dict[str, Any]:
    """What `exec.waiting` says (the CLI's `waiting for approval` line, MCP progress), as for the gateway."""
    return {
        "approvalId": record.id,
        "approvalSlug": record.slug,
        "expiresAtMs": record.expires_at_ms,
        "allowedDecisions": list(record.request.allowed_decisions),
        "command": record.request.command,
        "node": record.request.node_id,
    }


def _pending_result(record: ApprovalRecord, node: str, sandboxed: bool) -> ToolResult:
    req = record.request
    where = f"sandbox on node {node}" if sandboxed else f"node {node}"
    details = {
        "status": "approval-pending",
        "approvalId": record.id,
        "approvalSlug": record.slug,
        "expiresAtMs": record.expires_at_ms,
        "allowedDecisions": list(req.allowed_decisions),
        "host": "sandbox" if sandboxed else "node",
        "node": node,
        "command": req.command,
        "cwd": req.cwd,
        "nodeId": req.node_id,
        "warningText": "\n".join(req.warnings),
        "ranOn": where,
    }
    return ToolResult(approval_pending_text(record, list(req.warnings)), details)


def _denied_result(run: NodeRun, err: Mapping[str, str], approval_ids: list[str]) -> ToolResult:
    """The node's denial in the gateway's words: the reason code, and the operator's own reason."""
    reason = err.get("denied") or "denied"
    ref = f"gateway id={approval_ids[-1]}" if approval_ids else f"id={run.run_id}"
    text = f"Exec denied (node={run.link.name} {ref}, {reason}): {run.command}"
    said = err.get("operatorReason")
    if said:
        text += f"\nReason: {sanitize(said)[:500]}"
    details = {
        "status": "denied",
        "reason": reason,
        "operatorReason": said or None,
        "approvalId": approval_ids[-1] if approval_ids else None,
        "host": "sandbox" if run.sandboxed else "node",
        "node": run.link.name,
        "command": run.command,
        "runId": run.run_id,
        "ranOn": run.where(),
    }
    return ToolResult(text, details)


def _follow_up(run: NodeRun, result: ToolResult) -> str:
    """The system event a detached node run ends with (the gateway's `Exec finished …` form)."""
    d = result.details
    if d.get("status") == "denied":
        return result.text
    ref = f"gateway id={run.records[-1].id}" if run.records else f"id={run.run_id}"
    if d.get("status") == "running":
        return f"Exec running (node={run.link.name} {ref}, session={d.get('sessionId')})"
    code = "timeout" if d.get("timedOut") else f"code {d.get('exitCode')}"
    sandbox = " sandbox" if run.sandboxed else ""
    head = f"Exec finished (node={run.link.name}{sandbox} {ref}, {code})"
    tail = _compact(str(d.get("aggregated") or ""), FOLLOWUP_OUTPUT_CHARS)
    return f"{head}\n{tail}" if tail else head


class NodeHub:
    """Links follow the config (added, changed or removed nodes take effect on the next call)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.links: dict[str, NodeLink] = {}
        self._runs: dict[tuple[str, str], NodeRun] = {}  # (node name, runId) -> the call waiting on it
        self._retired: set[asyncio.Task[None]] = set()
        # Node sessions' raw byte totals (gateway ids), from each node's session.offsets: unread counts.
        self._offsets: dict[str, int] = {}
        # Node sessions a node was asked to push, with the link's connect time then (a new link re-asks).
        self._watching: dict[str, int | None] = {}
        self._calls: set[asyncio.Task[Any]] = set()
        services.output.remote = self  # node output goes through the same fan-out as local output

    def sync(self) -> dict[str, NodeLink]:
        nodes = self.services.config().nodes
        for name in list(self.links):
            link = self.links[name]
            if nodes.get(name) != link.cfg:
                del self.links[name]
                task = asyncio.ensure_future(link.close())
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)
        for name, cfg in nodes.items():
            if name not in self.links:
                self.links[name] = NodeLink(cfg, on_event=self._on_event, on_request=self._on_request)
        return self.links

    def candidates(self) -> list[Candidate]:
        out = []
        for link in self.sync().values():
            h = link.hello
            out.append(
                Candidate(
                    name=link.name,
                    host=link.cfg.host,
                    node_id=h.node_id if h else None,
                    display_name=link.cfg.display_name or (h.display_name if h else None),
                    connected=link.state == "connected",
                )
            )
        return out

    def select(self, query: str | None, bound: str | None = None) -> NodeLink:
        try:
            picked = select_node(self.candidates(), query, bound)
        except NodeSelectError as exc:
            raise ToolError(str(exc)) from None
        return self.links[picked.name]

    def _trusted_id(self, link: NodeLink) -> str:
        """The node id a link's hello claimed, refused when another configured node already holds it: a
        node must not pass itself off as another in the inbox or in selection."""
        if link.hello is None:
            raise ToolError(f"node {link.name}: not connected")
        node_id = link.hello.node_id
        for other in self.links.values():
            if other is not link and other.hello is not None and other.hello.node_id == node_id:
                raise ToolError(
                    f"node {link.name} claims node id {node_id}, which node {other.name} holds; refused "
                    f"(check {link.name}'s node.json)"
                )
        return node_id

    def status(self) -> list[dict[str, Any]]:
        return [link.status() for link in self.sync().values()]

    # -- host=node

    async def run(
        self, command: str, params: Mapping[str, Any], ctx: ExecContext, decision: Decision
    ) -> ToolResult:
        config = self.services.config()
        exec_cfg = config.exec_for(ctx.agent_id)
        query = params.get("node") if isinstance(params.get("node"), str) else None
        sandboxed = decision.policy is not None and decision.policy.sandboxed
        if sandboxed:
            # The agent's sandbox.node binds where its sandboxes live (a per-call node= must agree with it);
            # tools.exec.node binds host=node runs, not these.
            home = config.sandbox_for(ctx.agent_id).node
            link = self.select(query or home, home)
        else:
            link = self.select(query or decision.node, exec_cfg.node)
        run_id = str(uuid.uuid4())
        timeout = params.get("timeout")
        explicit = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0
        timeout_sec = float(timeout) if explicit else float(exec_cfg.timeout_sec)  # type: ignore[arg-type]
        workdir = params.get("workdir")
        request: dict[str, Any] = {
            "command": ["/bin/sh", "-lc", command],
            "rawCommand": command,
            "cwd": workdir if isinstance(workdir, str) and workdir else None,
            "env": params.get("env"),
            # Background runs bypass the default timeout, as local ones do (reference §1.10).
            "timeoutMs": int(timeout_sec * 1000) if explicit or not params.get("background") else None,
            "agentId": ctx.agent_id,
            "sessionKey": ctx.session_key or None,
            "runId": run_id,
            # The gateway's effective policy: per-call values the node may only tighten with.
            "security": decision.security,
            "ask": decision.ask,
            "background": bool(params.get("background")),
            "pty": bool(params.get("pty")),
            "sandbox": sandboxed,
        }
        # Room for the node's ask to be answered here, then for the command itself.
        wait = timeout_sec + self.services.approvals.timeout_ms / 1000 + 5
        started = time.monotonic()
        try:
            await link.ensure()
            self._trusted_id(link)
            if sandboxed and "sandbox" not in (link.hello.caps if link.hello else []):
                # An older node would ignore `sandbox` and run the command on its host: never send it.
                raise ToolError(
                    f"node {link.name}: its exechost ({link.hello.version if link.hello else '?'}) cannot "
                    "run sandboxes; install this exechost version there, or run the sandbox elsewhere"
                )
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        run = NodeRun(link, run_id, command, sandboxed, started)
        self._runs[(link.name, run_id)] = run
        call = asyncio.ensure_future(link.call("system.run", request, timeout=wait))
        try:
            while True:
                asked = asyncio.ensure_future(run.asked.wait())
                await asyncio.wait({call, asked}, return_when=asyncio.FIRST_COMPLETED)
                asked.cancel()
                if call.done():
                    break
                run.asked.clear()
                record = run.records[-1]
                if self.services.has_approver():
                    if ctx.on_waiting is not None:  # the same `waiting for approval` line as the gateway's
                        ctx.on_waiting(_waiting_data(record))
                    continue
                # Two-phase, as the gateway's own asks: answer now; the decision and the run reach the
                # agent as a system event (exechost events).
                self._detach(run, call, ctx)
                return _pending_result(record, link.name, sandboxed)
        except asyncio.CancelledError:
            if run.records:  # the caller left while a human decides: report by event, as the gateway does
                self._detach(run, call, ctx)
            else:
                call.cancel()
                self._runs.pop((link.name, run_id), None)
            raise
        self._runs.pop((link.name, run_id), None)
        self._settle(run)
        return self._result(run, call)

    def _detach(self, run: NodeRun, call: asyncio.Future[Response], ctx: ExecContext) -> None:
        """The agent was answered `approval-pending` (or left): the node's own exec.* events for this run are
        held back and one follow-up in the gateway's words goes to the agent's session instead."""
        run.detached = True
        key = ctx.session_key or ctx.scope_key

        def done(fut: asyncio.Future[Response]) -> None:
            self._runs.pop((run.link.name, run.run_id), None)
            self._settle(run)
            if fut.cancelled():
                return
            try:
                result = self._result(run, fut)
            except ToolError as exc:
                self.services.events.enqueue(key, f"Exec failed ({run.where()}, id={run.run_id}): {exc}")
                return
            self.services.events.enqueue(key, _follow_up(run, result))

        call.add_done_callback(done)

    def _settle(self, run: NodeRun) -> None:
        """The node answered: a relayed ask of this run still in the inbox (the node's own expiry came
        first) is gone with it."""
        for record in run.records:
            if not record.resolved:
                self.services.approvals._expire(record.id)

    def _result(self, run: NodeRun, call: asyncio.Future[Response]) -> ToolResult:
        """The node's answer to system.run as the agent's tool result (ToolError for a failure)."""
        link, sandboxed = run.link, run.sandboxed
        try:
            res = call.result()
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            if err.get("denied"):  # a human's denial or an expiry on the node: a denied result, exit 11
                return _denied_result(run, err, [r.id for r in run.records])
            raise ToolError(f"node {link.name}: {err.get('message') or err.get('code') or 'failed'}")
        where = run.where()
        p = res.payload or {}
        if p.get("status") == "running":
            sid = f"node:{link.name}:{p.get('sessionId')}"
            text = str(p.get("text") or "").replace(f"session {p.get('sessionId')},", f"session {sid},")
            return ToolResult(
                f"{text}\n(ran on: {where})",
                {
                    "status": "running",
                    "sessionId": sid,
                    "pid": p.get("pid"),
                    "host": "sandbox" if sandboxed else "node",
                    "node": link.name,
                    "runId": run.run_id,
                    "ranOn": where,
                },
            )
        stdout, stderr, error = str(p.get("stdout") or ""), str(p.get("stderr") or ""), p.get("error")
        # An exechost node also sends both streams merged as read (`output`): the agent sees stderr too.
        merged = p.get("output") if isinstance(p.get("output"), str) else None
        text = merged or stdout or stderr or str(error or "") or "(no output)"
        details = {
            "status": "completed" if p.get("success") else "failed",
            "exitCode": p.get("exitCode"),
            "timedOut": bool(p.get("timedOut")),
            "durationMs": p.get("durationMs") or int((time.monotonic() - run.started) * 1000),
            "aggregated": merged
            if merged is not None
            else "\n".join(x for x in (stdout, stderr, str(error or "")) if x),
            "cwd": p.get("cwd"),
            "host": "sandbox" if sandboxed else "node",
            "node": link.name,
            "nodeId": link.hello.node_id if link.hello else None,
            "runId": run.run_id,
            "ranOn": where,
        }
        return ToolResult(text.rstrip("\n") + f"\n(ran on: {where})", details)

    async def process(self, action: str, params: dict[str, Any], scope: str) -> ToolResult:
        """`process` on a node session (`node:<name>:<id>`), or `list` with `node=<name>`; ids are rewritten
        both ways so the agent only ever sees the gateway's form."""
        sid = params.get("sessionId")
        if isinstance(sid, str) and sid.startswith("node:"):
            parts = sid.split(":", 2)
            found = self.sync().get(parts[1]) if len(parts) == 3 and parts[2] else None
            if found is None:
                raise ToolError(f"No session found for {sid}")
            link, raw = found, parts[2]
            node_params = {**params, "sessionId": raw}
        else:
            node = params.get("node")
            if not isinstance(node, str) or not node:
                raise ToolError("process on a node needs a node session id (node:<name>:<id>) or node=<name>")
            link = self.select(node)
            node_params = {k: v for k, v in params.items() if k != "node"}
        try:
            res = await link.call(
                "process", {"action": action, "params": node_params, "scope": scope}, timeout=60
            )
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            raise ToolError(f"node {link.name}: {err.get('message') or 'failed'}")
        payload = res.payload or {}
        text, details = str(payload.get("text") or ""), dict(payload.get("details") or {})
        prefix = f"node:{link.name}:"
        if isinstance(details.get("sessionId"), str):
            text = text.replace(details["sessionId"], prefix + details["sessionId"])
            details["sessionId"] = prefix + details["sessionId"]
        for row in details.get("sessions") or []:
            if isinstance(row, dict) and isinstance(row.get("sessionId"), str):
                text = text.replace(row["sessionId"], prefix + row["sessionId"])
                row["sessionId"] = prefix + row["sessionId"]
                row["node"] = link.name
        details["node"] = link.name
        return ToolResult(text, details)

    async def merged_list(self, local: ToolResult, params: dict[str, Any], scope: str) -> ToolResult:
        """`process list` without node=: this gateway's sessions and every connected node's in the same
        scope, newest first, each row with its node (None here). Nodes that are down are not dialled."""
        links = [link for link in self.sync().values() if link.state == "connected"]
        if not links:
            return local

        async def one(link: NodeLink) -> ToolResult | None:
            try:
                return await self.process("list", {**params, "node": link.name}, scope)
            except ToolError as exc:
                log.warning("process list on node %s failed: %s", link.name, exc)
                return None

        rows = [{**r, "node": None} for r in local.details.get("sessions") or []]
        texts = [local.text] if rows else []
        for result in await asyncio.gather(*(one(link) for link in links)):
            got = (result.details.get("sessions") or []) if result is not None else []
            if result is not None and got:
                rows += got
                texts.append(result.text)
        rows.sort(key=lambda r: r.get("startedAt") or 0, reverse=True)
        text = "\n".join(texts) or local.text
        return ToolResult(text, {**local.details, "sessions": rows})

    # -- the operator's view of node sessions (the console's Sessions pane)

    def _session_row(self, link: NodeLink, row: dict[str, Any]) -> dict[str, Any] | None:
        """A node's session row in the gateway's terms: its id prefixed, its node named (by the link, never
        by the row)."""
        raw = row.get("sessionId")
        if not isinstance(raw, str) or not raw:
            return None
        where = "sandbox" if row.get("host") == "sandbox" else "node"
        return {
            **row,
            "sessionId": f"node:{link.name}:{raw}",
            "node": link.name,
            "host": f"{where}:{link.name}",
        }

    def session_link(self, session_id: str) -> tuple[NodeLink, str]:
        """(link, the node's own id) for `node:<name>:<id>`; ToolError for anything else."""
        parts = session_id.split(":", 2)
        link = self.sync().get(parts[1]) if len(parts) == 3 and parts[0] == "node" and parts[2] else None
        if link is None:
            raise ToolError(f"No session found for {session_id}")
        return link, parts[2]

    async def node_sessions(self) -> list[dict[str, Any]]:
        """Every connected node's sessions (all scopes, as the operator's `sessions.list`)."""
        links = [link for link in self.sync().values() if link.state == "connected"]

        async def one(link: NodeLink) -> list[dict[str, Any]]:
            try:
                res = await link.call("sessions.list", {}, timeout=10)
            except NodeError as exc:
                log.warning("sessions.list on node %s failed: %s", link.name, exc)
                return []
            rows = (res.payload or {}).get("sessions") if res.ok else None
            out = [self._session_row(link, r) for r in rows or [] if isinstance(r, dict)]
            return [r for r in out if r is not None]

        return [row for rows in await asyncio.gather(*(one(link) for link in links)) for row in rows]

    async def session_call(self, session_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """`sessions.output|resize` on a node session; the answer carries the gateway's id again."""
        link, raw = self.session_link(session_id)
        try:
            res = await link.call(method, {**params, "sessionId": raw}, timeout=30)
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            raise ToolError(f"node {link.name}: {err.get('message') or err.get('code') or 'failed'}")
        return {**(res.payload or {}), "sessionId": session_id}

    # -- sandboxes on nodes

    async def sandbox_call(
        self, node: str, method: str, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """One sandbox admin verb on one node: (the node's name, its payload)."""
        link = self.select(node)
        try:
            res = await link.call(method, params, timeout=SANDBOX_ADMIN_TIMEOUT_SEC)
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            raise ToolError(f"node {link.name}: {err.get('message') or err.get('code') or 'failed'}")
        return link.name, res.payload or {}

    async def sandbox_lists(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Every connected node's sandboxes, each row marked with its node, and what failed where. Nodes
        that are down are not dialled here: a list must not wait on a connect timeout."""
        links = [link for link in self.sync().values() if link.state == "connected"]

        async def one(link: NodeLink) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
            try:
                name, payload = await self.sandbox_call(link.name, "sandbox.list", {})
            except ToolError as exc:
                return [], [{"node": link.name, "error": str(exc)}]
            rows = [r for r in payload.get("containers") or [] if isinstance(r, dict)]
            return [{**r, "node": name} for r in rows], []

        rows: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for got, failed in await asyncio.gather(*(one(link) for link in links)):
            rows += got
            errors += failed
        return rows, errors

    # -- what nodes send

    # -- node session output, pushed into the gateway's fan-out (runner/gateway/output.py)

    def _split(self, session_id: str) -> tuple[NodeLink, str] | None:
        parts = session_id.split(":", 2)
        if len(parts) != 3 or parts[0] != "node" or not parts[2]:
            return None
        link = self.links.get(parts[1])
        return (link, parts[2]) if link is not None else None

    def knows(self, session_id: str) -> bool:
        """A node session this gateway can have pushed: its node is connected and can watch."""
        found = self._split(session_id)
        if found is None:
            return False
        link = found[0]
        return link.state == "connected" and link.hello is not None and "sessions.watch" in link.hello.caps

    def offsets(self) -> dict[str, int]:
        return self._offsets

    def watch(self, session_id: str) -> None:
        found = self._split(session_id)
        if found is None:
            return
        link, raw = found
        self._watching[session_id] = link.connected_at_ms
        self._call(link, "sessions.watch", {"sessionId": raw})

    def _unwatch(self, session_id: str) -> None:
        found = self._split(session_id)
        self._watching.pop(session_id, None)
        if found is not None:
            self._call(found[0], "sessions.unwatch", {"sessionId": found[1]})

    def _call(self, link: NodeLink, method: str, params: dict[str, Any]) -> None:
        async def go() -> None:
            try:
                res = await link.call(method, params, timeout=10)
            except NodeError as exc:
                log.warning("%s on node %s failed: %s", method, link.name, exc)
                return
            if not res.ok:
                log.info("%s on node %s: %s", method, link.name, (res.error or {}).get("message"))

        task = asyncio.ensure_future(go())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    def _on_output(self, link: NodeLink, p: dict[str, Any]) -> None:
        """A watched node session's output, as the gateway's own `session.output` (ids prefixed by the
        link's name, never by the frame); nobody wanting it any more stops the node pushing it."""
        raw, offset = p.get("sessionId"), p.get("offset")
        if not isinstance(raw, str) or not 0 < len(raw) <= 128 or ":" in raw:
            return
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return
        sid = f"node:{link.name}:{raw}"
        data: dict[str, Any] = {"sessionId": sid, "offset": offset}
        text, stream = p.get("data"), p.get("stream")
        if p.get("dropped") is True or not isinstance(text, str) or len(text) > MAX_OUTPUT_CHARS:
            data["dropped"] = True  # a gap (or a frame too big to pass on): the pane re-reads the log
        else:
            data.update(stream=stream if stream in ("stdout", "stderr", "pty") else "stdout", data=text)
        if not self.services.output.remote_output(sid, data) and sid in self._watching:
            self._unwatch(sid)

    def _on_offsets(self, link: NodeLink, p: dict[str, Any]) -> None:
        totals = p.get("sessions")
        if not isinstance(totals, dict):
            return
        prefix = f"node:{link.name}:"
        for sid in [s for s in self._offsets if s.startswith(prefix)]:
            del self._offsets[sid]
        for raw, total in list(totals.items())[:MAX_NODE_SESSIONS]:
            good_id = isinstance(raw, str) and 0 < len(raw) <= 128 and ":" not in raw
            if good_id and isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                self._offsets[prefix + raw] = total
        # A new link (the node service kept its sessions): what consoles still follow is asked for again.
        for sid, since in list(self._watching.items()):
            if sid.startswith(prefix) and since != link.connected_at_ms:
                if sid in self._offsets and self.services.output.output_wanted(sid):
                    self.watch(sid)
                else:
                    self._watching.pop(sid, None)

    def _on_event(self, link: NodeLink, ev: NodeEvent) -> None:
        """Reference §5.5: exec.started|finished|denied as the agent's system events."""
        p = ev.payload
        if ev.event == "session.output":
            self._on_output(link, p)
            return
        if ev.event == "session.offsets":
            self._on_offsets(link, p)
            return
        if ev.event in ("session.started", "session.exited"):  # for the consoles' session lists
            row = self._session_row(link, p["session"]) if isinstance(p.get("session"), dict) else None
            if row is not None:  # every scope on the node: the operators' consoles only
                frame = Event(event=ev.event, data=row)
                for conn in self.services.connections():
                    if conn.operator and "sessions" in conn.topics:
                        conn.send(frame)
                sid = row["sessionId"]
                if ev.event == "session.started" and self.services.output.output_wanted(sid):
                    self.watch(sid)  # a connection taking every session's output (protocol v1)
                elif ev.event == "session.exited":
                    self._watching.pop(sid, None)
            return
        node_id = link.hello.node_id if link.hello else link.name
        run = self._runs.get((link.name, str(p.get("runId") or "")))
        if run is not None and run.detached and ev.event in ("exec.finished", "exec.denied"):
            return  # the follow-up in the gateway's words says it (once)
        if p.get("suppressNotifyOnExit") or not self.services.config().exec.notify_on_exit:
            return
        run_id = str(p.get("runId") or "")
        command = _compact(str(p.get("command") or ""), 400)
        key = str(p.get("sessionKey") or "")
        if not key or key == "node":
            key = f"node-{node_id}"
        if ev.event == "exec.started":
            text = f"Exec started (node={node_id} id={run_id}): {command}"
        elif ev.event == "exec.finished":
            timed_out = bool(p.get("timedOut"))
            output = _compact(str(p.get("output") or ""), EVENT_OUTPUT_CHARS)
            if not (timed_out or p.get("exitCode") != 0 or output):
                return
            code = "timeout" if timed_out else f"code {p.get('exitCode')}"
            text = f"Exec finished (node={node_id} id={run_id}, {code})"
            if output:
                text += f"\n{output}"
        elif ev.event == "system.event":
            text = f"[node {link.name}] {sanitize(str(p.get('text') or ''))}"
        elif ev.event == "exec.denied":
            reason = _compact(str(p.get("reason") or "denied"), 200)
            text = f"Exec denied (node={node_id} id={run_id}, {reason}): {command}"
        else:
            return
        self.services.events.enqueue(key, text)

    async def _on_request(self, link: NodeLink, req: Request) -> dict[str, Any]:
        if req.method != "approval.request":
            raise NodeError("unknown method", "UNAVAILABLE")
        return await self._relay_approval(link, req.params)

    async def _relay_approval(self, link: NodeLink, params: dict[str, Any]) -> dict[str, Any]:
        """A node's ask, into this gateway's inbox. The node id comes from the link that asked, never from
        the frame, so one node's approval cannot be presented as (or satisfy) another's."""
        view = params.get("request")
        if not isinstance(view, dict) or link.hello is None:
            raise NodeError("bad approval request", "INVALID_REQUEST")
        try:
            node_id = self._trusted_id(link)
        except ToolError as exc:
            raise NodeError(str(exc), "INVALID_REQUEST") from None
        approval_id = params.get("approvalId")
        if not isinstance(approval_id, str) or not _APPROVAL_ID.fullmatch(approval_id):
            raise NodeError("bad approval request: approvalId", "INVALID_REQUEST")
        # The run this ask decides, on THIS link only (a node cannot attach its ask to another's call).
        raw_run = params.get("request", {}).get("runId") if isinstance(params.get("request"), dict) else None
        run = self._runs.get((link.name, raw_run)) if isinstance(raw_run, str) else None
        # Without an approver the ask still waits in the inbox (exechost approve, or a console attaching
        # later), as the gateway's own asks do; nobody deciding in time is the node's askFallback.
        manager = self.services.approvals
        if sum(1 for r in manager.pending() if r.request.node_id == node_id) >= MAX_PENDING_PER_NODE:
            return {"decision": None, "resolvedBy": "too-many-pending"}
        offered = view.get("allowedDecisions") or ()
        allowed = tuple(d for d in offered if d in DECISIONS) or ("allow-once", "deny")
        raw_env = view.get("env")
        env = tuple(sorted((str(k), str(v)) for k, v in raw_env.items())) if isinstance(raw_env, dict) else ()
        decision_json = view.get("decision") if isinstance(view.get("decision"), dict) else {}
        request = ApprovalRequest(
            command=str(view.get("command") or ""),
            cwd=str(view.get("cwd") or ""),
            host="node",
            agent_id=str(view.get("agentId") or "main"),
            session_key=str(view.get("sessionKey") or ""),
            security=str(view.get("security") or "allowlist"),
            ask=str(view.get("ask") or "on-miss"),
            ask_fallback=str(view.get("askFallback") or "deny"),
            allowed_decisions=allowed,
            resolved_path=view.get("resolvedPath") if isinstance(view.get("resolvedPath"), str) else None,
            node_id=node_id,
            env_hash=env_hash(dict(env)),
            node_approval_id=approval_id,
            env=env,
            decision_json=decision_json or {},
            warnings=tuple(str(w) for w in view.get("warnings") or ()),
            agent_reason=view.get("agentReason") if isinstance(view.get("agentReason"), str) else None,
        )
        while True:
            try:
                record, _ = manager.register(request)
            except ApprovalError:  # the queue caps (per agent, in all) hold for nodes too: askFallback
                return {"decision": None, "resolvedBy": "too-many-pending"}
            if run is not None:
                run.records.append(record)
                run.asked.set()
            decision = await manager.wait(record)
            if decision == "allow-once" and not manager.consume_allow_once(record):
                continue  # one approval, one run: this ask needs its own
            return {"decision": decision, "resolvedBy": record.resolved_by, "reason": record.reason}

    async def close(self) -> None:
        for link in list(self.links.values()):
            with contextlib.suppress(Exception):
                await link.close()
        self.links.clear()
