"""The gateway's nodes: one link per `[nodes.<name>]`, host=node runs, relayed asks, lifecycle events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from engine.approvals import generations as stamps
from engine.jsontext import INT_MAX
from engine.nodes.gateway_key import GatewayKey
from engine.nodes.link import NodeError, NodeLink
from engine.nodes.revocations import Revocations
from engine.nodes.select import Candidate, NodeSelectError, select_node
from engine.nodes.wire import Hello, NodeEvent, Request, Response, credential_stamp
from engine.policy.decision import Decision
from engine.principals import key_owner
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.tools.exec import ExecContext
from runner.gateway import node_limits as limits
from runner.gateway.node_asks import relay_approval
from runner.gateway.node_events import NodeEvents, session_row
from runner.gateway.node_hello import check_hello, record_state_dir
from runner.gateway.node_keys import NodeKeys
from runner.gateway.node_orphans import Orphans
from runner.gateway.node_output import NodeOutputFeed
from runner.gateway.node_revoke import NodeRevoke
from runner.gateway.node_runs import (
    NodeRun,
    denied_result,
    follow_up,
    left_running,
    pending_result,
    waiting_data,
)
from runner.gateway.node_sessions import NodeSessions

if TYPE_CHECKING:
    from runner.gateway.hubs import HubServices

log = logging.getLogger("exechost.gateway.nodes")

SANDBOX_ADMIN_TIMEOUT_SEC = 120.0  # a prune or recreate removes containers one by one


class NodeHub:
    """Links follow the config (added, changed or removed nodes take effect on the next call)."""

    def __init__(self, services: HubServices) -> None:
        self.services = services
        self.links: dict[str, NodeLink] = {}
        self._runs: dict[tuple[str, str], NodeRun] = {}  # (node name, runId) -> the call waiting on it
        self._retired: set[asyncio.Task[None]] = set()
        self.keys = NodeKeys(services.state_dir)
        self._key: GatewayKey | None = None
        # Each agent's node sessions, counted with its sessions here (only those the gateway vouches for).
        self.held = NodeSessions(self._vouched)
        # Runs whose link dropped before they answered: their end comes, once, on a later link.
        self.orphans = Orphans(self.held, lambda key, text: self.services.events.enqueue(key, text))
        self._tasks: set[asyncio.Task[None]] = set()
        self.feed = NodeOutputFeed(services, lambda: self.links)
        self.events = NodeEvents(services, self._runs, self.orphans, self.keys, self.feed)
        services.output.remote = self.feed  # node output goes through the same fan-out as local output
        services.approvals.generations.listen(self._revoked)
        # `agents revoke` on every node, and on each later link to one that has not answered it.
        self.revocations = NodeRevoke(
            Revocations(services.state_dir), self.sync, lambda: self.services.config().nodes
        )

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
                self.links[name] = NodeLink(
                    cfg,
                    on_event=self._on_event,
                    on_request=self._on_request,
                    on_hello=self._on_hello,
                    on_connected=self._on_connected,
                    # Proved on each link: a node other gateways share files this one's work apart.
                    gateway_key=self._gateway_key(),
                )
        return self.links

    def _vouched(self, node: str, scope: str, agent: str) -> bool:
        """A node's session row counts against `agent` only under a key this gateway sent that node with a
        run (node-keys.json), and only while the agent may use the node (runner.gateway.node_sessions)."""
        return self.keys.given(node, scope) and self.services.config().may_use_node(agent, node)

    def _revoked(self, agent: str) -> None:
        """`agent` was revoked or rotated: the asks its runs in flight relayed and that still wait are
        denied now (a rotation settles only asks made with the old credential, and a node's carry none);
        what those runs ask later is denied as it comes (node_asks.relay_approval)."""
        manager = self.services.approvals
        for run in list(self._runs.values()):
            if run.agent_id == agent and manager.generations.stale(agent, run.generation):
                for record in run.records:
                    if not record.resolved:
                        manager.revoke_record(record)

    def _gateway_key(self) -> GatewayKey:
        if self._key is None:  # made on first use: a gateway without nodes never needs one
            self._key = GatewayKey.load_or_create(self.services.state_dir)
        return self._key

    def candidates(self) -> list[Candidate]:
        out = []
        for link in self.sync().values():
            h = link.hello
            out.append(
                Candidate(
                    name=link.name,
                    host=link.cfg.host,
                    node_id=h.node_id if h else None,
                    display_name=link.cfg.display_name,
                    connected=link.state == "connected",
                    reported_name=h.display_name if h else None,
                )
            )
        return out

    def select(self, query: str | None, bound: str | None = None, agent: str | None = None) -> NodeLink:
        """The node a query names; for an agent (not the operator), only one its config lets it use."""
        try:
            picked = select_node(self.candidates(), query, bound)
        except NodeSelectError as exc:
            raise ToolError(str(exc)) from None
        if agent is not None:
            self.check_allowed(agent, picked.name)
        return self.links[picked.name]

    def check_allowed(self, agent: str, node: str) -> None:
        config = self.services.config()
        if not config.may_use_node(agent, node):
            entry = config.agents.get(agent)
            given = ", ".join(entry.nodes or []) if entry is not None else ""
            raise ToolError(
                f"agent {agent} may not use node {node} (its [[agents.list]] nodes: {given or 'none'}; the "
                "operator chooses them in config.toml)"
            )

    def _on_hello(self, link: NodeLink, hello: Hello) -> None:
        config = self.services.config()
        check_hello(config, self.keys, self.links.values(), link, hello)
        record_state_dir(config, link, hello)

    def _on_connected(self, link: NodeLink) -> None:
        """A link is through: the runs the last one left without an answer are settled (runs.status), and
        the revocations its node has not answered go to it."""
        self.revocations.linked(link)
        if self.orphans.waiting(link.name):
            task = asyncio.ensure_future(self.orphans.settle(link))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

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

    async def run(self, command: str, given: ExecRequest, ctx: ExecContext, decision: Decision) -> ToolResult:
        config = self.services.config()
        exec_cfg = config.exec_for(ctx.agent_id)
        query = given.node
        sandboxed = decision.policy is not None and decision.policy.sandboxed
        if sandboxed:
            # The agent's sandbox.node binds where its sandboxes live (a per-call node= must agree with it);
            # tools.exec.node binds host=node runs, not these.
            home = config.sandbox_value(ctx.agent_id, "node")
            link = self.select(query or home, home, ctx.agent_id)
        else:
            link = self.select(query or decision.node, exec_cfg.node, ctx.agent_id)
        run_id = str(uuid.uuid4())
        timeout = given.timeout
        explicit = timeout is not None and timeout > 0
        timeout_sec = float(timeout) if timeout is not None and explicit else float(exec_cfg.timeout_sec)
        workdir = given.workdir
        request: dict[str, Any] = {
            "command": ["/bin/sh", "-lc", command],
            "rawCommand": command,
            "cwd": workdir or None,
            "env": given.env,
            # Background runs bypass the default timeout, as local ones do (reference §1.10). At most an
            # int64: the node's reader refuses more, and counts each refusal against the link everyone shares.
            "timeoutMs": min(int(timeout_sec * 1000), INT_MAX) if explicit or not given.background else None,
            "agentId": ctx.agent_id,
            "sessionKey": ctx.session_key or None,  # its policy's (a non-main sandbox, overrides)
            "runId": run_id,
            # The gateway's effective policy: per-call values the node may only tighten with.
            "security": decision.security,
            "ask": decision.ask,
            "background": bool(given.background),
            "pty": bool(given.pty),
            "sandbox": sandboxed,
            # Which credential asked (a digest of its digest): a node told of its revoke refuses it.
            "credential": credential_stamp(ctx.credential),
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
        if ctx.operator:
            # Filed there as here: the operator's own, never the agent it names for policy (whose
            # `process` on that node would otherwise find it); a node before this ignores it.
            request["scopeKey"] = ctx.scope_key
        # The key this run's events are filed under, as the gateway files its own (never the frame's).
        events_key = ctx.scope_key
        owner = None if ctx.operator else key_owner(ctx.scope_key)
        if owner is not None:  # the agent's output budget here also caps its sessions there (only tightens)
            request["maxOutputBytes"] = config.exec_for(owner).max_output_bytes_per_agent
        quota = self.services.sessions.quota
        place = None
        if owner is not None and quota is not None:  # a place among the agent's sessions, or refused
            registry = self.services.sessions.registry
            await self.held.admit(
                owner, run_id, link.name, ctx.scope_key, quota, registry, lambda: self.links
            )
            place = (owner, ctx.scope_key)
        if self.services.approvals.generations.stale(ctx.agent_id, ctx.generation):
            self.held.answered(run_id, None)  # (no await since its place was given)
            raise ToolError(f"agent {ctx.agent_id} was revoked (or its credential rotated): nothing sent")
        run = NodeRun(
            link,
            run_id,
            command,
            sandboxed,
            started,
            ctx.agent_id,
            events_key,
            place=place,
            generation=ctx.generation,
            operator=ctx.operator,
            stamp=stamps.stamped(),
        )
        run.instance = link.hello.instance if link.hello is not None else ""
        self.keys.give(link.name, events_key)  # its background sessions may report under it later
        self._runs[(link.name, run_id)] = run
        principal = None if ctx.operator else ctx.agent_id
        call = asyncio.ensure_future(link.call("system.run", request, timeout=wait, principal=principal))
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
                        ctx.on_waiting(waiting_data(record))
                    continue
                # Two-phase, as the gateway's own asks: answer now; the decision and the run reach the
                # agent as a system event (exechost events).
                self._detach(run, call, ctx)
                return pending_result(record, link.name, sandboxed)
        except asyncio.CancelledError:
            if run.records:  # the caller left while a human decides: report by event, as the gateway does
                self._detach(run, call, ctx)
            else:
                call.cancel()
                self._runs.pop((link.name, run_id), None)
                self.held.answered(run_id, None)
            raise
        self._end(run, call)
        return self._result(run, call)

    def _detach(self, run: NodeRun, call: asyncio.Future[Response], ctx: ExecContext) -> None:
        """The agent was answered `approval-pending` (or left): the node's own exec.* events for this run are
        held back and one follow-up in the gateway's words goes to the agent's session instead."""
        run.detached = True
        key = run.session_key

        def done(fut: asyncio.Future[Response]) -> None:
            self._end(run, fut)
            if fut.cancelled():
                return
            try:
                result = self._result(run, fut)
            except ToolError as exc:
                self.services.events.enqueue(key, f"Exec failed ({run.where()}, id={run.run_id}): {exc}")
                return
            self.services.events.enqueue(key, follow_up(run, result))

        call.add_done_callback(done)

    def _end(self, run: NodeRun, call: asyncio.Future[Response]) -> None:
        """The call is over. A run whose link dropped before its answer is kept (bounded) until the node
        reports its end on a later link, once: that report is the only word of its outcome."""
        key = (run.link.name, run.run_id)
        self._runs.pop(key, None)
        self._settle(run)
        self.held.answered(run.run_id, left_running(run.link.name, call))
        lost = not call.cancelled() and isinstance(call.exception(), NodeError)
        if lost and getattr(call.exception(), "error_code", "") == "NODE_LINK_LOST" and not run.ended:
            self.orphans.keep(run)

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
                return denied_result(run, err, [r.id for r in run.records])
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
        aggregated = (
            merged if merged is not None else "\n".join(x for x in (stdout, stderr, str(error or "")) if x)
        )
        code = p.get("exitCode")
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        # As a local run reads (engine.sessions.manager): a command that ran to its end is `completed`
        # with its own code, said after its output; `failed` is a run that did not (timeout, error).
        ran = code is not None and not p.get("timedOut") and (bool(p.get("success")) or not error)
        text = merged or stdout or stderr or str(error or "")
        if ran and code != 0:
            note = f"(Command exited with code {code})"
            aggregated = f"{aggregated.rstrip(chr(10))}\n\n{note}" if aggregated else note
            text = f"{text.rstrip(chr(10))}\n\n{note}" if text else note
        text = text or "(no output)"
        details = {
            "status": "completed" if ran else "failed",
            "exitCode": p.get("exitCode"),
            "timedOut": bool(p.get("timedOut")),
            "durationMs": p.get("durationMs") or int((time.monotonic() - run.started) * 1000),
            "aggregated": aggregated,
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
            owner = key_owner(scope)
            if owner is not None:
                self.check_allowed(owner, link.name)
            node_params = {**params, "sessionId": raw}
        else:
            node = params.get("node")
            if not isinstance(node, str) or not node:
                raise ToolError("process on a node needs a node session id (node:<name>:<id>) or node=<name>")
            link = self.select(node, agent=key_owner(scope))
            node_params = {k: v for k, v in params.items() if k != "node"}
        try:
            res = await link.call(
                "process",
                {"action": action, "params": node_params, "scope": scope},
                timeout=60,
                principal=key_owner(scope),
            )
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            raise ToolError(f"node {link.name}: {err.get('message') or 'failed'}")
        payload = res.payload or {}
        text, details = str(payload.get("text") or ""), dict(payload.get("details") or {})
        owner = key_owner(scope)
        if action == "remove" and isinstance(sid, str) and owner and details.get("status") == "completed":
            self.held.removed(owner, sid)  # no longer one of its agent's sessions
        prefix = f"node:{link.name}:"
        if isinstance(details.get("sessionId"), str):
            text = text.replace(details["sessionId"], prefix + details["sessionId"])
            details["sessionId"] = prefix + details["sessionId"]
        if "sessions" in details:  # a list's rows, typed as ours are (merged_list sorts them)
            listed = details["sessions"] if isinstance(details["sessions"], list) else []
            rows = [limits.session_row(r) for r in listed if isinstance(r, dict)]
            details["sessions"] = [r for r in rows if r.get("sessionId")]
        for row in details.get("sessions") or []:
            text = text.replace(row["sessionId"], prefix + row["sessionId"])
            row["sessionId"] = prefix + row["sessionId"]
            row["node"] = link.name
        details["node"] = link.name
        return ToolResult(text, details)

    async def merged_list(self, local: ToolResult, params: dict[str, Any], scope: str) -> ToolResult:
        """`process list` without node=: this gateway's sessions and every connected node's in the same
        scope, newest first, each row with its node (None here). Nodes that are down are not dialled."""
        config, owner = self.services.config(), key_owner(scope)
        links = [
            link
            for link in self.sync().values()
            if link.state == "connected" and (owner is None or config.may_use_node(owner, link.name))
        ]
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
            out = [session_row(link, r, self.events.files) for r in rows or [] if isinstance(r, dict)]
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
        self, node: str, method: str, params: dict[str, Any], agent: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """One sandbox admin verb on one node: (the node's name, its payload); for an agent, on a node it
        may use only."""
        link = self.select(node, agent=agent)
        try:
            res = await link.call(method, params, timeout=SANDBOX_ADMIN_TIMEOUT_SEC, principal=agent)
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

    def _on_event(self, link: NodeLink, ev: NodeEvent) -> None:
        self.events.on_event(link, ev)

    @property
    def dropped(self) -> int:
        """Frames dropped for naming no run of their node (also logged, for the operator)."""
        return self.events.dropped

    def _on_request(self, link: NodeLink, req: Request) -> Awaitable[dict[str, Any]]:
        """Read as it arrives (engine.nodes.link.RequestHandler): only the typed ask waits, not the frame."""
        if req.method != "approval.request":
            raise NodeError("unknown method", "UNAVAILABLE")
        try:
            node_id = self._trusted_id(link)
        except ToolError as exc:
            raise NodeError(str(exc), "INVALID_REQUEST") from None
        return relay_approval(self.services, self._runs, self.events.drop_frame, link, node_id, req.params)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.revocations.close()
        for link in list(self.links.values()):
            with contextlib.suppress(Exception):
                await link.close()
        self.links.clear()
