"""Fresh round 18 b: the wire and the principals (classes 1, 2, 3 and 5), attacked from a hostile agent's
connection, a client of exec-approvals.sock holding a leaked token, and agents acting together."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from console import socket_asks
from engine import fairpool, principals
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import exec_frame, request_decision, request_exec
from engine.approvals.store import ApprovalsStore, generate_token
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.tools.exec_host import LocalExecHost
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config
from tests.helpers.webconsole import serve_web

ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


# ---- class 3: connections have no newcomers' share ---------------------------------------------------


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


# ---- class 3: two agents' policy.check hold both decision workers for as long as a root file is long -----


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a large root-only file under /opt")
async def test_class3_two_agents_hashing_root_files_hold_the_operators_exec(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST + listed("ops"))
    ops_token = principals.mint(state_dir, "ops")
    root = Path(tempfile.mkdtemp(prefix="eh-r18b-", dir="/opt"))
    os.chmod(root, 0o755)
    big = root / "disk.img"
    big.touch()
    os.truncate(big, 1 << 40)  # a large file only root changes (sparse: no disk is spent)
    os.chmod(big, 0o644)

    def hashing() -> int:
        fds = os.listdir("/proc/self/fd")
        return sum(1 for fd in fds if _target(f"/proc/self/fd/{fd}") == str(big))

    try:
        async with gateway(state_dir):
            operator = await connect(state_dir)
            main = await connect(state_dir, operator=False)
            ops = await connect(state_dir, operator=False, credential=ops_token)
            checks = [
                asyncio.ensure_future(agent.request("policy.check", {"command": f"sh {big}"}))
                for agent in (main, ops)
            ]
            # Both decision workers reading it (before the cap), or both answered at once (over the cap, it is
            # refused unread): either way the operator's exec must not wait behind them.
            await wait_until(lambda: hashing() == 2 or all(c.done() for c in checks))
            own = asyncio.ensure_future(operator.request("exec", {"command": "echo operator"}))
            try:
                await wait_until(own.done)  # the operator's own exec, decided in its own queue
                answered = True
            except AssertionError:
                answered = False
            finally:
                os.truncate(big, 0)  # the reads end (a truncated file reads empty)
                await asyncio.gather(*checks, own, return_exceptions=True)
            for client in (main, ops, operator):
                await client.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert answered, "the operator's own exec waited behind two agents' policy.check"


async def test_class3_two_agents_holding_both_decision_workers_leave_the_operators_exec_a_worker(
    state_dir: Path,
) -> None:
    """The variant the cap does not reach: whatever keeps a decision worker busy (a 16 MiB script on a slow
    disk, a binary of hundreds of MiB read once), two agents each holding one leave the operator's own exec
    the worker kept for its lane (fairpool.FairPool.lane)."""
    write_config(state_dir, ALLOWLIST + listed("ops"))
    release = threading.Event()
    entered: list[str] = []

    def held(who: str) -> str:
        entered.append(who)
        release.wait(120)
        return who

    async with gateway(state_dir):
        operator = await connect(state_dir)
        # Exactly what an agent's slow decision is: a call in the decision pool, in that agent's queue.
        holding = [
            asyncio.ensure_future(fairpool.decisions.run(who, lambda who=who: held(who), "conn"))
            for who in ("main", "ops")
        ]
        try:
            await wait_until(lambda: len(entered) == 2)  # both shared workers are busy now
            own = asyncio.ensure_future(operator.request("exec", {"command": "echo operator"}))
            try:
                await wait_until(own.done)  # decided on the operator's own worker
                answered = True
            except AssertionError:
                answered = False
        finally:
            release.set()
            await asyncio.gather(*holding, return_exceptions=True)
        await asyncio.gather(own, return_exceptions=True)
        await operator.close()
    assert answered, "the operator's own exec waited behind two agents' decisions"
    assert "operator" in json.dumps(own.result())


def _target(link: str) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return ""


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_class1_policy_check_echoes_no_value_of_a_private_trees_config(state_dir: Path) -> None:
    """The defence held: `policy.check` in a 0700 tree the agent cannot read names the files that decide
    (a Makefile, .git/config) but never a value from them (a token in a remote URL, an alias, a helper)."""
    proj = Path(os.environ["HOME"]) / "private-repo"
    proj.mkdir(mode=0o700)
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    with open(proj / ".git" / "config", "a") as fh:
        fh.write(
            "[core]\n\tfsmonitor = /bin/echo FSMON-SECRET\n\tpager = less PAGER-SECRET\n"
            "[alias]\n\tx = !echo ALIAS-SECRET\n[credential]\n\thelper = store --file /CRED-SECRET\n"
            '[remote "origin"]\n\turl = https://u:ghp_URLSECRET@example.com/r\n'
        )
    (proj / "Makefile").write_text("all:\n\t@echo $(shell cat MAKE-SECRET)\n")
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\nask = "on-miss"\n')
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        answers = [
            json.dumps(await main.request("policy.check", {"command": command, "cwd": str(proj)}))
            for command in ("git status", "git x", "git push", "make")
        ]
        await main.close()
    assert not [a for a in answers if "SECRET" in a]


async def test_class1_the_consoles_own_inbox_runs_a_replaced_socket_tokens_exec_frame(
    state_dir: Path,
) -> None:
    from console.app import ConsoleApp

    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, leaked = store.socket_info()
    target = work / "ran-with-the-old-token"
    app = ConsoleApp(
        state_dir, config_path=str(state_dir / "config.toml"), connect=False, autostart=False, bell=False
    )
    async with app.run_test():
        await wait_until(lambda: app.socket_server is not None)
        frame = {"command": ["/usr/bin/touch", str(target)], "cwd": str(work)}
        sent = asyncio.ensure_future(request_exec(sock, leaked, frame, timeout=120))
        rows = await wait_until(lambda: app.inbox.rows())
        _replace_socket_token(state_dir / "exec-approvals.json")  # the leak is found: the token replaced
        assert store.socket_token_now() != leaked
        app.resolve(rows[0], "allow-always")  # the operator's yes in the console's own inbox
        result = await sent
    saved = [e.pattern for e in store.agent("main").allowlist]
    assert result is not None
    assert (result.get("ok"), target.exists(), saved) == (False, False, [])


async def test_class2_agent_main_finds_no_trace_of_the_operators_own_ask(state_dir: Path) -> None:
    """The defence held: the operator's own ask (naming no agent: main's policy) is never one of main's,
    by full id or by any one-character prefix of it, pending or decided."""
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        operator = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        asked = await operator.request("exec", {"command": "/usr/bin/touch /tmp/operator-only"})
        approval = str(asked["details"]["approvalId"])
        for state in ("pending", "decided"):
            for wanted in [approval, *"0123456789abcdef"]:
                with pytest.raises(RemoteError, match="unknown or expired approval id"):
                    await main.request("approvals.status", {"approvalId": wanted})
            if state == "pending":
                record = server.services.approvals.lookup(approval)
                assert record is not None and record.operators
                await operator.request("approve", {"id": approval, "decision": "deny"})
        await main.close()
        await operator.close()


async def test_class5_a_socket_request_frame_chooses_the_policy_the_operator_is_shown(
    state_dir: Path,
) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "always"\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir):
        console = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        own = await main.request("exec", {"command": "/usr/bin/touch /tmp/by-main"})
        assert own["details"]["allowedDecisions"] == ["allow-once", "deny"]  # the gateway's own ask
        async with _hosted_socket(state_dir, console, store, sock):
            body = {"command": "/usr/bin/touch /tmp/by-socket", "security": "full", "ask": "off"}
            asked = asyncio.ensure_future(request_decision(sock, token, body, timeout=60))

            async def shown() -> list[dict[str, Any]]:
                rows = (await console.request("approvals.pending", {}))["approvals"]
                return [row for row in rows if "by-socket" in row["command"]]

            row = (await wait_until(shown))[0]
            offered = (row["security"], row["ask"], row["allowedDecisions"])
            await console.request("approve", {"id": row["id"], "decision": "deny"})
            await asked
        await main.close()
        await console.close()
    assert offered == ("allowlist", "always", ["allow-once", "deny"])


async def test_class1_a_full_share_of_mains_asks_sends_a_socket_ask_past_the_gateways_proof(
    state_dir: Path,
) -> None:
    from console.app import ConsoleApp

    work = Path(os.environ["HOME"]) / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, leaked = store.socket_info()
    target = work / "ran-with-the-old-token"
    async with gateway(state_dir) as server:
        app = ConsoleApp(state_dir, config_path=str(state_dir / "config.toml"), autostart=False, bell=False)
        async with app.run_test():
            await wait_until(lambda: app.link.connected.is_set() and app.socket_server is not None)
            main = await connect(state_dir, operator=False)
            # Agent main fills its own share of waiting asks (32), as the gateway token's holder.
            fills = [
                asyncio.ensure_future(main.request("exec", {"command": f"/usr/bin/touch /tmp/fill-{n}"}))
                for n in range(32)
            ]
            await wait_until(lambda: len(server.services.approvals.pending()) == 32)
            frame = {"command": ["/usr/bin/touch", str(target)], "cwd": str(work)}
            sent = asyncio.ensure_future(request_exec(sock, leaked, frame, timeout=120))
            # The ask lands in the console's inbox, or (the gateway the only decider) is answered at once.
            rows = await wait_until(
                lambda: [r for r in app.inbox.rows() if r.source == "socket"] or sent.done()
            )
            _replace_socket_token(state_dir / "exec-approvals.json")
            if isinstance(rows, list):
                app.resolve(rows[0], "allow-once")  # the operator's yes, in the console's inbox
            result = await sent
            for fill in fills:
                fill.cancel()
            await main.close()
    assert result is not None
    assert (result.get("ok"), target.exists()) == (False, False), result


@pytest.mark.parametrize(
    "raw",
    [
        '{"type":"req","id":1,"method":"status","params":{"agentId":"\\ud800"}}',
        '{"type":"req","id":1,"method":"exec","params":{"command":"true","timeout":NaN}}',
        '{"type":"req","id":1,"method":"exec","params":{"command":"true","timeout":1e400}}',
        '{"type":"req","id":1,"method":"process","params":{"action":"poll","timeout":' + "9" * 30 + "}}",
        '{"type":"req","id":1,"method":"status","params":' + "[" * 70 + "]" * 70 + "}",
    ],
    ids=["lone-surrogate", "nan", "1e400", "huge-int", "deep"],
)
async def test_class5_what_no_encoder_sends_back_is_refused_at_the_wire(state_dir: Path, raw: str) -> None:
    """The defence held: a frame holding what no peer's encoder writes back is answered `bad_frame` by its
    id, and the connection goes on serving the agent."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        client, welcome = await RawClient.open(state_dir)
        assert welcome["type"] == "welcome" and welcome["agent"] == "main"
        client.reading(True)
        client.writer.write(raw.encode() + b"\n")
        await client.request("status", {})
        answers = [json.loads(await asyncio.wait_for(client.reader.readline(), 30)) for _ in range(2)]
        client.close()
    assert answers[0]["ok"] is False and answers[0]["error"]["code"] == "bad_frame", answers[0]
    assert answers[1]["ok"] is True and answers[1]["result"]["agent"] == "main", answers[1]


async def test_class2_a_socket_request_frame_is_asked_for_a_denied_principal(state_dir: Path) -> None:
    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\nask = "on-miss"\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir) as server:
        console = await connect(state_dir)
        main = await connect(state_dir, operator=False)
        with pytest.raises(RemoteError, match="security=deny"):
            await main.request("exec", {"command": "/usr/bin/touch /tmp/by-main"})
        async with _hosted_socket(state_dir, console, store, sock):
            body = {"command": "/usr/bin/touch /tmp/by-socket"}
            asked = asyncio.ensure_future(request_decision(sock, token, body, timeout=60))
            rows = await wait_until(lambda: server.services.approvals.pending() or asked.done())
            if isinstance(rows, list):
                await console.request("approve", {"id": rows[0].id, "decision": "allow-always"})
            answer = await asked
        await main.close()
        await console.close()
    assert answer == "deny"
