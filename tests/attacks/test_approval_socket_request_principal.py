"""Issue 27 §1/class 2, "whose is it?": exec-approvals.sock's `request` frames named their own agent.

The socket's client proves only the shared socket token and the operator's Unix account: it names no agent.
Fix T10 made its `exec` frames run as the socket's principal; its `request` frames still passed their
claimed `agentId` on, to the human and to `approvals.relay`. A frame naming `ops` was shown as ops's ask,
and the human's allow-always saved an allow-always entry for ops: ops's later exec ran unasked, asked for
by whoever held the shared token. Every frame on the socket is now the socket's principal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from console.socket_asks import relay_params
from engine import principals
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import _roundtrip
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import connect, gateway, wait_until, write_config

# Both agents ask a human on an allowlist miss: only an allow-always entry for ops lets ops's `touch` run
# without ops's own ask.
CONFIG = """
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"
askFallback = "deny"

[[agents.list]]
id = "ops"
"""

NOBODY = '[gateway]\nanonymous = "none"\n' + CONFIG


def _relaying(link: ControlClient, shown: list[PromptRequest]) -> Any:
    """The console's socket_decider while the gateway is up (console/app.py): every ask is relayed."""

    async def decide(request: PromptRequest) -> str:
        shown.append(request)
        answer = await link.request(relay_params(request))
        return str(answer.get("decision") or "deny")

    return decide


async def _request_frame(path: Path, token: str, body: dict[str, Any], rid: str) -> dict[str, Any] | None:
    frame = {"type": "request", "token": token, "id": rid, "request": body}
    return await _roundtrip(path, frame, lambda m: m.get("type") == "decision" and m.get("id") == rid, 60)


async def _ask_as(state: Path, marker: Path, named: str) -> tuple[dict[str, Any] | None, list[str], Any]:
    """A `request` frame naming `named`, hosted as the console hosts it and relayed to the gateway; a human
    answers allow-always to whatever reaches the inbox. Then ops, with its own credential, runs the same
    command. Returns the socket's answer, the agents the human saw, and ops's exec result."""
    command = f"/usr/bin/touch {marker}"
    credential = principals.mint(state, "ops")
    async with gateway(state):
        operator = await connect(state)
        ops = await connect(state, "ops", operator=False, credential=credential)
        try:
            path, token = ApprovalsStore(state / "exec-approvals.json").socket_info()
            shown: list[PromptRequest] = []
            server = ApprovalSocketServer(
                path,
                token,
                decider=_relaying(operator, shown),
                exec_handler=LocalExecHost(state / "config.toml"),
            )
            seen: list[str] = []
            async with server:
                body = {"command": command, "cwd": str(marker.parent), "agentId": named, "host": "gateway"}
                asked = asyncio.ensure_future(_request_frame(path, token, body, "r-ops"))

                async def pending_or_done() -> object:
                    if asked.done():
                        return True
                    rows = (await operator.request("approvals.pending", {})).get("approvals") or []
                    return rows or None

                await wait_until(pending_or_done, timeout=60)
                for row in (await operator.request("approvals.pending", {})).get("approvals") or []:
                    seen.append(str(row.get("agentId")))
                    await operator.request("approve", {"id": row["id"], "decision": "allow-always"})
                answer = await asked
            run = asyncio.ensure_future(ops.request("exec", {"command": command, "host": "gateway"}))

            async def ops_asked_or_done() -> object:
                if run.done():
                    return True
                rows = (await operator.request("approvals.pending", {})).get("approvals") or []
                return [r for r in rows if r.get("agentId") == "ops"] or None

            asked_ops = await wait_until(ops_asked_or_done, timeout=60)
            if isinstance(asked_ops, list):  # ops's own ask: the human says no (it was never theirs to skip)
                await operator.request("approve", {"id": asked_ops[0]["id"], "decision": "deny"})
            try:
                result: Any = await run
            except RemoteError as exc:
                result = f"refused: {exc}" + (" (after ops's own ask)" if isinstance(asked_ops, list) else "")
            return answer, seen, result
        finally:
            await operator.close()
            await ops.close()


def test_a_request_frame_naming_ops_saves_nothing_for_ops(state_dir: Path, tmp_path: Path) -> None:
    """The attack: the frame names ops, the human approves allow-always, ops's later exec runs unasked.
    Now the frame is refused with a clear error before any human sees it, nothing is saved for ops, and
    ops's exec is an allowlist miss (ops asks nobody: refused)."""
    write_config(state_dir, CONFIG)
    marker = tmp_path / "ops-ran-unasked"
    answer, seen, result = asyncio.run(_ask_as(state_dir, marker, "ops"))
    assert not marker.exists(), f"ops ran unasked after a socket ask shown to a human as {seen}: {result}"
    assert seen == [], f"a human was shown a socket ask as agent {seen}"
    assert ApprovalsStore(state_dir / "exec-approvals.json").agent("ops").allowlist == []
    assert answer is not None and answer.get("decision") == "deny", answer
    error = answer.get("error")
    assert isinstance(error, dict) and error.get("code") == "INVALID_REQUEST", answer
    assert "names agent ops" in str(error.get("message")), answer


def test_a_request_frame_naming_main_asks_as_main_and_saves_for_main(state_dir: Path, tmp_path: Path) -> None:
    """What the console relies on keeps working: a frame naming main (or nothing) is main's ask, shown as
    main, and allow-always saves for main only — ops still gains nothing."""
    write_config(state_dir, CONFIG)
    marker = tmp_path / "main-approved"
    answer, seen, result = asyncio.run(_ask_as(state_dir, marker, "main"))
    assert answer is not None and answer.get("decision") == "allow-always", answer
    assert seen == ["main"]
    assert ApprovalsStore(state_dir / "exec-approvals.json").agent("main").allowlist
    assert ApprovalsStore(state_dir / "exec-approvals.json").agent("ops").allowlist == []
    assert not marker.exists(), result  # ops's exec: still its own allowlist miss


def test_with_anonymous_none_a_request_frame_asks_nobody(state_dir: Path, tmp_path: Path) -> None:
    """Under `anonymous = "none"` the shared token proves nobody: no request frame reaches a human, as
    whatever agent it names (main included), and nothing is saved for anyone."""
    write_config(state_dir, NOBODY)
    for named in ("main", "ops"):
        marker = tmp_path / f"as-{named}"
        answer, seen, _ = asyncio.run(_ask_as(state_dir, marker, named))
        assert seen == [], f"a human was shown a socket ask as {seen} though the socket proves nobody"
        assert answer is not None and answer.get("decision") == "deny", answer
        assert "proves no agent" in str((answer.get("error") or {}).get("message")), answer
        assert not marker.exists()
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    assert store.agent("main").allowlist == [] and store.agent("ops").allowlist == []


def test_a_session_key_naming_ops_is_naming_ops(state_dir: Path) -> None:
    """The variant: a frame naming main (or nothing) whose sessionKey is `agent:ops:…` would be shown to the
    human as ops's session. It is refused like an agentId naming ops; a plain key is moved into main's
    namespace (as the gateway does for an agent's connection), so the human sees whose it is."""
    write_config(state_dir, CONFIG)
    shown: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        shown.append(request)
        return "allow-once"

    async def scenario() -> list[dict[str, Any] | None]:
        path, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
        answers = []
        async with ApprovalSocketServer(path, token, decider=human, config_path=state_dir / "config.toml"):
            for i, body in enumerate(
                [
                    {"command": "true", "sessionKey": "agent:ops:deploy"},
                    {"command": "true", "agentId": "main", "sessionKey": "agent:ops"},
                    {"command": "true", "sessionKey": ["agent:ops"]},
                    {"command": "true", "agentId": ["ops"]},
                    {"command": "true", "sessionKey": "deploy"},
                    {"command": "true", "agentId": "main", "sessionKey": "agent:main:deploy"},
                ]
            ):
                answers.append(await _request_frame(path, token, body, f"r{i}"))
        return answers

    answers = asyncio.run(scenario())
    for refused in answers[:4]:
        assert refused is not None and refused.get("decision") == "deny", refused
        assert (refused.get("error") or {}).get("reason") == "principal", refused
    assert "sessionKey is agent ops's" in str(answers[0]["error"]["message"])  # type: ignore[index]
    assert [a and a.get("decision") for a in answers[4:]] == ["allow-once", "allow-once"]
    assert [(p.agent_id, p.session_key) for p in shown] == [("main", "agent:main:deploy")] * 2


def test_the_gateway_takes_no_other_agent_from_a_relay(state_dir: Path) -> None:
    """`approvals.relay` decides whose the ask is from the gateway's own config, by the same rule: a console
    that still passed a frame's agentId on (an older one, or anything holding the operator token) cannot
    file an ask as ops, nor in ops's session, and under `anonymous = "none"` none at all."""
    from engine.protocol.frames import RemoteError as Refused

    async def relay(config: str, params: dict[str, Any]) -> str:
        write_config(state_dir, config)
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                await operator.request("approvals.relay", {"id": "s1", "command": "true", **params})
            except Refused as exc:
                return str(exc)
            finally:
                await operator.close()
        return "filed"

    async def scenario() -> list[str]:
        return [
            await relay(CONFIG, {"agentId": "ops"}),
            await relay(CONFIG, {"agentId": "main", "sessionKey": "agent:ops:x"}),
            await relay(NOBODY, {"agentId": "main"}),
        ]

    as_ops, ops_key, nobody = asyncio.run(scenario())
    assert "names agent ops" in as_ops, as_ops
    assert "sessionKey is agent ops's" in ops_key, ops_key
    assert "proves no agent" in nobody, nobody


def test_the_principal_is_read_at_each_frame(state_dir: Path) -> None:
    """Nothing is cached: the operator switching `[gateway] anonymous` to "none" refuses the very next frame
    of a socket already serving, and switching it back lets main ask again."""
    write_config(state_dir, CONFIG)
    shown: list[str | None] = []

    async def human(request: PromptRequest) -> str:
        shown.append(request.agent_id)
        return "allow-once"

    async def scenario() -> list[str | None]:
        path, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
        decisions = []
        async with ApprovalSocketServer(path, token, decider=human, config_path=state_dir / "config.toml"):
            for i, config in enumerate((CONFIG, NOBODY, CONFIG)):
                write_config(state_dir, config)
                answer = await _request_frame(path, token, {"command": "true"}, f"r{i}")
                decisions.append(answer.get("decision") if answer else None)
        return decisions

    assert asyncio.run(scenario()) == ["allow-once", "deny", "allow-once"]
    assert shown == ["main", "main"]


def test_a_yes_on_a_request_frame_is_not_a_yes_for_env_it_never_showed(
    state_dir: Path, tmp_path: Path
) -> None:
    """A request frame carries no env (a human is never shown one there); the exec frame claiming its yes
    added `GNUMAKEFLAGS`, and the vetted yes answered the ask the env makes (issue 27 §3) unseen. A yes now
    counts only for what the human was asked about (LocalExecHost.content_fingerprint: files, paths, the
    pinned rendering, the env): the frame's own ask reaches the human, env shown, and a no refuses it."""
    from engine.approvals.socket.wire import exec_frame

    write_config(state_dir, CONFIG)
    marker = tmp_path / "ran"
    argv = ["/usr/bin/touch", str(marker)]
    shown: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        shown.append(request)
        return "allow-once" if len(shown) == 1 else "deny"

    async def scenario() -> dict[str, Any] | None:
        path, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
        host = LocalExecHost(state_dir / "config.toml")
        async with ApprovalSocketServer(path, token, decider=human, exec_handler=host):
            body = {"command": " ".join(argv), "cwd": str(tmp_path)}
            assert (await _request_frame(path, token, body, "r-env") or {}).get("decision") == "allow-once"
            claim = {
                "command": argv,
                "cwd": str(tmp_path),
                "env": {"GNUMAKEFLAGS": "--eval=x"},
                "approvalDecision": "allow-once",
            }
            frame = exec_frame(token, claim, request_id="r-env")
            return await _roundtrip(path, frame, lambda m: m.get("type") == "exec-res", 60)

    outcome = asyncio.run(scenario())
    assert outcome is not None and outcome.get("ok") is False, outcome
    assert not marker.exists()
    assert len(shown) == 2 and ("GNUMAKEFLAGS", "--eval=x") in shown[1].env, shown
