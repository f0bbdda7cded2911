"""Fix T10 (issue 27 §1–§2): whose is it? Variants of fresh round 9 t's attacks, each closed by construction:
the approval socket's principal is what its client proved, a node's session rows count only under keys the
gateway gave it, and a revoked agent's runs in flight ask nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
from pathlib import Path

import pytest

from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import exec_frame, request_decision, request_exec
from engine.approvals.store import ApprovalsStore
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import write_config
from tests.helpers.sshd import SshdNode

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

# main may run anything (full); ops may run nothing. Naming ops is as refused as naming a broader agent:
# a frame names no principal at all.
MAIN_FULL = """
[tools.exec]
host = "gateway"
security = "full"
ask = "off"

[[agents.list]]
id = "ops"
tools.exec.security = "deny"
"""

NOBODY = """
[gateway]
anonymous = "none"

[tools.exec]
host = "gateway"
security = "full"
ask = "off"
"""


async def _human_says_yes(request: PromptRequest) -> str:
    return "allow-once"


async def _exec(state: Path, config: str, request: dict[str, object]) -> dict[str, object] | None:
    write_config(state, config)
    path, token = ApprovalsStore(state / "exec-approvals.json").socket_info()
    server = ApprovalSocketServer(
        path, token, decider=_human_says_yes, exec_handler=LocalExecHost(state / "config.toml")
    )
    async with server:
        return await request_exec(path, token, request, timeout=60)


def _error(outcome: dict[str, object] | None) -> dict[str, object]:
    assert outcome is not None and outcome.get("ok") is False, outcome
    error = outcome.get("error")
    assert isinstance(error, dict), outcome
    return error


@needs_bwrap
def test_the_socket_client_is_main_and_names_no_one_else(state_dir: Path, tmp_path: Path) -> None:
    """Under the default `anonymous = "main"`, a frame without agentId (or naming main) runs as main; one
    naming ops is refused with a clear error, whatever ops's policy is: the frame picks no principal."""
    plain = asyncio.run(
        _exec(
            state_dir,
            MAIN_FULL,
            {"command": ["/usr/bin/touch", str(tmp_path / "plain")], "cwd": str(tmp_path)},
        )
    )
    assert plain is not None and plain.get("ok") is True, plain
    assert (tmp_path / "plain").exists()
    named = asyncio.run(
        _exec(
            state_dir,
            MAIN_FULL,
            {"command": ["/usr/bin/touch", str(tmp_path / "ops")], "cwd": str(tmp_path), "agentId": "ops"},
        )
    )
    error = _error(named)
    assert error.get("code") == "INVALID_REQUEST" and error.get("reason") == "principal", error
    assert "names agent ops" in str(error.get("message"))
    assert not (tmp_path / "ops").exists()


@needs_bwrap
def test_with_anonymous_none_the_socket_client_is_nobody(state_dir: Path, tmp_path: Path) -> None:
    """`anonymous = "none"`: the shared socket token proves nobody, so every exec frame is refused (with
    or without an agentId), even where the policy is security=full and a human would say yes."""
    for extra in ({}, {"agentId": "main"}, {"agentId": "ops"}):
        marker = tmp_path / f"ran-{len(extra)}-{extra.get('agentId', '')}"
        outcome = asyncio.run(
            _exec(
                state_dir, NOBODY, {"command": ["/usr/bin/touch", str(marker)], "cwd": str(tmp_path), **extra}
            )
        )
        error = _error(outcome)
        assert error.get("reason") == "principal" and "proves no agent" in str(error.get("message")), error
        assert not marker.exists()


@needs_bwrap
def test_a_humans_yes_asked_as_ops_is_no_exec_as_ops(state_dir: Path, tmp_path: Path) -> None:
    """A `request` frame naming ops, then an `exec` frame naming ops claiming that request's yes: neither
    acts as ops. The request frame used to be shown to the human as ops (it "only asks"); since fix T10b
    (test_approval_socket_request_principal.py) it is refused before any human sees it, so there is no yes
    to claim, and the exec frame is refused as naming another agent (the socket's principal is main)."""
    write_config(state_dir, MAIN_FULL)
    marker = tmp_path / "ran"
    argv = ["/usr/bin/touch", str(marker)]

    asked: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        asked.append(request)
        return "allow-once"

    async def scenario() -> dict[str, object] | None:
        path, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
        server = ApprovalSocketServer(
            path, token, decider=human, exec_handler=LocalExecHost(state_dir / "config.toml")
        )
        async with server:
            shown = {"command": " ".join(argv), "cwd": str(tmp_path), "agentId": "ops", "host": "gateway"}
            assert await request_decision(path, token, shown, request_id="r-ops") == "deny"
            claim = {
                "command": argv,
                "cwd": str(tmp_path),
                "agentId": "ops",
                "approvalDecision": "allow-once",
            }
            return await request_exec(
                path, token, {}, frame=exec_frame(token, claim, request_id="r-ops"), timeout=60
            )

    error = _error(asyncio.run(scenario()))
    assert error.get("reason") == "principal", error
    assert asked == []  # no human was shown an ask as ops, nor as anyone else
    assert not marker.exists()


# ---- a node's session rows count only under keys the gateway gave that node ---------------------------


def test_a_node_cannot_fill_the_cap_of_an_agent_allowed_there_that_never_ran_there(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """Round 9 t's attack with ops allowed on alpha (every node, by default) but never having run there: the
    rows naming `agent:ops` are under a key the gateway never gave alpha, so they count for nobody; ops's
    own sessions here start. (Keys it was given do count, across a restart: test_fresh_round6_k.py.)"""
    from engine import principals
    from engine.protocol.frames import RemoteError
    from tests.helpers.gateway import connect, gateway, wait_until
    from tests.helpers.hostile_node import Hostile

    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\nmaxSessionsPerAgent = 2\n\n'
        '[[agents.list]]\nid = "ops"\n\n' + alpha.config_toml()
    )
    hostile = Hostile(alpha, state_dir)
    principals.mint(state_dir, "ops")

    async def scenario() -> dict[str, object]:
        async with gateway(state_dir):
            main = await connect(state_dir, operator=False)
            ops = await connect(state_dir, operator=False, agent="ops")
            try:
                run = asyncio.ensure_future(
                    main.request("exec", {"command": "true", "host": "node", "node": "alpha"})
                )
                listing = await wait_until(
                    lambda: [f for f in hostile.seen() if f.get("method") == "sessions.list"], timeout=60
                )
                rows = [
                    {"sessionId": f"fake{i}", "scopeKey": key, "backgrounded": True}
                    for i, key in enumerate(["agent:ops", "agent:ops:main", "agent:ops:x"])
                ]
                await hostile.inject(
                    {"type": "res", "id": listing[0]["id"], "ok": True, "payload": {"sessions": rows}}
                )
                await hostile.answer(await hostile.next_run())
                await run
                try:
                    result: dict[str, object] = await ops.request(
                        "exec", {"command": "true", "host": "gateway"}
                    )
                except RemoteError as exc:
                    return {"refused": str(exc)}
                return result
            finally:
                await main.close()
                await ops.close()

    result = asyncio.run(scenario())
    details = result.get("details") or {}
    assert isinstance(details, dict) and details.get("status") == "completed", result


# ---- a revoke or rotation ends what the agent's runs in flight ask --------------------------------------


@pytest.mark.parametrize("verb", ["agents.revoke", "agents.rotate"])
def test_a_node_ask_waiting_at_the_rotation_is_denied(
    state_dir: Path, sshd_nodes: list[SshdNode], verb: str
) -> None:
    """Round 9 t's attack one step earlier: ops's node run asks *before* the revoke or rotation, and the ask
    waits in the inbox. A rotation settled only asks that recorded the old credential (a node's ask records
    none), so it stayed approvable. Now both deny it at once: the node hears `deny` and nothing waits."""
    from engine import principals
    from tests.helpers.gateway import connect, gateway, wait_until
    from tests.helpers.hostile_node import Hostile, ask

    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n\n'
        '[[agents.list]]\nid = "ops"\n\n' + alpha.config_toml()
    )
    hostile = Hostile(alpha, state_dir)
    principals.mint(state_dir, "ops")

    async def scenario() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        async with gateway(state_dir):
            operator = await connect(state_dir)
            ops = await connect(state_dir, operator=False, agent="ops")
            try:
                run = asyncio.ensure_future(
                    ops.request("exec", {"command": "make deploy", "host": "node", "node": "alpha"})
                )
                listing = await wait_until(
                    lambda: [f for f in hostile.seen() if f.get("method") == "sessions.list"], timeout=60
                )
                await hostile.inject(
                    {"type": "res", "id": listing[0]["id"], "ok": True, "payload": {"sessions": []}}
                )
                sent = await hostile.next_run()
                await hostile.inject(ask("r1", sent["params"]["runId"], command="make deploy"))

                async def waiting() -> object:
                    rows = (await operator.request("approvals.pending", {})).get("approvals") or []
                    return [p for p in rows if p.get("agentId") == "ops"] or None

                await wait_until(waiting, timeout=30)
                await operator.request(verb, {"agent": "ops"})
                answered = await wait_until(
                    lambda: [a for a in hostile.answers() if a.get("id") == "r1"], timeout=30
                )
                left = (await operator.request("approvals.pending", {})).get("approvals") or []
                run.cancel()
                with contextlib.suppress(BaseException):
                    await run
                return answered, [p for p in left if p.get("agentId") == "ops"]
            finally:
                await operator.close()
                await ops.close()

    answered, left = asyncio.run(scenario())
    assert not left, f"ops's ask still waits after {verb}: {left}"
    payload = answered[0].get("payload")
    assert isinstance(payload, dict) and payload.get("decision") == "deny", answered


async def test_an_ask_stamped_before_a_revoke_is_never_filed() -> None:
    """The construction itself (engine.approvals.generations): an ask carrying the generation its run began
    under is refused once the agent was revoked or rotated since (AGENT_REVOKED), as is one joining the same
    question another run asked; a run stamped after the revoke, or the operator's (unstamped), still asks."""
    from engine.approvals.pending import ApprovalManager
    from engine.approvals.request import ApprovalError, ApprovalRequest

    manager = ApprovalManager()
    request = ApprovalRequest(command="make deploy", cwd="/", host="gateway", agent_id="ops", session_key="k")
    before = manager.generations.current("ops")
    first, _ = manager.register(request, generation=before)
    manager.revoke_agent("ops")
    assert first.resolved and first.decision == "deny"
    with pytest.raises(ApprovalError) as refused:
        manager.register(request, generation=before)
    assert refused.value.code == "AGENT_REVOKED"
    fresh, _ = manager.register(request, generation=manager.generations.current("ops"))
    joining = dataclasses.replace(request, session_key="other")
    with pytest.raises(ApprovalError):
        manager.register(joining, generation=before)  # never joins a live ask of a newer run either
    assert not fresh.resolved
    manager.register(joining)  # unstamped (the operator's own)
    manager.revoke_credential("ops", "no-such-credential")  # a rotation is a new generation too
    with pytest.raises(ApprovalError):
        manager.register(request, generation=before + 1)
