"""Egress on the gateway and on a node: what the sandboxes' proxy asks of the operator's side (DESIGN §9).

The proxy (engine.sandbox.egress) decides nothing alone. For each connection this hub reads the agent's
`[sandbox.egress]` (reloaded with the config), the names an allow-always saved in the approvals file, and the
live grants; a name none of them settles becomes an ask in the same inbox as commands (`approvals pending`,
the consoles, `exechost approve`), and the connection waits for it, up to the ask's timeout. Asks for one
agent, kind (a plain request or a tunnel), name and port coalesce into one row. Every connection becomes
an `egress.connection` event on the sandboxes topic and a line of its principal's log,
`<state>/history/egress/<principal>.jsonl` (`exechost sandbox egress`).

A node runs the same hub for its own sandboxes, with its own config and approvals file; its asks go through
the node's approval manager, which relays them to the gateway's inbox like command asks (runner/node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from engine.approvals import generations
from engine.approvals.decisions import DECISIONS
from engine.approvals.generations import Stamp
from engine.approvals.grants import EGRESS_PREFIX, GrantStore
from engine.approvals.groupwrite import GroupWriter
from engine.approvals.history import HISTORY_DIR, HistoryError
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalError, ApprovalRecord, ApprovalRequest
from engine.approvals.store import ApprovalsStore
from engine.commands import hostnet
from engine.config.egress import MAX_CONNECTIONS, EgressPolicy, Pattern, approval_entry, decide, parse_pattern
from engine.config.model import Config
from engine.protocol.methods import EventName, Topic
from engine.sandbox import default_manager
from engine.sandbox.egress import forwarder, heldcopy
from engine.sandbox.egress.log import EgressLog, encode
from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
from engine.sandbox.settings import is_shared, split_namespace


class EgressServices(Protocol):
    """What the hub needs of its owner (the gateway's services, or a node's server)."""

    approvals: ApprovalManager
    store: ApprovalsStore
    grants: GrantStore
    state_dir: Path

    def config(self) -> Config: ...

    def broadcast(self, topic: str, event: str, data: dict[str, Any]) -> None: ...


log = logging.getLogger("exechost.egress")

_Found = tuple[dict[str, str], tuple[Pattern, ...]]  # a Decision's `resolve` map and `deny` entries
RECENT = 1000  # connections kept in memory for `sandbox egress` (the history file keeps more)


class EgressHub:
    def __init__(
        self, services: EgressServices, *, bind_ask: Callable[[Request], Callable[[], None]] | None = None
    ) -> None:
        self.services = services
        # A node's: ties an ask to a call in flight for its agent while it is registered (returns the undo).
        self.bind_ask = bind_ask
        self.proxy = EgressProxy(self.decide, self.record, self.cap)
        self.log = EgressLog(services.state_dir / HISTORY_DIR)
        self.writer = GroupWriter("egress history", self._write)
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._loop: asyncio.AbstractEventLoop | None = None
        # A revoke or rotation ends the agent's connections at once, and a proof the config cut off ends
        # its runs' (the bump names the proof); what they ask later is refused by the generation (and the
        # proof) each request carries (decide), with no list of listeners to chase.
        services.approvals.generations.listen(self._revoked_agent)

    # -- lifecycle

    async def start(self) -> None:
        """Serve every egress sandbox this state dir holds (they outlive a gateway), and new ones as made."""
        manager = default_manager()
        manager.egress = self.listen
        manager.egress_gone = self._gone
        self._loop = asyncio.get_running_loop()
        hostnet.EGRESS = self.host_runs  # each agent's host runs' network namespace: its way out is here
        hostnet.GENERATION = self.host_generation
        for agent, authority in hostnet.served(str(self.services.state_dir)):  # made under an earlier hub
            name = hostnet.egress_name(agent, authority)
            try:
                await self._listen_host(name, agent, forwarder.prepare_dir(name), authority)
            except OSError as exc:
                log.warning("egress: host runs of %s not served: %s", agent, exc)
        try:
            entries = await asyncio.to_thread(manager.registry.read)
        except Exception as exc:  # a damaged registry: the next exec into each sandbox listens again
            log.warning("egress: sandboxes not re-served: %s", exc)
            return
        for entry in entries:
            directory = forwarder.socket_dir(entry.containerName)
            if not directory.is_dir():
                continue
            try:
                uid = os.stat(directory / forwarder.SOCKET_NAME).st_uid
            except OSError:
                uid = None
            try:
                owner = split_namespace(entry.sessionKey)[0] + (entry.agentId or "main")  # (as ensured)
                await self.listen(entry.containerName, owner, uid)
            except OSError as exc:
                log.warning("egress: %s not served: %s", entry.containerName, exc)

    async def close(self) -> None:
        manager = default_manager()
        if manager.egress == self.listen:
            manager.egress = None
            manager.egress_gone = None
        if self.host_runs == hostnet.EGRESS:
            hostnet.EGRESS = None
        if self.host_generation == hostnet.GENERATION:
            hostnet.GENERATION = None
        await self.proxy.close()
        await self.writer.barrier()

    def _gone(self, sandbox: str) -> None:
        """A sandbox was removed (from any thread: removals run in workers): its listener stops."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop_if_gone, sandbox)

    def _stop_if_gone(self, sandbox: str) -> None:
        # A sandbox made again under the name meanwhile has a listener of its own again: that one stays.
        if not self.proxy.listening(sandbox):
            self.proxy.stop(sandbox)

    def _revoked_agent(self, key: str) -> None:
        """A bump of `key`: an agent (revoked, rotated) or a proof the config cut off (its runs' only)."""
        cut = self.proxy.cut(key)
        if cut:
            log.warning("egress: %d connection(s) of revoked agent or cut-off proof %s ended", cut, key)

    async def listen(self, sandbox: str, agent_id: str, uid: int | None) -> bool:
        """Serve `sandbox` as `agent_id` under its credential generation now (a run of the agent's is making
        or entering it): a revoke or rotation after this refuses what it asks. The shared sandbox is
        nobody's own: no generation. True (nothing served, its listener stopped) when the sandbox is served
        under a generation or proof ended since: every process in it was started under that ended
        authority, so the caller ends the sandbox before a run of the new one enters it (SandboxManager
        ._egress_ready), and a process the old credential left there never gets the new one's way out."""
        shared = is_shared(sandbox)
        # Under the generation that authorized the run entering it (its stamp), not the one current as
        # it enters: a run taken up before a revoke that enters after it never serves the sandbox anew.
        stamp = generations.stamped()
        proof = ("", 0)
        if shared:
            generation = None
        elif stamp is not None and stamp.agent == split_namespace(agent_id)[1]:
            generation = stamp.generation
            proof = (stamp.proof, stamp.proof_generation)  # its caller's proof's cut refuses it too
        else:
            generation = self.services.approvals.generations.current(agent_id)
        served = self.proxy.served_under(sandbox, agent_id)
        # (a run whose own authority ended re-serves nothing and ends nothing: it is refused at its spawn)
        current = not (stamp is not None and stamp.stale())
        if (
            served is not None
            and generation is not None
            and current
            and self._outlived(agent_id, served, generation)
        ):
            self.proxy.stop(sandbox)
            return True
        directory = forwarder.socket_dir(sandbox)
        await self.proxy.listen(sandbox, agent_id, directory, uid, shared, generation=generation, proof=proof)
        return False

    def _outlived(self, agent_id: str, served: tuple[int | None, str, int], generation: int) -> bool:
        """Whether a listener served under `served` (generation, proof, proof generation) is of an authority
        that ended before a run of `generation` entered: its sandbox's processes are that authority's."""
        was, proof, proof_generation = served
        stamps = self.services.approvals.generations
        older = was is not None and was < generation
        return older or stamps.stale(agent_id, was) or stamps.proof_ended(proof, proof_generation, live=True)

    HOST_WAIT = 10.0  # seconds a host run's namespace waits for its listener (the loop is busy, at most)

    def host_generation(self, agent_id: str) -> hostnet.Authority | None:
        """What a host run of `agent_id` made now is authorized under: the agent's current credential
        generation and the proof its stamp names (at that proof's generation), or None when the run
        asking carries a stamp a revoke, a rotation or its proof's cut ended (it is refused)."""
        stamp = generations.stamped()
        mine = stamp is not None and stamp.agent == split_namespace(agent_id)[1]
        if stamp is not None and mine and stamp.stale():
            return None
        current = self.services.approvals.generations.current(agent_id)
        if stamp is None or not mine or not stamp.proof:
            return hostnet.Authority(current)
        return hostnet.Authority(current, stamp.proof, stamp.proof_generation)

    async def _listen_host(
        self, name: str, agent_id: str, directory: Path, authority: hostnet.Authority | None
    ) -> None:
        generation = authority.generation if authority is not None else None
        proof = (authority.proof, authority.proof_generation) if authority is not None else ("", 0)
        await self.proxy.listen(name, agent_id, directory, generation=generation, proof=proof)

    def host_runs(self, agent_id: str, authority: hostnet.Authority | None = None) -> hostnet.Egress | None:
        """Serve `agent_id`'s gateway-host runs of one `authority` as a sandbox of its is served
        (engine.commands.hostnet): the same proxy, its `[sandbox.egress]`, asks in the same inbox, one
        listener per credential generation and proof (a revoke, a rotation or the proof's cut cuts and
        refuses the older ones' at once). From a worker thread (the namespace is made there); None when
        the forwarder cannot be had (no way out, as with mode none)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        name = hostnet.egress_name(agent_id, authority)
        try:
            directory = forwarder.prepare_dir(name)
            # The gateway's own build, run from its fd: never sandbox-bin's file, which whoever writes
            # the state dir writes, stamp and all (engine.sandbox.egress.heldcopy).
            held = heldcopy.held_fd()
        except (OSError, forwarder.ForwarderUnavailable) as exc:
            log.warning("egress: host runs of %s have no way out: %s", agent_id, exc)
            return None
        served = asyncio.run_coroutine_threadsafe(
            self._listen_host(name, agent_id, directory, authority), loop
        )
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if not on_loop:  # never wait on our own loop
            try:
                served.result(self.HOST_WAIT)
            except Exception as exc:
                log.warning("egress: host runs of %s not served: %s", agent_id, exc)
                return None
        socket = str(directory / forwarder.SOCKET_NAME)
        return hostnet.Egress(
            heldcopy.exec_path(held), forwarder.PORT, socket, dict(forwarder.PROXY_ENV), fd=held
        )

    # -- decisions

    def _egress(self, agent_id: str) -> dict[str, Any]:
        """The agent's `[sandbox.egress]` keys, merged over the global ones (reloaded with the config). Read
        here, not through resolve_settings, which builds every sandbox setting (~0.4 ms on the loop).
        `agent_id` is the principal: on a shared node `<namespace><agent>`, whose settings are the agent's."""
        config = self.services.config()
        return dict(config.sandbox_for(split_namespace(agent_id)[1]).egress) if config is not None else {}

    def cap(self, agent_id: str) -> int:
        """The agent's `maxConnections` (looked up at each accept and each request head)."""
        return int(self._egress(agent_id).get("max_connections", MAX_CONNECTIONS))

    async def decide(self, req: Request) -> Decision:
        """The decision for one request, refused whenever its agent's credential generation moved past the
        one its sandbox was served under: checked first (no ask is filed for a revoked agent) and again
        after every await (a revoke meanwhile never lets it through)."""
        decision = await self._decide(req)
        if decision.allowed and self._revoked(req):
            return self._refused(req, decision.resolve, decision.deny)
        return decision

    def _revoked(self, req: Request) -> bool:
        """The request's stamp is stale: its agent's generation ended, or the proof its serving run's
        caller was the agent by (ended at a recheck, or no longer given by the config now)."""
        stamps = self.services.approvals.generations
        return stamps.stale(req.agent_id, req.generation) or stamps.proof_ended(
            req.proof, req.proof_generation, live=True
        )

    @staticmethod
    def _refused(req: Request, resolve: dict[str, str], deny: tuple[Pattern, ...]) -> Decision:
        why = (
            f"agent {req.agent_id} was revoked (or its credential rotated, or what made its caller the "
            "agent was cut off by the config) since a run of it served this sandbox"
        )
        return Decision(False, why, "revoke", resolve, deny)

    async def _decide(self, req: Request) -> Decision:
        services = self.services
        if self._revoked(req):
            return self._refused(req, {}, ())
        policy = EgressPolicy.from_config(self._egress(req.agent_id))
        found = dict(policy.resolve), policy.deny  # (every resolved address is checked against `deny`)
        approved = _patterns(await asyncio.to_thread(services.store.egress_allow, req.agent_id))
        verdict = decide(policy, req.name, req.port, approved, tunnel=req.tunnel)
        if verdict.action != "ask":
            return Decision(verdict.action == "allow", verdict.rule, "policy", *found)
        granted = await asyncio.to_thread(self._use_grant, req)
        if granted is not None:
            return Decision(True, granted[0], granted[1], *found)
        return await self._ask(req, verdict.rule, found)

    def _use_grant(self, req: Request) -> tuple[str, str] | None:
        """A live grant for this name takes one use: (rule, who granted it); None when none applies."""
        grants = self.services.grants
        for grant in grants.active(req.agent_id):
            if grant.session_key is not None and grant.session_key != req.sandbox:
                continue
            for text in grant.patterns:
                if not text.startswith(EGRESS_PREFIX):
                    continue
                pattern = _pattern(text[len(EGRESS_PREFIX) :])
                hit = pattern is not None and pattern.matches(req.name, req.port, req.tunnel)
                if hit and grants.consume([grant.id]):
                    return f"grant {grant.id} ({grant.left()})", grant.granted_by
        return None

    async def _ask(self, req: Request, why: str, found: _Found) -> Decision:
        approvals = self.services.approvals
        # The ask is for what an allow-always saves: `http://name:port` (a plain request the proxy reads)
        # or `name:port` (a tunnel, bytes it does not read). Two kinds never coalesce into one row.
        target = approval_entry(req.name, req.port, req.tunnel)
        kind = "tunnel: CONNECT/SOCKS5" if req.tunnel else "plain http"
        request = ApprovalRequest(
            command=f"connect {target} [{kind}]",
            cwd="",
            host="sandbox",
            agent_id=split_namespace(req.agent_id)[1],  # the agent, as its gateway names it
            session_key=req.sandbox,
            owner=req.agent_id if split_namespace(req.agent_id)[0] else "",  # (a shared node's gateway's)
            allowed_decisions=DECISIONS,
            egress=target,
        )
        undo = self.bind_ask(req) if self.bind_ask is not None else None
        # The ask records the proof its serving run's caller presented, as a command's ask does: the
        # proof's cut settles it (ApprovalManager.end_proofs).
        stamp = None
        if req.generation is not None:
            stamp = Stamp(
                request.agent_id, req.generation, approvals.generations, req.proof, req.proof_generation
            )
        token = generations.authorize(stamp)
        try:
            record, _ = approvals.register(request, generation=req.generation)
        except ApprovalError as exc:
            return Decision(False, f"ask refused: {exc}", "policy", *found)
        finally:
            generations.reset(token)
            if undo is not None:
                undo()
        # Every connection of this sandbox to this target while the ask waits joins it (one row, its count
        # shown to whoever answers), and one answer settles them all: allow-once is the ask's one use, not
        # each connection's (never consumed per connection, as a command's is per requester). Nothing after
        # the answer shares it: a resolved ask is never joined, so the next connection asks again.
        decision = await approvals.wait(record)
        by = record.resolved_by or "operator"
        if decision in ("allow-once", "allow-always"):
            if self._revoked(req):  # its generation ended while it waited: nothing is let through or saved
                return self._refused(req, *found)
            if decision == "allow-always":
                await asyncio.to_thread(self._remember, record, req)
            limits = f", {record.grant.describe()}" if record.grant else ""
            return Decision(True, f"approved {record.slug} ({decision}{limits})", by, *found)
        if decision == "deny":
            reason = f": {record.reason}" if record.reason else ""
            return Decision(False, f"denied by {by} (ask {record.slug}){reason}", by, *found)
        return Decision(False, f"{why}, and the ask {record.slug} got no decision ({by})", by, *found)

    def _remember(self, record: ApprovalRecord, req: Request) -> None:
        """allow-always: the name into the agent's egress allowlist, or (with limits) a grant, once per
        record however many connections waited on it."""
        entry = approval_entry(req.name, req.port, req.tunnel)
        try:
            if record.grant is not None:
                if record.grant_id is not None:  # chosen with the decision: made once (GrantStore.ensure)
                    self.services.grants.ensure(
                        record.grant_id,
                        req.agent_id,
                        [EGRESS_PREFIX + entry],
                        record.request.command,
                        record.grant,
                        session_key=req.sandbox,
                        granted_by=record.resolved_by or "operator",
                    )
            else:
                self.services.store.persist_egress_allow(req.agent_id, entry)
        except Exception as exc:  # the connection still goes; the next one asks again
            log.warning("egress: could not save allow-always for %s: %s", entry, exc)

    # -- records

    def record(self, conn: Connection) -> None:
        row = conn.to_json()
        self.recent.append(row)
        self.writer.put(encode(row))
        self.services.broadcast(Topic.SANDBOXES, EventName.EGRESS_CONNECTION, row)

    def _write(self, lines: list[bytes]) -> None:
        try:
            self.log.write_lines(lines)
        except HistoryError as exc:
            log.error("%s", exc)

    async def connections(self, agent_id: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first: from the history file (every gateway's), else what this one saw."""
        await self.writer.barrier()
        try:
            return await asyncio.to_thread(self.log.recent, agent_id, limit)
        except OSError:
            rows = [r for r in reversed(self.recent) if agent_id is None or r.get("agentId") == agent_id]
            return rows[:limit]


def _pattern(text: str) -> Pattern | None:
    with contextlib.suppress(ValueError):
        return parse_pattern(text)
    return None


def _patterns(texts: list[str]) -> list[Pattern]:
    return [p for p in (_pattern(t) for t in texts) if p is not None]
