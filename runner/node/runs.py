"""What this node knows of the gateway's runs, by runId: received and in flight, or answered. A gateway
whose link dropped before a run's answer asks on its next link (`runs.status`), so a run the node never
received is said to be lost, not waited on for ever, and a background run's session, whose answer was
lost with the link, is named again. A run answered so long ago that its outcome was let go is said to be
`forgotten`, never `unknown`: "never received" would tell the operator that a run which ran did not."""

from __future__ import annotations

import collections
from typing import Any

MAX_ANSWERED = 1024  # answered runs remembered (the gateway keeps as many orphaned runs)
MAX_ASKED = 1024  # run ids in one `runs.status`
MAX_FORGOTTEN = 16 * MAX_ANSWERED  # ids (only) of runs whose outcome was let go


class RunLedger:
    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}  # runId -> how many calls carry it (a gateway sends each once)
        self._answered: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._forgotten: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._forgot_beyond = False  # ids were let go from _forgotten too: any unknown id may have run

    def began(self, run_id: str) -> None:
        self._in_flight[run_id] = self._in_flight.get(run_id, 0) + 1

    def answered(self, run_id: str, outcome: dict[str, Any]) -> None:
        """The run answered: `{"state": "ended"}` (its exec.* event says how), `running-session` with the
        `sessionId` it left running, or `failed` with the error's `message` (no event says that)."""
        left = self._in_flight.pop(run_id, 1) - 1
        if left > 0:
            self._in_flight[run_id] = left
        self._answered.pop(run_id, None)
        self._answered[run_id] = outcome
        while len(self._answered) > MAX_ANSWERED:
            self._forgotten[self._answered.popitem(last=False)[0]] = None
        while len(self._forgotten) > MAX_FORGOTTEN:
            self._forgotten.popitem(last=False)
            self._forgot_beyond = True

    def status(self, run_ids: Any, ns: str = "") -> dict[str, Any]:
        """`runs.status`: for each id, `in-flight`, its outcome (`ended`, `running-session`, `failed`),
        `forgotten` (answered, or maybe answered, so long ago that its outcome was let go), or `unknown`
        (never received here). `ns`: the asking gateway's namespace, which the node files its runs under
        (runner.node.sysrun: `<ns><runId>`), so a gateway hears only of its own runs."""
        if not isinstance(run_ids, list) or len(run_ids) > MAX_ASKED:
            raise ValueError(f"runIds must be a list of at most {MAX_ASKED} run ids")
        out: dict[str, Any] = {}
        for run_id in run_ids:
            if not isinstance(run_id, str) or not 0 < len(run_id) <= 128:
                raise ValueError("runIds must hold run ids (strings of 1..128 characters)")
            key = ns + run_id
            if key in self._in_flight:
                out[run_id] = {"state": "in-flight"}
            elif key in self._answered:
                out[run_id] = self._answered[key]
            elif key in self._forgotten or self._forgot_beyond:
                out[run_id] = {"state": "forgotten"}
            else:
                out[run_id] = {"state": "unknown"}
        return {"runs": out}
