"""Runs whose link dropped before they answered ("the outcome on the node is unknown"), kept until a later
link says how they ended. The node's numbered events bring most ends (runner.node.outbox sends again what
was not acknowledged); what no event can bring is asked of the node on each new link (`runs.status`): a
run the node never received (the link dropped with the request on its way), a background run whose
answer naming its session was lost, a refusal that was only an answer, or a node process that is gone.
Each such run gets one last word in its agent's session: never an end left waiting for ever."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from engine.nodes.link import NodeError, NodeLink
from runner.gateway.node_runs import NodeRun, compact
from runner.gateway.node_sessions import NodeSessions

log = logging.getLogger("exechost.gateway.nodes")

MAX_ORPHANED_RUNS = 1024
COMMAND_CHARS = 200
_SESSION_ID_CHARS = 128

Tell = Callable[[str, str], None]  # (the gateway's session key, text): the agent's system event


class Orphans:
    """{(node name, runId): run}, oldest first (bounded: the oldest go first)."""

    def __init__(self, held: NodeSessions, tell: Tell) -> None:
        self._runs: dict[tuple[str, str], NodeRun] = {}
        self._held = held
        self._tell = tell

    def keep(self, run: NodeRun) -> None:
        self._runs[(run.link.name, run.run_id)] = run
        while len(self._runs) > MAX_ORPHANED_RUNS:
            del self._runs[next(iter(self._runs))]

    def pop(self, node: str, run_id: str) -> NodeRun | None:
        """The run, taken (its end came: only once)."""
        return self._runs.pop((node, run_id), None)

    def waiting(self, node: str) -> list[NodeRun]:
        return [run for (name, _), run in self._runs.items() if name == node]

    async def settle(self, link: NodeLink) -> None:
        """On a new link: the node says what became of this node's orphans that no event will end."""
        instance = link.hello.instance if link.hello is not None else ""
        if not instance:
            return  # an older node cannot say: its events still end what they can
        asked = []
        for run in self.waiting(link.name):
            if run.instance == instance:
                asked.append(run.run_id)
            elif self.pop(link.name, run.run_id) is not None:
                self._last_word(
                    run,
                    "lost",
                    "the node process that received it is gone (restarted, or it served the link itself, "
                    "without an `exechost node run` service, and its sessions ended with the link); "
                    "its outcome is unknown",
                )
        if not asked:
            return
        try:
            res = await link.call("runs.status", {"runIds": asked}, timeout=30)
        except NodeError as exc:
            log.warning("node %s: could not ask about %d orphaned runs: %s", link.name, len(asked), exc)
            return  # the next link asks again
        said = (res.payload or {}).get("runs") if res.ok else None
        if not isinstance(said, dict):
            return
        for run_id in asked:
            state = said.get(run_id)
            if isinstance(state, dict):
                self._settle_one(link, run_id, state)

    def _settle_one(self, link: NodeLink, run_id: str, state: dict[str, Any]) -> None:
        what = state.get("state")
        if what == "in-flight":
            return  # its exec.* event ends it
        run = self.pop(link.name, run_id)
        if run is None:
            return  # its end came meanwhile
        if what == "unknown":
            self._last_word(
                run, "lost", "the node never received it (the link dropped first); it did not run"
            )
        elif what == "running-session":
            sid = state.get("sessionId")
            if not isinstance(sid, str) or not 0 < len(sid) <= _SESSION_ID_CHARS or ":" in sid:
                self._last_word(run, "lost", "its answer was lost with the link; the node named no session")
                return
            gateway_id = f"node:{link.name}:{sid}"
            if run.place is not None:  # one of its agent's sessions again, as its answer would have made it
                self._held.kept(run.place[0], gateway_id, link.name, run.place[1])
            self._last_word(
                run, "running", f"its answer was lost with the link; it runs as session {gateway_id}"
            )
        elif what == "forgotten":
            self._last_word(
                run,
                "lost",
                "the node answered it long ago and let its outcome go (too many runs since); "
                "whether it ran is unknown",
            )
        elif what == "failed":
            message = compact(str(state.get("message") or "failed"), 500)
            self._last_word(run, "failed", message)
        else:  # `ended` with no event here: the node's outbox let it go (too many while no gateway took them)
            self._last_word(
                run, "ended", "its end was dropped on the node before a gateway took it; its output is gone"
            )

    def _last_word(self, run: NodeRun, what: str, why: str) -> None:
        command = compact(run.command, COMMAND_CHARS)
        sandbox = " sandbox" if run.sandboxed else ""
        where = f"node={run.link.name}{sandbox} id={run.run_id}"
        self._tell(run.session_key, f"Exec {what} ({where}): {why}: {command}")
