"""The gateway's nodes: one link per `[nodes.<name>]`, host=node runs, relayed asks, lifecycle events."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import secrets
import time
import uuid
from typing import TYPE_CHECKING, Any

from engine.approvals.pending import ApprovalError, ApprovalRequest, env_hash
from engine.display import visible
from engine.jsontext import INT_MAX
from engine.nodes.gateway_key import GatewayKey
from engine.nodes.link import NodeError, NodeLink
from engine.nodes.select import Candidate, NodeSelectError, normalize_node_key, select_node
from engine.nodes.wire import Hello, NodeEvent, Request, Response
from engine.policy.decision import Decision
from engine.principals import key_owner
from engine.protocol.frames import Event
from engine.protocol.methods import EventName
from engine.protocol.requests import ExecRequest
from engine.results import ToolError, ToolResult
from engine.sessions.output import sanitize
from engine.tools.exec import ExecContext
from runner.gateway import node_limits as limits
from runner.gateway.node_keys import NodeKeys
from runner.gateway.node_output import NodeOutputFeed
from runner.gateway.node_runs import NodeRun, denied_result, follow_up, pending_result, waiting_data
from runner.gateway.node_sessions import NodeSessions

if TYPE_CHECKING:
    from runner.gateway.hubs import HubServices

log = logging.getLogger("exechost.gateway.nodes")

EVENT_OUTPUT_CHARS = 180  # reference §5.5: the finished text's output, compacted
SANDBOX_ADMIN_TIMEOUT_SEC = 120.0  # a prune or recreate removes containers one by one
MAX_PENDING_PER_NODE_AGENT = 16  # each agent's share of a node's asks: one agent's flood leaves others room
MAX_ORPHANED_RUNS = 1024
_APPROVAL_ID = re.compile(
    r"[A-Za-z0-9_.:-]{1,128}"
)  # a node flooding the inbox gets refused (askFallback), not shown


def _left_running(node: str, call: asyncio.Future[Response]) -> str | None:
    """The node session a run's answer left running (`node:<node>:<id>`), or None."""
    if call.cancelled() or call.exception() is not None:
        return None
    res = call.result()
    payload = (res.payload or {}) if res.ok else {}
    sid = payload.get("sessionId")
    return f"node:{node}:{sid}" if payload.get("status") == "running" and isinstance(sid, str) else None


def _compact(text: str, limit: int) -> str:
    flat = " ".join(sanitize(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _names_node(node_id: str, name: str, host: str, display_name: str | None) -> bool:
    """Whether a node id would be read as this node's name, address or display name (engine.nodes.select
    normalises names; an address is compared as the IP it is)."""
    wanted = node_id.strip()
    key = normalize_node_key(wanted)
    if wanted in (name, host) or (
        key and key in {normalize_node_key(name), normalize_node_key(display_name or "")}
    ):
        return True
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host)) == wanted
    return False


class NodeHub:
    """Links follow the config (added, changed or removed nodes take effect on the next call)."""

    def __init__(self, services: HubServices) -> None:
        self.services = services
        self.links: dict[str, NodeLink] = {}
        self._runs: dict[tuple[str, str], NodeRun] = {}  # (node name, runId) -> the call waiting on it
        self._retired: set[asyncio.Task[None]] = set()
        self.keys = NodeKeys(services.state_dir)
        self._key: GatewayKey | None = None
        self.held = NodeSessions()  # each agent's node sessions, counted with its sessions here
        # Runs whose link dropped before they answered: their end may still come, once, on a later link.
        self._orphans: dict[tuple[str, str], NodeRun] = {}
        self._last_drop_log: dict[str, float] = {}
        self.dropped = 0  # frames dropped for naming no run of their node (also logged, for the operator)
        self.feed = NodeOutputFeed(services, lambda: self.links)
        services.output.remote = self.feed  # node output goes through the same fan-out as local output

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
                    # Proved on each link: a node other gateways share files this one's work apart.
                    gateway_key=self._gateway_key(),
                )
        return self.links

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
        """A link whose hello presents a node id that another configured node presented first (pinned in
        node-keys.json), or that another connected link holds, is refused before it is connected: nothing
        it sends is read (a node cannot pass itself off as another, whether that one is up or not)."""
        nodes = self.services.config().nodes
        self.keys.forget_ids(set(nodes))
        for name, cfg in nodes.items():
            # A node id is the node's own word, and selection ranks an exact id above the operator's own
            # facts about a node (its address, its display name): an id naming another node is refused.
            if name != link.name and _names_node(hello.node_id, name, cfg.host, cfg.display_name):
                log.warning(
                    "node %s claims node id %r, which names node %s; refused", link.name, hello.node_id, name
                )
                raise NodeError(
                    f"node {link.name} claims node id {hello.node_id!r}, which names node {name} (its name, "
                    f"address or display name); refused (check {link.name}'s node.json)",
                    "INVALID_REQUEST",
                )
        pinned = self.keys.holder(hello.node_id)
        if pinned is not None and pinned != link.name:
            log.warning(
                "node %s claims node id %s, pinned to node %s; refused", link.name, hello.node_id, pinned
            )
            raise NodeError(
                f"node {link.name} claims node id {hello.node_id}, which node {pinned} holds; refused (check "
                f"{link.name}'s node.json)",
                "INVALID_REQUEST",
            )
        for other in self.links.values():
            held = other.hello.node_id if other.hello is not None and other.state == "connected" else None
            if other is not link and held == hello.node_id:
                log.warning(
                    "node %s claims node id %s, which node %s holds; refused", link.name, held, other.name
                )
                raise NodeError(
                    f"node {link.name} claims node id {held}, which node {other.name} holds; "
                    f"refused (check {link.name}'s node.json)",
                    "INVALID_REQUEST",
                )
        self.keys.pin(link.name, hello.node_id)

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
            "sessionKey": ctx.session_key or None,
            "runId": run_id,
            # The gateway's effective policy: per-call values the node may only tighten with.
            "security": decision.security,
            "ask": decision.ask,
            "background": bool(given.background),
            "pty": bool(given.pty),
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
        # The key this run's events are filed under, as the gateway files its own (never the frame's).
        events_key = ctx.session_key or ctx.scope_key
        owner = None if ctx.operator else key_owner(ctx.scope_key)
        quota = self.services.sessions.quota
        if owner is not None and quota is not None:  # a place among the agent's sessions, or refused
            registry = self.services.sessions.registry
            await self.held.admit(
                owner, run_id, link.name, ctx.scope_key, quota, registry, lambda: self.links
            )
        run = NodeRun(link, run_id, command, sandboxed, started, ctx.agent_id, events_key)
        self.keys.give(link.name, events_key)  # its background sessions may report under it later
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
        self.held.answered(run.run_id, _left_running(run.link.name, call))
        lost = not call.cancelled() and isinstance(call.exception(), NodeError)
        if lost and getattr(call.exception(), "error_code", "") == "NODE_LINK_LOST" and not run.ended:
            self._orphans[key] = run
            while len(self._orphans) > MAX_ORPHANED_RUNS:
                del self._orphans[next(iter(self._orphans))]

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
                "process", {"action": action, "params": node_params, "scope": scope}, timeout=60
            )
        except NodeError as exc:
            raise ToolError(str(exc)) from None
        if not res.ok:
            err = res.error or {}
            raise ToolError(f"node {link.name}: {err.get('message') or 'failed'}")
        payload = res.payload or {}
        text, details = str(payload.get("text") or ""), dict(payload.get("details") or {})
        if action == "remove" and isinstance(sid, str) and details.get("status") == "completed":
            self.held.removed(sid)  # no longer one of its agent's sessions
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

    def _session_row(self, link: NodeLink, row: dict[str, Any]) -> dict[str, Any] | None:
        """A node's session row in the gateway's terms: its id prefixed, its node named (by the link, never
        by the row)."""
        raw = row.get("sessionId")
        if not isinstance(raw, str) or not 0 < len(raw) <= 128 or ":" in raw:
            return None
        where = "sandbox" if row.get("host") == "sandbox" else "node"
        return {
            **limits.session_row(row),
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
        self, node: str, method: str, params: dict[str, Any], agent: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """One sandbox admin verb on one node: (the node's name, its payload); for an agent, on a node it
        may use only."""
        link = self.select(node, agent=agent)
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

    def _on_event(self, link: NodeLink, ev: NodeEvent) -> None:
        """Reference §5.5: exec.started|finished|denied as the agent's system events."""
        p = ev.payload
        if ev.event == EventName.SESSION_OUTPUT:
            self.feed.on_output(link, p)
            return
        if ev.event == "session.offsets":
            self.feed.on_offsets(link, p)
            return
        # For the consoles' session lists:
        if ev.event in (EventName.SESSION_STARTED, EventName.SESSION_EXITED):
            row = self._session_row(link, p["session"]) if isinstance(p.get("session"), dict) else None
            if row is not None:  # every scope on the node: the operators' consoles only
                frame = Event(event=ev.event, data=row)
                for conn in self.services.connections():
                    if conn.operator and "sessions" in conn.topics:
                        conn.send(frame)
                sid = row["sessionId"]
                self.feed.session_event(ev.event, sid)
            return
        raw_run = p.get("runId")
        run = self._runs.get((link.name, raw_run)) if isinstance(raw_run, str) else None
        if run is None and isinstance(raw_run, str) and ev.event in ("exec.finished", "exec.denied"):
            run = self._orphans.pop((link.name, raw_run), None)  # its end, after a link was lost
        if ev.event == EventName.SYSTEM_EVENT:
            # A session's own notice (a background exit): for the run it names on this link, else for a
            # key the gateway gave this node; filed under the gateway's key, never a frame's other one.
            raw_key = p.get("sessionKey")
            key = run.session_key if run is not None else raw_key if isinstance(raw_key, str) else ""
            if run is None and not self.keys.given(link.name, key):
                self._drop_frame(link, ev.event, f"session key {key[:80]!r} was never given to it")
                return
            owner = key_owner(key)
            if owner is not None and not self.services.config().may_use_node(owner, link.name):
                self._drop_frame(link, ev.event, f"agent {owner} may no longer use this node")
                return
            mark = f"[node {link.name}] "
            text = limits.cut(
                sanitize(limits.field_text(p, "text", limits.EVENT_TEXT_CHARS)), limits.EVENT_TEXT_CHARS
            )
            # The node's notices keep a few of the queue's places (its newest): never the agent's own.
            self.services.events.enqueue(key, mark + text, share=(mark, limits.MAX_NODE_EVENTS_PER_KEY))
            return
        if ev.event not in ("exec.started", "exec.finished", "exec.denied"):
            self._drop_frame(link, ev.event, "not an event nodes send")
            return
        if run is None or run.ended:
            # A run this gateway never started on this node, or one whose end was already reported.
            self._drop_frame(link, ev.event, f"run {str(raw_run)[:80]!r} is not in flight on this node")
            return
        if ev.event == "exec.started":
            if run.start_seen:  # taken once, like its end: a repeated start would push out the agent's events
                self._drop_frame(link, ev.event, f"run {run.run_id[:80]!r} already started")
                return
            run.start_seen = True
        if ev.event in ("exec.finished", "exec.denied"):
            run.ended = True
        if run.detached and ev.event in ("exec.finished", "exec.denied"):
            return  # the follow-up in the gateway's words says it (once)
        if p.get("suppressNotifyOnExit") is True or not self.services.config().exec.notify_on_exit:
            return
        key, run_id = run.session_key, run.run_id
        command = _compact(run.command, limits.EVENT_COMMAND_CHARS)  # what the agent asked, as recorded here
        if ev.event == "exec.started":
            text = f"Exec started (node={link.name} id={run_id}): {command}"
        elif ev.event == "exec.finished":
            timed_out = p.get("timedOut") is True
            output = _compact(limits.field_text(p, "output", 64 * 1024), EVENT_OUTPUT_CHARS)
            code = p.get("exitCode")
            code = code if isinstance(code, int) and not isinstance(code, bool) else None
            if not (timed_out or code != 0 or output):
                return
            ended = "timeout" if timed_out else f"code {code}"
            text = f"Exec finished (node={link.name} id={run_id}, {ended})"
            if output:
                text += f"\n{output}"
        else:
            reason = _compact(limits.field_text(p, "reason", 4096) or "denied", limits.EVENT_REASON_CHARS)
            text = f"Exec denied (node={link.name} id={run_id}, {reason}): {command}"
        self.services.events.enqueue(key, text)

    def _drop_frame(self, link: NodeLink, what: str, why: str) -> None:
        """A node frame that names nothing of its own: never acted on, counted, and logged for the operator
        (at most one line a second per node, so a flood cannot fill the log either)."""
        self.dropped += 1
        now = time.monotonic()
        last = self._last_drop_log.get(link.name, 0.0)
        if now - last >= 1.0:
            self._last_drop_log[link.name] = now
            log.warning(
                "node %s: dropped %s: %s (%d frames dropped from nodes so far)",
                link.name,
                visible(what),  # the node's own event name: never raw into the log
                visible(why),
                self.dropped,
            )

    async def _on_request(self, link: NodeLink, req: Request) -> dict[str, Any]:
        if req.method != "approval.request":
            raise NodeError("unknown method", "UNAVAILABLE")
        return await self._relay_approval(link, req.params)

    async def _relay_approval(self, link: NodeLink, params: dict[str, Any]) -> dict[str, Any]:
        """A node's ask, into this gateway's inbox, for a run the gateway started on this very link: the
        agent, session key and node id come from the gateway's record of that run and of the link, never
        from the frame, so a node cannot file an ask as another agent, for another node's run, or for a run
        that ended. It counts against the node's cap and the run's agent's."""
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
        raw_run = view.get("runId")
        run = self._runs.get((link.name, raw_run)) if isinstance(raw_run, str) else None
        if run is None:
            self._drop_frame(
                link, "approval.request", f"run {str(raw_run)[:80]!r} is not in flight on this node"
            )
            return {"decision": None, "resolvedBy": "no-such-run"}
        if run.asks >= limits.MAX_ASKS_PER_RUN:
            self._drop_frame(link, "approval.request", f"run {run.run_id} already asked {run.asks} times")
            return {"decision": None, "resolvedBy": "too-many-pending"}
        run.asks += 1
        # Without an approver the ask still waits in the inbox (exechost approve, or a console attaching
        # later), as the gateway's own asks do; nobody deciding in time is the node's askFallback.
        manager = self.services.approvals
        mine = (
            r for r in manager.pending() if (r.request.node_id, r.request.agent_id) == (node_id, run.agent_id)
        )
        if sum(1 for _ in mine) >= MAX_PENDING_PER_NODE_AGENT:
            return {"decision": None, "resolvedBy": "too-many-pending"}
        env = limits.env_pairs(view.get("env"))
        command = limits.cut(view.get("command"), limits.COMMAND_CHARS)
        warnings = limits.warnings(view.get("warnings"))
        if " ".join(command.split()) != " ".join(run.command.split()):
            # The operator sees what the agent asked for beside what the node says it will run.
            warnings.append(
                limits.cut(f"the agent's command on this run was: {run.command}", limits.WARNING_CHARS)
            )
        request = ApprovalRequest(
            command=command,
            cwd=limits.cut(view.get("cwd"), limits.PATH_CHARS),
            host="node",
            agent_id=run.agent_id,
            session_key=run.session_key,
            security=limits.cut(view.get("security"), limits.WORD_CHARS) or "allowlist",
            ask=limits.cut(view.get("ask"), limits.WORD_CHARS) or "on-miss",
            ask_fallback=limits.cut(view.get("askFallback"), limits.WORD_CHARS) or "deny",
            allowed_decisions=limits.allowed_decisions(view.get("allowedDecisions")),
            resolved_path=limits.optional(view.get("resolvedPath"), limits.PATH_CHARS),
            node_id=node_id,
            node_name=link.name,
            env_hash=env_hash(dict(env)),
            # Who asked, in the node namespace and made here: a frame's id could name another source's
            # (`socket:X`, whose withdraw would end this ask) or another node's ask.
            node_approval_id=f"node:{secrets.token_hex(12)}",
            env=env,
            decision_json=limits.decision_json(view.get("decision")),
            warnings=tuple(warnings),
            agent_reason=limits.optional(view.get("agentReason"), limits.REASON_CHARS),
            egress=limits.optional(view.get("egress"), 300),  # a node sandbox's "name:port"
        )
        while True:
            try:
                record, _ = manager.register(request)
            except ApprovalError:  # the queue caps (per agent, in all) hold for nodes too: askFallback
                return {"decision": None, "resolvedBy": "too-many-pending"}
            run.records.append(record)
            run.asked.set()
            decision = await manager.wait(record)
            if decision == "allow-once" and not manager.consume_allow_once(
                record, request.session_key, request.node_approval_id
            ):
                continue  # one approval, one run: this ask needs its own
            answer: dict[str, Any] = {
                "decision": decision,
                "resolvedBy": record.resolved_by,
                "reason": record.reason,
            }
            if record.grant is not None:  # a yes with limits: the node keeps it in its grants, not for ever
                answer["grant"] = record.grant.to_json()
            return answer

    async def close(self) -> None:
        for link in list(self.links.values()):
            with contextlib.suppress(Exception):
                await link.close()
        self.links.clear()
