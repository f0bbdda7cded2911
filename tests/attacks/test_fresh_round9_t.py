"""Fresh round 9, attacker T: ambient authority and "whose is it?" against the gateway's doors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

import pytest

from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import request_exec
from engine.approvals.store import ApprovalsStore
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import write_config
from tests.helpers.sshd import SshdNode

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

# main may run nothing without a human (allowlist, nothing on it, no one to ask); ops is trusted with
# the host (security=full, ask=off), and the gateway admits nobody on the shared token alone.
TWO_AGENTS = """
[gateway]
anonymous = "none"

[tools.exec]
host = "gateway"
security = "allowlist"
ask = "off"
askFallback = "deny"

[[agents.list]]
id = "ops"
tools.exec.security = "full"
tools.exec.ask = "off"
"""


async def _never_asked(request: PromptRequest) -> str:
    raise AssertionError(f"a human was asked for {request.command!r}: the policy alone must decide here")


async def _socket_exec(state: Path, agent: str, marker: Path) -> dict[str, object] | None:
    """One exec-approvals.sock `exec` frame, as the console hosts the socket (console/app.py), naming
    `agent` in its requestJson."""
    write_config(state, TWO_AGENTS)
    path, token = ApprovalsStore(state / "exec-approvals.json").socket_info()
    server = ApprovalSocketServer(
        path, token, decider=_never_asked, exec_handler=LocalExecHost(state / "config.toml")
    )
    async with server:
        return await request_exec(
            path,
            token,
            {"command": ["/usr/bin/touch", str(marker)], "cwd": str(marker.parent), "agentId": agent},
            timeout=60,
        )


@needs_bwrap
def test_class2_the_approval_sockets_exec_frame_picks_its_own_agent(state_dir: Path, tmp_path: Path) -> None:
    """The gateway learns who an agent is from the connection, never from a request field (SECURITY.md,
    Principals); the approval socket's client proves only the socket token, which is one for every
    client, and then says which agent it is. Naming `ops` runs `touch` unasked under ops's
    security=full, where the same client as `main` (or as nobody, anonymous = "none") is refused."""
    work = tmp_path / "w"
    work.mkdir()
    as_main = asyncio.run(_socket_exec(state_dir, "main", work / "as-main"))
    assert as_main is not None and as_main.get("ok") is False  # main: allowlist miss, nobody asked
    assert not (work / "as-main").exists()
    as_ops = asyncio.run(_socket_exec(state_dir, "ops", work / "as-ops"))
    assert as_ops is not None
    assert not (work / "as-ops").exists(), f"the socket client became agent ops by naming it: {as_ops}"
    assert as_ops.get("ok") is False


# ---- a node's session rows name the agent they count against -----------------------------------------


def _node_config(node_table: str) -> str:
    # Two sessions per agent; ops may use no node at all (it never ran anything on alpha).
    return (
        '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\nmaxSessionsPerAgent = 2\n\n'
        '[[agents.list]]\nid = "ops"\nnodes = []\n\n' + node_table
    )


def test_class2_a_node_fills_another_agents_session_cap(state_dir: Path, sshd_nodes: list[SshdNode]) -> None:
    from engine import principals
    from engine.protocol.frames import RemoteError
    from tests.helpers.gateway import connect, gateway, wait_until
    from tests.helpers.hostile_node import Hostile

    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(_node_config(alpha.config_toml()))
    hostile = Hostile(alpha, state_dir)
    principals.mint(state_dir, "ops")

    async def scenario() -> dict[str, object]:
        async with gateway(state_dir):
            main = await connect(state_dir, operator=False)
            ops = await connect(state_dir, operator=False, agent="ops")
            try:
                # main's run on its node: the gateway first reads the node's session list.
                run = asyncio.ensure_future(
                    main.request("exec", {"command": "true", "host": "node", "node": "alpha"})
                )
                listing = await wait_until(
                    lambda: [f for f in hostile.seen() if f.get("method") == "sessions.list"], timeout=60
                )
                rows = [
                    {"sessionId": f"fake{i}", "scopeKey": "agent:ops", "backgrounded": True} for i in range(2)
                ]
                await hostile.inject(
                    {"type": "res", "id": listing[0]["id"], "ok": True, "payload": {"sessions": rows}}
                )
                await hostile.answer(await hostile.next_run())
                await run
                # ops never used alpha (it may not); its own gateway-host exec:
                try:
                    result: dict[str, object] = await ops.request(
                        "exec", {"command": "true", "host": "gateway"}
                    )
                except RemoteError as exc:  # "agent ops has 2 sessions, the most one agent may keep"
                    return {"refused": str(exc)}
                return result
            finally:
                await main.close()
                await ops.close()

    result = asyncio.run(scenario())
    details = result.get("details") or {}
    assert isinstance(details, dict)
    assert details.get("status") == "completed", f"ops was refused because of alpha's rows: {result}"


@pytest.mark.parametrize("verb", ["agents.revoke", "agents.rotate"])
def test_class1_a_revoked_agents_node_run_still_asks(
    state_dir: Path, sshd_nodes: list[SshdNode], verb: str
) -> None:
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
                done = await operator.request(verb, {"agent": "ops"})
                assert done.get("revoked") is True or done.get("token")
                # The node asks for ops's run, after ops was revoked.
                await hostile.inject(ask("r1", sent["params"]["runId"], command="make deploy"))

                async def settled() -> object:
                    answered = [a for a in hostile.answers() if a.get("id") == "r1"]
                    waiting = (await operator.request("approvals.pending", {})).get("approvals") or []
                    mine = [p for p in waiting if p.get("agentId") == "ops"]
                    return (answered, mine) if answered or mine else None

                answered, mine = await wait_until(settled, timeout=30)
                run.cancel()  # ops's connection was closed by the revoke or rotation: its request failed
                with contextlib.suppress(BaseException):
                    await run
                return answered, mine
            finally:
                await operator.close()
                await ops.close()

    answered, waiting = asyncio.run(scenario())
    assert not waiting, f"an ask of revoked agent ops waits for the operator's yes: {waiting}"
    payload = answered[0].get("payload") if answered else None
    decision = payload.get("decision") if isinstance(payload, dict) else None
    assert decision not in ("allow-once", "allow-always")


# ---- what did not work (regressions: each must keep passing) ------------------------------------------


def test_class2_a_sessionless_browser_is_each_agents_own(state_dir: Path) -> None:
    """A sessionless call keeps session key "" for every agent (an agent's own_key leaves "" as it is);
    under scope = "session" the browser's scope key is the session key, so "" would have been one browser
    for all. The hub names the agent's main session instead: two agents, two browsers."""
    from engine.sandbox.settings import main_session_key
    from tests.helpers.gateway import gateway

    write_config(state_dir, '[agents.defaults.sandbox]\nscope = "session"\n\n[[agents.list]]\nid = "ops"\n')

    async def names() -> tuple[str, str, str]:
        async with gateway(state_dir) as server:
            hub = server.services.browsers
            return (
                hub.resolve("main", "")[1].name,
                hub.resolve("ops", "")[1].name,
                hub.resolve("ops", main_session_key("ops"))[1].name,
            )

    main, ops, ops_main = asyncio.run(names())
    assert main != ops
    assert ops == ops_main


def test_class2_a_node_cannot_file_an_event_under_another_agents_key(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """A node may tell the agents whose runs it holds about those runs; a `system.event` naming a key the
    gateway never gave that node (ops's, who never ran there) is dropped, and ops's queue stays empty."""
    from engine import principals
    from tests.helpers.gateway import connect, gateway, wait_until
    from tests.helpers.hostile_node import Hostile, event

    alpha = sshd_nodes[0]
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n\n'
        '[[agents.list]]\nid = "ops"\n\n' + alpha.config_toml()
    )
    hostile = Hostile(alpha, state_dir)
    principals.mint(state_dir, "ops")

    async def scenario() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
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
                await hostile.inject(
                    {"type": "res", "id": listing[0]["id"], "ok": True, "payload": {"sessions": []}}
                )
                sent = await hostile.next_run()
                # In one burst, in order: a notice for ops (never given), then one for main's own key.
                await hostile.inject(
                    event("system.event", sessionKey="agent:ops", text="FORGED for ops"),
                    event("system.event", sessionKey="agent:main", text="for main"),
                )

                async def mains() -> list[dict[str, object]]:
                    got = (await main.request("events", {})).get("events") or []
                    return [e for e in got if "for main" in str(e.get("text"))]

                await wait_until(mains, timeout=30)
                await hostile.answer(sent)
                await run
                theirs: list[dict[str, object]] = (await ops.request("events", {})).get("events") or []
                everyone: list[dict[str, object]] = (await main.request("events", {})).get("events") or []
                return theirs, everyone
            finally:
                await main.close()
                await ops.close()

    theirs, everyone = asyncio.run(scenario())
    assert not [e for e in theirs if "FORGED" in str(e.get("text"))]
    assert not [e for e in everyone if "FORGED" in str(e.get("text"))]


# ---- a socket outside /tmp that runs what it is sent, outside the view ---------------------------------


FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


@pytest.mark.skipif(shutil.which("screen") is None, reason="GNU screen is not installed")
@needs_bwrap
def test_class1_the_operators_screen_session_runs_a_host_runs_line(state_dir: Path, tmp_path: Path) -> None:
    """The host view hides the state dir from every host command, security=full included. The operator's
    own screen session (same account, started outside any view) is reachable by its socket's path in
    /run/screen, and `screen -X stuff` types into its shell: the line runs there, with the state dir."""
    import subprocess

    from tests.attacks.harness import attempt
    from tests.helpers.gateway import wait_until

    secret = state_dir / "secret.txt"
    secret.write_text("TOPSECRET\n")
    secret.chmod(0o600)
    leak = tmp_path / "leak"
    name = f"ehT{os.getpid()}"
    subprocess.run(["screen", "-dmS", name, "sh"], check=True, cwd=tmp_path)  # the operator's own session
    try:
        line = f"cat {secret} > {leak}\\n"
        details = asyncio.run(
            attempt(
                state_dir,
                f"cat {secret}; screen -S {name} -X stuff '{line}'; echo rc=$?",
                config=FULL,
                yieldMs=60000,
            )
        )
        text = str(details["_text"])
        assert "TOPSECRET" not in text.split("rc=")[0]  # the view hides it from the run itself
        if "rc=0" in text:
            asyncio.run(wait_until(lambda: leak.exists() and leak.read_text(), timeout=30))
        assert "rc=0" not in text, f"the operator's screen typed a host run's line: {leak.read_text()!r}"
    finally:
        subprocess.run(["screen", "-S", name, "-X", "quit"], check=False)


ASKING = (
    '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n\n[[agents.list]]\nid = "ops"\n'
)


@needs_bwrap
def test_class2_a_humans_yes_for_one_agent_is_not_another_agents(state_dir: Path, tmp_path: Path) -> None:
    """A human's allow-once on a `request` frame for agent main, claimed by an `exec` frame with the same id
    and command naming agent ops, is never used for ops: the socket's client is main (its shared token
    proves no other agent), so the frame naming ops is refused before any policy or ask (fix T10)."""
    from engine.approvals.socket.wire import exec_frame, request_decision

    write_config(state_dir, ASKING)
    marker = tmp_path / "ran"
    argv = ["/usr/bin/touch", str(marker)]
    asked: list[str] = []

    async def human(request: PromptRequest) -> str:
        asked.append(request.agent_id or "main")
        return "allow-once" if len(asked) == 1 else "deny"

    async def scenario() -> dict[str, object] | None:
        path, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
        server = ApprovalSocketServer(
            path, token, decider=human, exec_handler=LocalExecHost(state_dir / "config.toml")
        )
        async with server:
            shown = {"command": " ".join(argv), "cwd": str(tmp_path), "agentId": "main", "host": "gateway"}
            assert await request_decision(path, token, shown, request_id="r-1") == "allow-once"
            claim = {
                "command": argv,
                "cwd": str(tmp_path),
                "agentId": "ops",
                "approvalDecision": "allow-once",
            }
            return await request_exec(
                path, token, {}, frame=exec_frame(token, claim, request_id="r-1"), timeout=60
            )

    outcome = asyncio.run(scenario())
    assert outcome is not None and outcome.get("ok") is False, outcome
    error = outcome.get("error")
    assert isinstance(error, dict) and error.get("code") == "INVALID_REQUEST", outcome
    assert "names agent ops" in str(error.get("message")), outcome
    assert asked == ["main"]  # nobody was asked about ops: the frame was refused as not the client's
    assert not marker.exists()
