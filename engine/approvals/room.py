"""One agent must not lock the operator out: the waiting asks each principal holds, and the caps they meet."""

from __future__ import annotations

from engine import jsontext
from engine.approvals.request import (
    ApprovalError,
    ApprovalRecord,
    ApprovalRequest,
    share,
    who_of,
)
from engine.approvals.schema import OPERATOR_PRINCIPAL

# One agent must not lock the operator out (issue 9 item 14): asks waiting at once, per agent and in all.
# The caps count requesters, not records: a session (or node approval) joining an ask already pending is
# one more waiting ask, so no record can hold more requesters than its agent may have asks (issue 27: one
# agent joined one ask from thousands of session keys until its row no longer fit a frame).
# With the exec tool's 64 KiB command cap the queue stays in tens of MB.
# The operator's own asks have their own share (MAX_PENDING_PER_AGENT of them), counted in no total: no
# number of agents refuses the operator's exec (fresh round 17 b), as the connections' last slots are its.
# The agents' total is eight full shares and then NEWCOMER_SLOTS kept for agents holding fewer than
# NEWCOMER_FLOOR asks: eight agents filling their shares leave the next eight agents room for a few asks
# each (an ask for the operator to see, not a flood's), and one agent holds at most 1/9 of the total.
MAX_PENDING_PER_AGENT = 32
NEWCOMER_SLOTS = 32
NEWCOMER_FLOOR = 4
MAX_PENDING = 8 * MAX_PENDING_PER_AGENT + NEWCOMER_SLOTS  # all agents together (the operator: its own share)
MAX_VIEW_BYTES = 768 * 1024  # one ask as shown (its view): a 1 MiB frame holds it and what wraps it


class ApprovalRoom:
    """ApprovalManager's count of waiting requesters and its room checks (the manager holds the state
    named here)."""

    _open: dict[str, ApprovalRecord]
    _open_per_agent: dict[str, int]
    _open_requesters: int
    max_per_agent: int
    max_total: int

    @staticmethod
    def _shares(record: ApprovalRecord) -> list[str]:
        """The share each requester waiting on `record` counts in (one per requester; at least one)."""
        request = record.request
        return [share(request, who_of(r)[0]) for r in record.requesters] or [request.principal]

    def _opened(self, record: ApprovalRecord) -> None:
        self._open[record.id] = record
        for key in self._shares(record):
            self._open_per_agent[key] = self._open_per_agent.get(key, 0) + 1
            self._open_requesters += 1

    def _joined_one(self, request: ApprovalRequest) -> None:
        """One more requester (`request`'s principal) waits on a record already pending."""
        key = request.principal
        self._open_per_agent[key] = self._open_per_agent.get(key, 0) + 1
        self._open_requesters += 1

    def _closed(self, record: ApprovalRecord) -> None:
        if self._open.pop(record.id, None) is None:
            return
        for key in self._shares(record):
            self._open_requesters -= 1
            left = self._open_per_agent.get(key, 0) - 1
            if left > 0:
                self._open_per_agent[key] = left
            else:
                self._open_per_agent.pop(key, None)

    @staticmethod
    def _check_fits(request: ApprovalRequest) -> None:
        """An ask the operator could not be shown is never made: its view goes out whole (the requested
        event, a page of approvals.pending that holds at least one row), and one past a frame made every
        page from it on fail, hiding every agent's asks. Inputs are capped raw; the view holds them several
        times, JSON-escaped (a control byte is six)."""
        shown = len(jsontext.dumps_wire(request.to_json()))
        if shown > MAX_VIEW_BYTES:
            raise ApprovalError(
                "APPROVAL_TOO_LARGE",
                f"exec denied: this ask is {shown} bytes as the operator would be shown it (at most "
                f"{MAX_VIEW_BYTES}); a command, env or reason this large, or this full of control "
                "characters, belongs in a file",
            )

    def _check_room(self, request: ApprovalRequest) -> None:
        """Room for one more of its principal's asks: the operator's own share, or the agent's (on a shared
        node a gateway's agent's: `owner`) and then the agents' total. No agent's asks count in the
        operator's share, and the operator's count in no total: agents cannot refuse the operator's exec.
        The total's last slots (max_total's share of NEWCOMER_SLOTS) are only for an agent holding fewer
        than NEWCOMER_FLOOR asks, so the agents that filled their shares leave the others some room."""
        principal = request.principal
        mine = self._open_per_agent.get(principal, 0)
        if mine >= self.max_per_agent:
            whose = "the operator" if principal == OPERATOR_PRINCIPAL else f"agent {request.agent_id}"
            raise ApprovalError(
                "APPROVAL_QUEUE_FULL",
                f"exec denied: {whose} already has {mine} approvals waiting for the operator "
                f"(at most {self.max_per_agent}); wait for a decision before asking again",
            )
        if principal == OPERATOR_PRINCIPAL:
            return
        agents = self._open_requesters - self._open_per_agent.get(OPERATOR_PRINCIPAL, 0)
        if agents >= self.max_total:
            raise ApprovalError(
                "APPROVAL_QUEUE_FULL",
                f"exec denied: {agents} approvals of agents are waiting for the operator (at most "
                f"{self.max_total} in all); wait for a decision before asking again",
            )
        kept = self.max_total * NEWCOMER_SLOTS // MAX_PENDING
        if mine >= NEWCOMER_FLOOR and agents >= self.max_total - kept:
            raise ApprovalError(
                "APPROVAL_QUEUE_FULL",
                f"exec denied: {agents} approvals of agents are waiting for the operator; the last {kept} of "
                f"{self.max_total} are kept for agents with fewer than {NEWCOMER_FLOOR} waiting, and agent "
                f"{request.agent_id} has {mine}; wait for a decision before asking again",
            )
