"""The sessions each agent started on nodes, counted by the gateway against the same maxSessionsPerAgent as
its sessions here: a node's own session table has no agents' caps, and an agent allowed on a node kept as
many background sessions there as it liked, each with its own output log, on a node everyone shares.

The gateway knows which agent started each node run. A run holds a place from before it is sent until it
answers (so concurrent runs cannot all pass the check); one that answers with a running session keeps its
place as that session, until the agent removes it (`process remove`) or the node no longer lists it (asked
only when the agent is at its cap: a session the node's sweep dropped frees its place then).

The node is the owner of the truth about its own sessions, never about whose they are: each time a link
comes up (the first after a gateway restart included), its session list is read before any run is
admitted, and every background session it lists takes its agent's place again, so a restart never hands an
agent another full cap. A row counts only under a key the gateway itself gave that node (node-keys.json:
the key a run of the agent was sent there with) and only for an agent allowed on that node; any other row
is ignored (and logged). A row's scopeKey is the node's word: believed, it let a node fill the cap of an
agent that never ran there, or may not use it, and lock it out of every new session, local ones too."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from engine.nodes.link import NodeError, NodeLink
from engine.principals import key_owner
from engine.sessions.quota import Held, Quota, too_many_sessions

log = logging.getLogger("exechost.gateway.nodes")

COUNT_TIMEOUT_SEC = 5.0  # a node's session list at link-up; a node slower than this is counted as empty
MAX_LIST_PAGES = 64  # a node's answer to `process list` for one scope; past it, its sessions are all kept


# (node, scope key, its agent) -> whether the gateway gave that node the key, for an agent allowed there.
Vouch = Callable[[str, str, str], bool]


class NodeSessions:
    """{agent: {place: (node, scope)}}: a place is a run in flight (`run:<runId>`) or the session it left
    running (`node:<node>:<sessionId>`, as the agent names it). `vouch` says which of a node's rows the
    gateway stands behind (module docstring)."""

    def __init__(self, vouch: Vouch) -> None:
        self._vouch = vouch
        self._held: dict[str, dict[str, tuple[str, str]]] = {}
        self._runs: dict[str, str] = {}  # runId -> its agent
        # node -> (the link-up, connectedAtMs, whose list is read; the reading)
        self._counted: dict[str, tuple[int | None, asyncio.Task[None]]] = {}

    def count(self, agent: str) -> int:
        return len(self._held.get(agent, {}))

    async def admit(
        self,
        agent: str,
        run_id: str,
        node: str,
        scope: str,
        quota: Quota,
        registry: Held,
        links: Callable[[], dict[str, NodeLink]],
    ) -> None:
        """Give run `run_id` a place among `agent`'s sessions, or ToolError when it keeps its most (its
        sessions here counted too). At the cap, first ask the nodes which of its sessions they still hold."""
        most = quota.caps(agent)[0]
        await self.adopt(links)
        if quota.held_here(agent, registry) + self.count(agent) >= most:
            await self._recount(agent, links)
        count = quota.held_here(agent, registry) + self.count(agent)
        if count >= most:  # no await since the count: concurrent runs cannot all pass
            raise too_many_sessions(quota.who(agent), count)
        self._held.setdefault(agent, {})[f"run:{run_id}"] = (node, scope)
        self._runs[run_id] = agent

    async def adopt(self, links: Callable[[], dict[str, NodeLink]]) -> None:
        """Every connected link's session list, read once per link-up (every admit waits for the reading in
        progress): the background sessions a node lists take their agents' places (added, never freed here:
        a place freed by a stale list would be a place too many). A node that does not answer within
        COUNT_TIMEOUT_SEC is not asked again on this link (logged): one that never answers must not hold up
        every run."""
        readings = []
        for name, link in list(links().items()):
            up = link.connected_at_ms
            if link.state != "connected":
                continue
            known = self._counted.get(name)
            if known is None or known[0] != up:
                known = self._counted[name] = (up, asyncio.ensure_future(self._read(name, link)))
            readings.append(known[1])
        for reading in readings:
            await asyncio.shield(reading)

    async def _read(self, name: str, link: NodeLink) -> None:
        rows = await _all_sessions(link.call)
        ignored: dict[str, int] = {}
        for row in rows or []:
            sid, scope = row.get("sessionId"), row.get("scopeKey")
            if not isinstance(scope, str) or not isinstance(sid, str) or row.get("backgrounded") is not True:
                continue
            owner = key_owner(scope)
            if owner is None:
                continue
            if not self._vouch(name, scope, owner):
                ignored[owner] = ignored.get(owner, 0) + 1
                continue
            self._held.setdefault(owner, {}).setdefault(f"node:{name}:{sid}", (name, scope))
        for owner, count in sorted(ignored.items())[:16]:  # names are checked ids: safe to log
            log.warning(
                "node %s lists %d session(s) of agent %s under keys this gateway never gave it (or for an "
                "agent not allowed there): not counted",
                name,
                count,
                owner,
            )

    def answered(self, run_id: str, session_id: str | None) -> None:
        """Run `run_id` answered: its place becomes the session it left running, or is free."""
        agent = self._runs.pop(run_id, None)
        if agent is None:
            return
        held = self._held.get(agent, {})
        place = held.pop(f"run:{run_id}", None)
        if session_id is not None and place is not None:
            held[session_id] = place
        if not held:
            self._held.pop(agent, None)

    def kept(self, agent: str, session_id: str, node: str, scope: str) -> None:
        """A session a run left running, heard of late (its answer was lost with a link): counted as its
        answer would have counted it (it runs already: there is nothing left to refuse)."""
        self._held.setdefault(agent, {})[session_id] = (node, scope)

    def removed(self, agent: str, session_id: str) -> None:
        """`agent` removed this node session: its place is free. Only that agent's: a node reuses a
        session's id once it is gone, and another agent's place under the same id is another session."""
        held = self._held.get(agent)
        if held is not None and held.pop(session_id, None) is not None and not held:
            del self._held[agent]

    async def _recount(self, agent: str, links: Callable[[], dict[str, NodeLink]]) -> None:
        """Free the places of `agent`'s sessions its nodes no longer list (swept, or removed there). A
        node that cannot say keeps all of them counted."""
        held = self._held.get(agent, {})
        wanted = {place for sid, place in held.items() if sid.startswith("node:")}
        for node, scope in wanted:
            link = links().get(node)
            if link is None or link.state != "connected":
                continue
            listed = await _listed(functools.partial(link.call, principal=agent), scope)
            if listed is None:
                continue
            prefix = f"node:{node}:"
            for sid, place in list(held.items()):
                if place == (node, scope) and sid.startswith(prefix) and sid[len(prefix) :] not in listed:
                    del held[sid]


async def _all_sessions(call: Callable[..., Awaitable[Any]]) -> list[dict[str, Any]] | None:
    """A node's session rows (every scope it shows this gateway); None when it cannot say."""
    try:
        res = await call("sessions.list", {}, timeout=COUNT_TIMEOUT_SEC)
    except NodeError as exc:
        log.warning("could not count node sessions: %s", exc)
        return None
    rows = (res.payload or {}).get("sessions") if res.ok else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None


async def _listed(call: Callable[..., Awaitable[Any]], scope: str) -> set[str] | None:
    """The session ids a node lists in `scope`, every page; None when it cannot say."""
    ids: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = {} if cursor is None else {"cursor": cursor}
        try:
            res = await call("process", {"action": "list", "params": params, "scope": scope}, timeout=60)
        except NodeError as exc:
            log.warning("could not count node sessions in %s: %s", scope, exc)
            return None
        if not res.ok:
            return None
        details = (res.payload or {}).get("details") or {}
        for row in details.get("sessions") or []:
            if isinstance(row, dict) and isinstance(row.get("sessionId"), str):
                ids.add(row["sessionId"])
        cursor = details.get("next")
        if not isinstance(cursor, str) or not cursor:
            return ids
    return None
