"""A session id names no owner and is reused once its session is gone: whatever records a run by its id
must also check the session it finds is that run (its instance, its scope), or another agent's later
session under the same id is read as it (fresh round 15 a). One test per place that looks a run up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from engine.approvals.history import DecisionLog
from engine.approvals.pending import ApprovalManager
from engine.approvals.request import ApprovalRequest
from engine.sessions import RunSpec, SessionManager
from engine.tools.exec import ExecContext
from engine.tools.resume import _starting_again
from runner.gateway.handlers.approvals import current_run
from runner.gateway.journal import ApprovalJournal
from runner.gateway.node_sessions import NodeSessions

SID = "calm-gulf"
OPS, MAIN = "agent:ops:s", "agent:main:s"


async def _ran(manager: SessionManager, scope: str, command: str, instance: str = "") -> Any:
    """A session under SID in `scope`, run to its end (dropped once done: the id is free again)."""
    spec = RunSpec(command=command, scope_key=scope, session_id=SID, instance=instance)
    res = await manager.run(spec)
    assert res.details["status"] in ("completed", "failed"), res.text
    return res


async def _running(manager: SessionManager, scope: str, instance: str = "") -> Any:
    spec = RunSpec(command="sleep 30", scope_key=scope, session_id=SID, instance=instance, background=True)
    res = await manager.run(spec)
    assert res.details["sessionId"] == SID, res.text
    session = manager.get(SID)
    assert session is not None
    return session


async def test_a_status_read_shows_the_approved_run_never_another_session_under_its_id(
    state_dir: Path,
) -> None:
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    try:
        mine = await _running(manager, OPS)
        run = {"sessionId": SID, "instance": mine.instance, "scopeKey": OPS, "status": "running"}
        services = SimpleNamespace(sessions=manager)
        assert current_run(services, {"run": run})["run"]["status"] == "running"  # its own: live
        await manager.process("kill", {"sessionId": SID}, OPS)
        manager.registry.drop(SID)
        theirs = await _running(manager, MAIN)  # main's session, under ops's run's id
        assert theirs.instance != mine.instance
        seen = current_run(services, {"run": run})["run"]
        assert seen["status"] == "unknown", seen  # not main's live session's state
        # the same instance in another scope is not the run either (a record names both)
        forged = {**run, "instance": theirs.instance}
        assert current_run(services, {"run": forged})["run"]["status"] == "unknown"
        # an outcome written down is final: never replaced by whatever session holds the id now
        ended = {**run, "instance": theirs.instance, "scopeKey": MAIN, "status": "completed", "exitCode": 3}
        assert current_run(services, {"run": ended})["run"]["exitCode"] == 3
        # a record from before runs had an instance: shown as written, never as a live session's
        legacy = {"sessionId": SID, "status": "running"}
        assert current_run(services, {"run": legacy})["run"]["status"] == "unknown"
    finally:
        await manager.close()


async def test_a_status_read_between_a_runs_end_and_its_note_shows_that_runs_output(state_dir: Path) -> None:
    """A run's outcome is written down after its session ends (the detached run waits for the end first):
    a status read in between showed the live `completed` beside the tail written when the run was
    backgrounded (empty), so a caller saw a command that printed end with no output (CI, round 8 p)."""
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    try:
        spec = RunSpec("echo the-output", scope_key=OPS, session_id=SID, instance="i1", background=True)
        await manager.run(spec)
        session = manager.get(SID)
        assert session is not None
        await session.done.wait()
        run = {"sessionId": SID, "instance": "i1", "scopeKey": OPS, "status": "running", "tail": ""}
        seen = current_run(SimpleNamespace(sessions=manager), {"run": run})["run"]
        assert seen["status"] == "completed" and seen["tail"] == "the-output", seen
    finally:
        await manager.close()


async def test_another_session_under_a_runs_id_never_writes_that_runs_end(state_dir: Path) -> None:
    """The journal writes an approved run's end under its approval when a session under the run's id
    ends: it must be that run, not main's later session holding the id (a restart forgets used ids)."""
    log = DecisionLog(state_dir / "history")
    log.record_decision({"id": "appr-ops", "status": "allow-once", "agentId": "ops", "resolvedAtMs": 1})
    instance = "0123456789ab"
    run = {"sessionId": SID, "instance": instance, "scopeKey": OPS, "status": "starting"}
    log.record_run("appr-ops", run)
    journal = ApprovalJournal(state_dir, ApprovalManager())  # the next gateway: links read from the files
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    manager.on_exit = journal.session_ended
    try:
        await _ran(manager, MAIN, "exit 7")  # main's session under the id, ending first
        (entry,) = journal.history.entries()
        assert entry.run is not None and entry.run["status"] == "starting", entry.run
        await _ran(manager, OPS, "exit 3", instance)  # the approved run itself (adopted, say)
        (entry,) = journal.history.entries()
        assert entry.run is not None and (entry.run["status"], entry.run["exitCode"]) == ("completed", 3)
    finally:
        await manager.close()


def test_one_agents_removal_frees_only_its_own_node_session_place() -> None:
    """A node reuses a session's id once it is gone: main's place under an id is not ops's session."""
    held = NodeSessions(lambda _node, _scope, _agent: True)
    place = f"node:n1:{SID}"
    held.kept("main", place, "n1", MAIN)
    held.kept("ops", place, "n1", OPS)
    held.removed("ops", place)
    assert (held.count("main"), held.count("ops")) == (1, 0)


async def test_a_restored_run_is_not_linked_to_another_session_under_its_id(state_dir: Path) -> None:
    """A restart resumes an approved ask said to be `starting` under SID: a kept session under SID that
    is not that run (another instance, though in the same scope) is not linked as its run, and the ask
    is not run again (whether it ran is unknown); the run's own session is linked."""
    manager = SessionManager(state_dir, kill_grace_sec=0.5)
    approvals = ApprovalManager()
    emitted: list[str] = []
    tool = SimpleNamespace(
        sessions=manager, approvals=approvals, _emit=lambda _ctx, text: emitted.append(text)
    )
    ctx = ExecContext(agent_id="ops", session_key="s")
    try:
        record, _ = approvals.register(ApprovalRequest(command="true", cwd="/tmp", agent_id="ops"))
        theirs = await _running(manager, OPS)
        run = {"sessionId": SID, "instance": "0123456789ab", "scopeKey": OPS, "status": "starting"}
        await _starting_again(tool, record, ctx, "true", {**run, "host": "gateway"}, None)  # type: ignore[arg-type]
        assert record.run is not None and record.run["status"] == "failed", record.run  # not `running`
        assert emitted and "unknown" in emitted[0]
        mine = {**run, "instance": theirs.instance}  # the run's own session (adopted, say)
        await _starting_again(tool, record, ctx, "true", mine, None)  # type: ignore[arg-type]
        assert record.run["status"] == "running" and record.run["instance"] == theirs.instance
    finally:
        await manager.close()


def test_an_end_filed_by_id_alone_is_not_a_named_runs_end(state_dir: Path) -> None:
    """A `session` line with no approval (as written before ends were filed under their approval) matches
    by id alone only a run that has no instance either: never a run that names its session."""
    log = DecisionLog(state_dir / "history")
    for approval in ("appr-new", "appr-old"):
        log.record_decision({"id": approval, "status": "allow-once", "agentId": "ops", "resolvedAtMs": 1})
    log.record_run(
        "appr-new", {"sessionId": SID, "instance": "0123456789ab", "scopeKey": OPS, "status": "running"}
    )
    log.record_run("appr-old", {"sessionId": "old-id", "status": "running"})
    log.record_session_end({"sessionId": SID, "status": "completed", "exitCode": 7})
    log.record_session_end({"sessionId": "old-id", "status": "completed", "exitCode": 0})
    runs = {e.id: e.run for e in log.entries()}
    assert runs["appr-new"] is not None and runs["appr-new"]["status"] == "running", runs
    assert runs["appr-old"] is not None and runs["appr-old"]["status"] == "completed", runs
