"""Issue 9 item 9: an `exec` frame on exec-approvals.sock approving itself, and decisions nobody offered."""

from __future__ import annotations

from pathlib import Path

from engine.approvals.socket.server import (
    ApprovalSocketServer,
    PromptRequest,
    request_decision,
    request_exec,
)
from engine.approvals.store import ApprovalsStore
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import ALLOWLIST, write_config

TOKEN = "attack-token-" + "k" * 24


class Operator:
    """A console that answers every prompt the same way and remembers what it was offered."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[PromptRequest] = []

    async def __call__(self, request: PromptRequest) -> str:
        self.asked.append(request)
        return self.answer


async def test_exec_frame_cannot_approve_itself(state_dir: Path, tmp_path: Path) -> None:
    """An `exec` frame with approvalDecision "allow-always" ran and persisted an entry with no human."""
    write_config(state_dir, ALLOWLIST)
    marker = tmp_path / "pwned"
    path = state_dir / "exec-approvals.sock"
    operator = Operator("deny")
    async with ApprovalSocketServer(path, TOKEN, decider=operator, exec_handler=LocalExecHost()):
        for claim in ("allow-always", "allow-once"):
            res = await request_exec(
                path, TOKEN, {"command": ["touch", str(marker)], "approvalDecision": claim}
            )
            assert res is not None and res["ok"] is False, res
            assert res["error"]["message"] == "SYSTEM_RUN_DENIED: user denied"
    assert not marker.exists()
    assert len(operator.asked) == 2  # the human was asked each time, and said no
    assert ApprovalsStore().agent("main").allowlist == []


async def test_a_humans_decision_for_another_command_does_not_carry_over(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, ALLOWLIST)
    marker = tmp_path / "pwned"
    path = state_dir / "exec-approvals.sock"
    operator = Operator("allow-once")
    async with ApprovalSocketServer(path, TOKEN, decider=operator, exec_handler=LocalExecHost()):
        assert await request_decision(path, TOKEN, {"command": "true"}, request_id="r1") == "allow-once"
        operator.answer = "deny"
        from engine.approvals.socket.server import exec_frame

        frame = exec_frame(
            TOKEN, {"command": ["touch", str(marker)], "approvalDecision": "allow-once"}, request_id="r1"
        )
        res = await request_exec(path, TOKEN, {}, frame=frame)
        assert res is not None and res["ok"] is False
    assert not marker.exists()


async def test_only_the_decisions_a_request_allows_are_offered_or_taken(state_dir: Path) -> None:
    """The console offered allow-always when the request allowed only once/deny."""
    path = state_dir / "exec-approvals.sock"
    operator = Operator("allow-always")
    async with ApprovalSocketServer(path, TOKEN, decider=operator):
        got = await request_decision(
            path, TOKEN, {"command": "make deploy", "allowedDecisions": ["allow-once", "deny"]}
        )
    assert got == "allow-once"  # never widened to always
    assert operator.asked[0].allowed_decisions == ("allow-once", "deny")
