"""`agents revoke` reaching the nodes: `agent.revoke` goes to every configured node at once, and again on
each later link to a node that has not answered it (engine.nodes.revocations), so a node that was down at the
revoke, or a revoke made while no gateway ran, still ends what the agent left running there."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from engine.nodes.link import NodeError, NodeLink
from engine.nodes.revocations import Revocations
from engine.nodes.wire import AGENT_REVOKE

log = logging.getLogger("exechost.gateway.nodes")

ANSWER_TIMEOUT_SEC = 20.0  # a node answers once the agent's sessions there were told to end


class NodeRevoke:
    def __init__(
        self, store: Revocations, links: Callable[[], dict[str, NodeLink]], nodes: Callable[[], Iterable[str]]
    ) -> None:
        self.store = store
        self._links = links  # every configured node's link (made, not connected, as the config says)
        self._nodes = nodes  # the configured node names: a revocation all of them answered is forgotten
        self._locks: dict[str, asyncio.Lock] = {}  # one delivery per node at a time, in order
        self._tasks: set[asyncio.Task[int]] = set()

    def configured(self) -> bool:
        """Whether any node is configured (a revoke then owes each one its revocation)."""
        return bool(self._links())

    async def send(self) -> dict[str, int]:
        """What the nodes are owed (kept first, engine.nodes.revoking), sent: the connected ones are waited
        for (the revoke answers once they acted); a link that is down is tried in the background, and told
        on its next link anyway. {node: revocations it answered now}."""
        links = self._links()
        if not links:
            return {}
        up = [link for link in links.values() if link.state == "connected"]
        for link in links.values():
            if link.state != "connected":
                self.linked(link)  # (connects: a node that is reachable hears it now)
        done = await asyncio.gather(*(self.deliver(link) for link in up))
        return {link.name: n for link, n in zip(up, done, strict=True)}

    def start(self) -> None:
        """At the gateway's start, off its path: each configured node that owes a revocation is linked and
        told (links otherwise open on first use, and a node nobody uses would run the revoked agent's work
        on). Nothing owed: no link is made (nor the gateway key, nor asyncssh loaded)."""
        task = asyncio.ensure_future(self._owed_at_start())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _owed_at_start(self) -> int:
        owed = await asyncio.to_thread(self.store.pending)
        if owed:
            for link in self._links().values():
                self.linked(link)
        return owed

    def linked(self, link: NodeLink) -> None:
        """A link came up (or should): what its node has not answered goes, in the background."""
        task = asyncio.ensure_future(self.deliver(link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def deliver(self, link: NodeLink) -> int:
        """Every revocation `link`'s node has not answered, oldest first; stops at the first failure (the
        next link tries again). The number answered."""
        async with self._locks.setdefault(link.name, asyncio.Lock()):
            owed = await asyncio.to_thread(self.store.owed, link.name)
            if not owed:
                return 0
            try:
                await link.ensure()
            except NodeError as exc:
                log.info("node %s: %d revocation(s) wait for its next link: %s", link.name, len(owed), exc)
                return 0
            if link.hello is None or AGENT_REVOKE not in link.hello.caps:
                version = link.hello.version if link.hello else "?"
                log.warning(
                    "node %s (exechost %s) cannot hear agent.revoke: what revoked agents left running there "
                    "goes on; install this exechost version there",
                    link.name,
                    version,
                )
                return 0
            answered = 0
            for wire in owed:
                try:
                    res = await link.call(AGENT_REVOKE, wire.to_json(), timeout=ANSWER_TIMEOUT_SEC)
                except NodeError as exc:
                    log.warning("node %s: agent.revoke of %s not delivered: %s", link.name, wire.agent, exc)
                    return answered
                if not res.ok:
                    log.warning("node %s refused agent.revoke of %s: %s", link.name, wire.agent, res.error)
                    return answered
                await asyncio.to_thread(self.store.acked, link.name, wire.revocation, self._nodes())
                answered += 1
            return answered

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
