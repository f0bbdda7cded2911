"""Fresh round 18 b: the wire and the principals (classes 1, 2, 3 and 5), attacked from a hostile agent's
connection, a client of exec-approvals.sock holding a leaked token, and agents acting together."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from console import socket_asks
from engine import principals
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import exec_frame, request_decision, request_exec
from engine.approvals.store import ApprovalsStore, generate_token
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config
from tests.helpers.webconsole import serve_web

ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


# ---- class 3: connections have no newcomers' share ---------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="open: connections are capped per agent (64) and for all agents together (240), with no share "
    "kept for an agent holding none (pending asks keep 32 slots for agents with fewer than 4): four agents "
    "holding 60 connections each take every agent slot, and a fifth agent cannot connect at all",
)
async def test_class3_four_agents_take_every_agent_connection_from_a_fifth(state_dir: Path) -> None:
    agents = ["a1", "a2", "a3", "a4", "ops"]
    write_config(state_dir, FULL + listed(*agents))
    creds = {agent: principals.mint(state_dir, agent) for agent in agents}
    async with gateway(state_dir):
        held = [
            await connect(state_dir, operator=False, credential=creds[agent])
            for agent in agents[:4]
            for _ in range(60)
        ]
        try:
            # the operator still gets in (its 16 slots)...
            operator = await connect(state_dir)
            await operator.close()
            # ...but agent ops, holding no connection at all, is refused
            try:
                ops = await connect(state_dir, operator=False, credential=creds["ops"])
            except RemoteError as exc:
                refused: str | None = str(exc)
            else:
                refused = None
                await ops.close()
        finally:
            for client in held:
                await client.close()
    assert refused is None, refused


# ---- class 1: a replaced exec-approvals.sock token's `exec` frame still runs on a yes -------------------


def _replace_socket_token(path: Path) -> None:
    """The operator replaces a leaked socket token in exec-approvals.json (by hand: no verb does it)."""
    data = json.loads(path.read_text())
    data["socket"]["token"] = generate_token()
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _hosted_socket(
    state_dir: Path, console: ControlClient, store: ApprovalsStore, sock: str
) -> ApprovalSocketServer:
    """exec-approvals.sock as the console hosts it with the gateway up: every ask relayed to the gateway
    (console/app.py socket_decider), `exec` frames run by LocalExecHost under the state dir's config."""

    async def relay(prompt: PromptRequest) -> str:
        reply = await console.request(socket_asks.relay_params(prompt))
        return str(reply.get("decision") or "deny")

    config = str(state_dir / "config.toml")
    return ApprovalSocketServer(
        sock, store.socket_token_now, decider=relay, exec_handler=LocalExecHost(config), config_path=config
    )


async def _socket_exec_asked(
    state_dir: Path, command: list[str], cwd: Path, answer: dict[str, Any], *, rotate: bool = False
) -> dict[str, Any] | None:
    """One `exec` frame on exec-approvals.sock, as the console hosts it with the gateway up (its asks
    relayed: console/app.py socket_decider), answered by the operator with `answer` (an `approve`'s
    params but the id); `rotate`: the operator replaces the socket token while the ask waits."""
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir):
        console = await connect(state_dir)

        server = _hosted_socket(state_dir, console, store, sock)
        async with server:
            frame = {"command": command, "cwd": str(cwd), "sessionKey": "s1"}
            sent = asyncio.ensure_future(request_exec(sock, token, frame, timeout=120))

            async def waiting() -> list[dict[str, Any]]:
                rows: list[dict[str, Any]] = (await console.request("approvals.pending", {}))["approvals"]
                return rows

            rows = await wait_until(waiting)
            if rotate:
                _replace_socket_token(state_dir / "exec-approvals.json")
            await console.request("approve", {"id": rows[0]["id"], **answer})
            result = await sent
        await console.close()
    return result


async def test_class1_a_replaced_socket_tokens_exec_frame_ask_still_runs(state_dir: Path) -> None:
    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    target = work / "ran-with-the-old-token"
    # The leaked token's holder sends an `exec` frame that asks; the operator learns of the leak and
    # replaces the token while the ask waits (the old one opens nothing from then on), then answers the
    # ask in the inbox, which looks like any other of main's.
    answer = {"decision": "allow-always"}
    result = await _socket_exec_asked(state_dir, ["/usr/bin/touch", str(target)], work, answer, rotate=True)
    saved = [e.pattern for e in ApprovalsStore(state_dir / "exec-approvals.json").agent("main").allowlist]
    assert result is not None
    assert (result.get("ok"), target.exists(), saved) == (False, False, [])


# ---- class 2: an exec-approvals.sock `exec` frame's limited grant becomes a permanent allowlist entry ---


@pytest.mark.parametrize(
    "grant",
    [{"uses": 1}, {"forMs": 600_000}, {"sessionOnly": True}],
    ids=["one-use", "ten-minutes", "session"],
)
async def test_class2_a_limited_grant_on_a_socket_exec_frame_is_saved_for_good(
    state_dir: Path, grant: dict[str, Any]
) -> None:
    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    target = work / "once"
    answer = {"decision": "allow-always", "grant": grant}
    result = await _socket_exec_asked(state_dir, ["/usr/bin/touch", str(target)], work, answer)
    assert result is not None and result.get("ok") is True  # the approved run ran, as asked
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    # What the operator allowed was limited: nothing permanent may be in main's allowlist for it.
    assert [e.pattern for e in store.agent("main").allowlist] == []


async def test_class2_a_one_use_grant_on_a_socket_exec_frame_is_one_more_run_then_it_asks(
    state_dir: Path,
) -> None:
    """The grant the relay saved is the socket's too, with its limit: the next `exec` frame runs on it
    unasked (taking its one use, as a gateway exec would), the one after asks again."""
    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir):
        console = await connect(state_dir)

        async def waiting() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = (await console.request("approvals.pending", {}))["approvals"]
            return rows

        def sent(name: str) -> asyncio.Future[dict[str, Any] | None]:
            frame = {"command": ["/usr/bin/touch", str(work / name)], "cwd": str(work)}
            return asyncio.ensure_future(request_exec(sock, token, frame, timeout=120))

        async with _hosted_socket(state_dir, console, store, sock):
            first = sent("first")
            rows = await wait_until(waiting)
            await console.request(
                "approve", {"id": rows[0]["id"], "decision": "allow-always", "grant": {"uses": 1}}
            )
            assert (await first or {}).get("ok") is True
            second = await sent("second")  # on the grant, unasked
            third = sent("third")
            rows = await wait_until(waiting)  # the grant is spent: asked again
            await console.request("approve", {"id": rows[0]["id"], "decision": "deny"})
            denied = await third
        await console.close()
    assert second is not None and second.get("ok") is True, second
    assert denied is not None and denied.get("ok") is False, denied
    assert sorted(p.name for p in work.iterdir()) == ["first", "second"]
    assert [e.pattern for e in store.agent("main").allowlist] == []


# ---- class 3: agent main locks the operator's own exec out ---------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="open: the operator's own exec (naming no agent) is decided under main's policy with main's "
    "session overrides, and an agent alone may set tightening ones: agent main's `/exec security=deny` on "
    "`agent:main` (or on its main session, which every sessionless call is: canonical_session) refuses the "
    "operator's own commands until the operator finds and clears it",
)
@pytest.mark.parametrize("key", ["agent:main", "main"], ids=["agent-wide", "main-session"])
async def test_class3_agent_mains_own_lockdown_refuses_the_operators_own_exec(
    state_dir: Path, key: str
) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        before = await operator.request("exec", {"command": "echo operator-before"})
        assert "operator-before" in before["text"]
        # Agent main, alone, tightens "its own" policy: allowed, it only tightens.
        await main.request("policy.override", {"directive": "/exec security=deny", "sessionKey": key})
        try:
            after = await operator.request("exec", {"command": "echo operator-after"})
        except RemoteError as exc:
            refused: str | None = str(exc)
        else:
            refused = None
            assert "operator-after" in after["text"]
        await main.close()
        await operator.close()
    assert refused is None, refused


async def test_class2_a_one_use_grant_claimed_by_an_exec_frame_is_saved_for_good(state_dir: Path) -> None:
    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    argv = ["/usr/bin/touch", str(work / "once")]
    async with gateway(state_dir):
        console = await connect(state_dir)

        server = _hosted_socket(state_dir, console, store, sock)
        async with server:
            rid = "5a1d7c2e-0b4f-4e8a-9d3c-2f6b1a0e9c71"
            body = {"command": shlex.join(argv), "cwd": str(work)}
            asked = asyncio.ensure_future(request_decision(sock, token, body, timeout=120, request_id=rid))

            async def waiting() -> list[dict[str, Any]]:
                rows: list[dict[str, Any]] = (await console.request("approvals.pending", {}))["approvals"]
                return rows

            rows = await wait_until(waiting)
            # The operator allows it once more only (a one-use grant), not for good.
            await console.request(
                "approve", {"id": rows[0]["id"], "decision": "allow-always", "grant": {"uses": 1}}
            )
            assert await asked == "allow-always"  # (what the socket client is told)
            claim = {"command": argv, "cwd": str(work), "approvalDecision": "allow-always"}
            result = await request_exec(sock, token, claim, frame=exec_frame(token, claim, request_id=rid))
        await console.close()
    assert result is not None and result.get("ok") is True, result
    assert [e.pattern for e in store.agent("main").allowlist] == []


async def test_class1_the_operators_lockdown_of_main_does_not_reach_socket_exec_frames(
    state_dir: Path,
) -> None:
    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/touch")
    sock, token = store.socket_info()
    target = work / "after-the-lockdown"
    async with gateway(state_dir):
        console = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        # The operator locks agent main down (the console's `/exec security=deny` on agent:main).
        await console.request(
            "policy.override", {"directive": "/exec security=deny", "sessionKey": "agent:main"}
        )
        with pytest.raises(RemoteError, match="security=deny"):
            await main.request("exec", {"command": f"/usr/bin/touch {target}", "workdir": str(work)})
        server = _hosted_socket(state_dir, console, store, sock)
        async with server:
            frame = {"command": ["/usr/bin/touch", str(target)], "cwd": str(work)}
            result = await request_exec(sock, token, frame, timeout=60)
        await main.close()
        await console.close()
    assert result is not None
    assert (result.get("ok"), target.exists()) == (False, False), result


async def test_class1_the_operators_lockdown_of_main_answers_socket_request_frames_deny_unasked(
    state_dir: Path,
) -> None:
    """A `request` frame's client runs the command itself on a yes: under the operator's lockdown of
    main no human is asked (a yes would be a run past it), the frame is answered deny at once."""
    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir):
        console = await connect(state_dir)
        await console.request(
            "policy.override", {"directive": "/exec security=deny", "sessionKey": "agent:main"}
        )
        async with _hosted_socket(state_dir, console, store, sock):
            body = {"command": "/usr/bin/touch /tmp/x", "cwd": "/tmp", "sessionKey": "s1"}
            answer = await request_decision(sock, token, body, timeout=60)
            pending = (await console.request("approvals.pending", {}))["approvals"]
        await console.close()
    assert (answer, pending) == ("deny", [])


# ---- class 5: the web console's log prints what a prober sent -------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="open: a request aiohttp's parser refuses (a byte not allowed in a path or header) is logged by "
    "aiohttp's own 'Error handling request' with the request line as sent, and RouteAccessLog then fails "
    "on it (request.match_info asserts), a traceback each: any local account writes its text into the "
    "operator's terminal, ~40 lines per request, where the access log prints routes only",
)
async def test_class5_a_malformed_request_writes_its_text_into_the_web_consoles_terminal(
    state_dir: Path,
) -> None:
    web = await serve_web(state_dir)
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
            writer.write(
                f"GET /PROBER-CHOSE-THIS\x01 HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n\r\n".encode()
            )
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            assert answer.startswith(b"HTTP/1.0 400"), answer[:80]
    finally:
        printed = await web.stop()
    assert "PROBER-CHOSE-THIS" not in printed
    assert "Traceback" not in printed


# ---- class 2/5: every spelling of main's session meets the operator's lockdown (the defence held) --------


# From an agent, `AGENT:MAIN:MAIN` is not its main session: own_key (case-sensitive) moves it into its
# namespace first (`agent:main:AGENT:MAIN:MAIN`), another session, sandboxed under mode "non-main".
@pytest.mark.parametrize(
    "spelling",
    [
        "",
        "main",
        "MAIN",
        " Main\t",
        "agent:main:main",
        "agent:main:MAIN",
        "\u3000main\u00a0",
        "\u2003agent:main:Main\n",
    ],
)
async def test_class2_every_spelling_of_the_main_session_is_locked_down(
    state_dir: Path, spelling: str
) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        await operator.request(
            "policy.override", {"directive": "/exec security=deny", "sessionKey": "agent:main:main"}
        )
        with pytest.raises(RemoteError, match="security=deny"):
            await main.request("exec", {"command": "echo escaped", "sessionKey": spelling})
        await main.close()
        await operator.close()


# ---- class 1: policy.check digests any file the gateway can read, for any agent, with no ask -----------


@pytest.mark.xfail(
    strict=True,
    reason="open: `policy.check` (any agent's, no approval, whatever its security) returns the content "
    "binding's sha256 and size of every file the command names as a script (`sh <path>`), read with the "
    "gateway's own rights: agent main learns the digest of the operator's 0600 file (or another agent's "
    "credential, gateway.json, /etc/shadow under a root gateway) and recovers a low-entropy secret offline",
)
@pytest.mark.parametrize("security", ["allowlist", "deny"])
async def test_class1_policy_check_hands_an_agent_the_digest_of_the_operators_private_file(
    state_dir: Path, security: str
) -> None:
    home = Path(os.environ["HOME"])
    (home / ".config").mkdir()
    pin = home / ".config" / "bank-pin"
    fd = os.open(pin, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the operator's, 0600 from its first byte
    os.write(fd, b"4821\n")
    os.close(fd)
    write_config(state_dir, f'[tools.exec]\nhost = "gateway"\nsecurity = "{security}"\nask = "on-miss"\n')
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        try:
            checked = await main.request("policy.check", {"command": f"sh {pin}"})
        finally:
            await main.close()
    digests = {d["path"]: d["sha256"] for d in checked.get("contentDigests") or []}
    leaked = digests.get(str(pin))
    found = [f"{n:04d}" for n in range(10_000) if hashlib.sha256(f"{n:04d}\n".encode()).hexdigest() == leaked]
    assert found == [], f"agent main recovered the operator's PIN {found} from policy.check"
