"""Fresh round 15 a: issue 27 §1, the authority the gateway grants or accepts on its wires and principals.

Each test is an attack by a hostile agent on a real gateway (its sockets, handshake, verbs, credentials),
as `tests/attacks/harness.py` sets one up. A strict xfail is an attack that works today."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import (
    OPERATOR_TOKEN_NAME,
    RemoteError,
    ensure_token,
    read_token,
    token_path,
)
from engine.sessions import registry
from tests.attacks.harness import ALLOWLIST
from tests.attacks.rawclient import RawClient
from tests.helpers.daemon import Daemon
from tests.helpers.egress import origin
from tests.helpers.gateway import connect, gateway, wait_until, write_config

OPS = ALLOWLIST + '\n[[agents.list]]\nid = "ops"\n'


async def _agent(state: Path, token: str | None = None) -> ControlClient:
    """An agent's connection: with `token`, agent ops's credential; without, the gateway token alone."""
    return await connect(state, "agent", operator=False, credential=token)


def _allow(state: Path, agent: str, program: str) -> None:
    path = shutil.which(program)
    assert path is not None
    ApprovalsStore(state / "exec-approvals.json").add_allowlist(agent, path)


async def _approved_run(
    state: Path, server: Any, ops: ControlClient, command: str, **params: Any
) -> dict[str, Any]:
    """Ops asks for `command`; the operator (attached) allows it once; the exec's details."""
    operator = await connect(state, "op")
    try:
        await operator.request("approvals.attach")
        call = asyncio.ensure_future(ops.request("exec", {"command": command, **params}))
        await wait_until(lambda: len(server.services.approvals.pending()) == 1)
        ask = server.services.approvals.pending()[0]
        assert ask.request.agent_id == "ops"
        await operator.request("approve", {"id": ask.id, "decision": "allow-once"})
        result = await asyncio.wait_for(call, 30)
    finally:
        await operator.close()
    details: dict[str, Any] = result["details"]
    details["_approval"] = ask.id
    return details


# ---- session ids name no owner: an approval's run is looked up by a bare id ---------------------------


async def test_class2_a_reused_session_id_is_read_as_another_agents_approved_run(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The id space is small (56 adjectives x 57 nouns) and forgets dropped ids at every restart: on a
    # busy gateway a collision comes by itself. One word each makes it come on the first session here.
    monkeypatch.setattr(registry, "_ADJECTIVES", ("calm",))
    monkeypatch.setattr(registry, "_NOUNS", ("gulf",))
    write_config(state_dir, OPS)
    token = principals.mint(state_dir, "ops")
    _allow(state_dir, "main", "sleep")
    async with gateway(state_dir) as server:
        ops = await _agent(state_dir, token)
        ran = await _approved_run(state_dir, server, ops, "sh -c 'exit 3'", background=True)
        approval, sid = ran["_approval"], ran["sessionId"]

        async def ended() -> dict[str, Any] | None:
            got = await ops.request("approvals.status", {"approvalId": approval})
            return got if got["details"]["run"]["status"] != "running" else None

        mine = await wait_until(ended)
        assert mine["details"]["run"] == {**mine["details"]["run"], "sessionId": sid, "exitCode": 3}
        await ops.request("process", {"action": "remove", "sessionId": sid})  # done with it: the id is free
        await ops.close()
    async with gateway(state_dir):
        main = await _agent(state_dir)  # another agent: main, on the gateway token alone
        started = await main.request("exec", {"command": "sleep 300", "background": True})
        assert started["details"]["sessionId"] == sid  # the id ops's approved run had
        ops = await _agent(state_dir, token)
        seen = await ops.request("approvals.status", {"approvalId": approval})
        operator = await connect(state_dir, "op")
        history = (await operator.request("approvals.history"))["approvals"]
        row = next(r for r in history if r["id"] == approval)
        await main.request("process", {"action": "kill", "sessionId": sid})
        for client in (main, ops, operator):
            await client.close()
    # ops's approved run ended with code 3; both views must say so, never main's live session's state
    assert seen["details"]["run"]["exitCode"] == 3, seen["text"]
    assert row["run"]["exitCode"] == 3, row["run"]


# ---- the operator's own token: replaced on disk, the old one still holds -------------------------------


async def test_class1_a_replaced_operator_token_still_opens_the_operator_role(state_dir: Path) -> None:
    write_config(state_dir, OPS)
    async with gateway(state_dir):
        leaked = read_token(state_dir, OPERATOR_TOKEN_NAME)
        assert leaked
        holder = await connect(state_dir, "leaked")  # whoever read operator.json: the operator role
        # The operator learns of the leak and replaces the token, as agents' credentials are replaced.
        token_path(state_dir, OPERATOR_TOKEN_NAME).unlink()
        fresh = ensure_token(state_dir, OPERATOR_TOKEN_NAME)
        assert fresh != leaked
        dropped = None
        with contextlib.suppress(RemoteError):
            operator = await connect(state_dir, "op")  # the new token
            dropped = (await operator.request("agents.refresh"))["dropped"]
            await operator.close()
        again, first = await RawClient.open(state_dir, operator=leaked)
        again.close()
        still = not holder.closed and "approvals" in await holder.request("approvals.pending")
        await holder.close()
    found = [
        *(["the operator's new token is refused"] if dropped is None else []),
        *([f"the leaked token opens a new operator connection: {first}"] if first["type"] != "error" else []),
        *(["the leaked token's live connection keeps the operator role"] if still else []),
    ]
    assert not found, found


async def test_class1_a_replaced_gateway_token_still_opens_agent_main(state_dir: Path) -> None:
    write_config(state_dir, OPS)
    async with gateway(state_dir):
        leaked = read_token(state_dir)
        assert leaked
        token_path(state_dir).unlink()
        fresh = ensure_token(state_dir)
        assert fresh != leaked
        renewed = None
        with contextlib.suppress(RemoteError):
            client = await _agent(state_dir)  # a client with the new gateway token
            renewed = client.agent
            await client.close()
        again, first = await RawClient.open(state_dir, token=leaked)
        again.close()
    found = [
        *(["the new gateway token is refused"] if renewed is None else []),
        *([f"the leaked token still opens agent main: {first}"] if first["type"] != "error" else []),
    ]
    assert not found, found


def _settled(server: Any, run: dict[str, Any] | None) -> bool:
    """The approved run ended (its session exited) or was never started (refused, stale, denied)."""
    if run is None:
        return False
    sid = run.get("sessionId")
    if run.get("status") not in ("starting", "running") or not sid:
        return True
    session = server.services.sessions.get(sid)
    return session is not None and session.status != "running"


# ---- a principal cut off by the config: what it asked before still runs as it ---------------------------


async def test_class1_an_ask_of_a_connection_the_config_cut_off_runs_when_approved(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, OPS)
    proof = tmp_path / "ran"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        anonymous = await _agent(state_dir)  # the gateway token alone: main, for now
        call = asyncio.ensure_future(
            anonymous.request("exec", {"command": f"sh -c 'echo ran > {proof}'", "background": True})
        )
        await wait_until(lambda: len(server.services.approvals.pending()) == 1)
        ask = server.services.approvals.pending()[0]
        # The operator decides the gateway token alone is nobody: that connection is cut off.
        write_config(state_dir, OPS + '\n[gateway]\nanonymous = "none"\n')
        await operator.request("agents.refresh")
        await wait_until(lambda: anonymous.closed)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(call, 5)
        still = [r.id for r in server.services.approvals.pending()]
        if ask.id in still:  # shown to the human as main's ask, which it no longer is
            await operator.request("approve", {"id": ask.id, "decision": "allow-once"})
            await wait_until(lambda: _settled(server, ask.run))
        await operator.close()
    assert not proof.exists(), f"the cut-off connection's command ran after approval (ask {ask.slug})"


# A process of another Unix account on the agents' socket, in the system Python (the test's venv need not be
# readable to that account): it says hello with no token, asks for one command and reads until dropped.
ACCOUNT_PEER = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def send(frame):
    f.write(json.dumps(frame).encode() + b"\n"); f.flush()
hello = {"type": "hello", "version": 1, "client": "acct", "name": "acct", "token": ""}
send({**hello, **(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})})
print(f.readline().decode().strip(), flush=True)
send({"type": "req", "id": 1, "method": "exec", "params": {"command": sys.argv[2], "background": True}})
for line in f:
    print(line.decode().strip(), flush=True)
"""
AGENT_UID = 47123  # no passwd entry needed: the kernel's word (SO_PEERCRED) is all the gateway reads


async def _account_peer(
    door: Path, command: str, hello: dict[str, str] | None = None, agent: str = "ops"
) -> asyncio.subprocess.Process:
    """A process of account AGENT_UID (group nogroup) asking for `command` on the agents' socket (its hello
    with `hello` added); its first frame back must welcome it as `agent` ("" : must refuse it)."""
    peer = await asyncio.create_subprocess_exec(
        "/usr/bin/python3", "-I", "-c", ACCOUNT_PEER, f"{door}/s/agents.sock", command,
        json.dumps(hello or {}),
        user=AGENT_UID, group=65534, extra_groups=[65534],
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert peer.stdout is not None
    first = json.loads(await asyncio.wait_for(peer.stdout.readline(), 30))
    if agent:
        assert first.get("agent") == agent, first
    else:
        assert first.get("type") == "error", first
    return peer


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another Unix account")
@pytest.mark.parametrize("restart", [False, True], ids=["live", "restarted"])
async def test_class1_an_unmapped_accounts_ask_still_runs_as_its_old_agent(
    state_dir: Path, restart: bool
) -> None:
    door = Path(tempfile.mkdtemp(prefix="ehag-", dir="/tmp"))
    os.chmod(door, 0o755)  # the other account must reach the socket's own (0750) dir
    proof = door / "ran"
    mapped = (
        OPS.replace('id = "ops"\n', f'id = "ops"\nuid = {AGENT_UID}\n')
        + f'\n[gateway]\nagentGroup = "nogroup"\nagentSocket = "{door}/s/agents.sock"\n'
    )
    unmapped = mapped.replace(f"uid = {AGENT_UID}\n", "")
    write_config(state_dir, mapped)
    peer = None
    try:
        async with gateway(state_dir) as server:
            operator = await connect(state_dir, "op")
            await operator.request("approvals.attach")
            peer = await _account_peer(door, f"sh -c 'echo ran > {proof}'")
            await wait_until(lambda: len(server.services.approvals.pending()) == 1)
            ask = server.services.approvals.pending()[0]
            assert ask.request.agent_id == "ops"
            # The account is no longer agent ops (it left, or is someone else's now): its mapping goes.
            write_config(state_dir, unmapped)
            await operator.request("agents.refresh")
            await asyncio.wait_for(peer.wait(), 30)  # dropped
            if not restart:
                await _approve_if_pending(server, operator, ask.id)
            await operator.close()
        if restart:
            async with gateway(state_dir) as server:
                operator = await connect(state_dir, "op")
                await _approve_if_pending(server, operator, ask.id)
                await operator.close()
        assert not proof.exists(), f"the unmapped account's ask ran as ops after approval ({ask.slug})"
    finally:
        if peer is not None and peer.returncode is None:
            peer.kill()
            await peer.wait()
        shutil.rmtree(door, ignore_errors=True)


async def _approve_if_pending(server: Any, operator: ControlClient, approval: str) -> None:
    """The operator approves the ask once, if it is still there, and waits for what that led to."""
    if approval not in [r.id for r in server.services.approvals.pending()]:
        return
    await operator.request("approve", {"id": approval, "decision": "allow-once"})
    record = server.services.approvals.lookup(approval)
    await wait_until(lambda: _settled(server, record.run if record is not None else {"status": "gone"}))


# ---- what the autostarting client leaves the daemon besides its env ------------------------------------


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return True


FULL_MAIN = (
    '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
    '\n[[agents.list]]\nid = "main"\ntools.exec.security = "full"\ntools.exec.ask = "off"\n'
    '\n[[agents.list]]\nid = "ops"\n'
)


async def test_class1_the_autostarting_agents_umask_is_every_runs(state_dir: Path) -> None:
    write_config(state_dir, FULL_MAIN)
    token = principals.mint(state_dir, "ops")
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "EXECHOST_AGENT_TOKEN": token}
    env.pop("EXECHOST_GATEWAY_SOCKET", None)

    def loose() -> None:
        os.umask(0)

    # Agent ops's own client (its MCP server, its `exechost exec`) finds no gateway and starts one.
    started = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runner", "exec", "true",
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        cwd=str(state_dir.parent), preexec_fn=loose,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    said, _ = await asyncio.wait_for(started.communicate(), 120)
    operator = await ControlClient.connect(state_dir, client="op", autostart=False, operator=True)
    pid = 0
    try:
        pid = (await operator.request("status"))["pid"]
        daemon_umask = next(
            line.split()[1]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Umask:")
        )
        main = await ControlClient.connect(state_dir, client="main", autostart=False)
        ran = await main.request("exec", {"command": "umask"})
        await main.close()
    finally:
        with contextlib.suppress(Exception):
            await operator.request("shutdown")
        await operator.close()
        if pid:  # the daemon is gone before the test ends (the suite's fixture would warn of it)
            await wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=30)
    assert b"started a gateway" in said, said
    run_umask = str(ran["details"].get("aggregated", "")).strip()
    # Whatever the operator's own umask, another account must never be able to write what a run makes.
    assert int(run_umask, 8) & 0o002, f"the gateway's umask is {daemon_umask}, main's run's {run_umask}"


# ---- the operator's own runs: filed in agent main's namespace ------------------------------------------


async def test_class1_the_operators_run_output_is_the_gateway_token_holders(state_dir: Path) -> None:
    write_config(state_dir, FULL_MAIN)
    async with gateway(state_dir):
        operator = await connect(state_dir, "op")
        ran = await operator.request(
            "exec", {"command": "echo OPERATOR-SECRET-41; sleep 30", "background": True}
        )
        sid = ran["details"]["sessionId"]
        anonymous = await _agent(state_dir)  # the gateway token alone

        async def read() -> str:
            got = await anonymous.request("process", {"action": "log", "sessionId": sid})
            text = str(got.get("text") or "")
            return text if "OPERATOR-SECRET-41" in text else ""

        seen = ""
        with contextlib.suppress(Exception):
            seen = await wait_until(read, timeout=5)
        listed = [s.get("sessionId") or s.get("id") for s in await anonymous.list_sessions()]
        # It ends the operator's run too, and drains the event the operator's `exechost events` waits for.
        killed = await anonymous.request("process", {"action": "kill", "sessionId": sid})
        alive = await operator.request("process", {"action": "poll", "sessionId": sid})

        async def drained() -> list[Any]:
            got = (await anonymous.request("events", {"drain": True}))["events"]
            return [e for e in got if sid in str(e.get("text"))]

        events: list[Any] = []
        with contextlib.suppress(Exception):
            events = await wait_until(drained, timeout=5)
        for client in (anonymous, operator):
            await client.close()
    found = [
        *(["the operator's session is in its list"] if sid in listed else []),
        *([f"it read the operator's output: {seen!r}"] if seen else []),
        *([f"it killed the operator's run: {killed}"] if alive["details"].get("status") != "running" else []),
        *([f"it drained the operator's event: {events[0]}"] if events else []),
    ]
    assert not found, f"the gateway-token holder: {found}"


# ---- a session's end, filed under the approval its id was linked to before a crash ---------------------


MARK = "eh15a-lost-run"


def _kill_marked() -> None:
    """The approved run the crashed daemon left behind (by its marker, pid by pid)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if MARK.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)


def _logged_start(state: Path, approval: str, sid: str) -> bool:
    for log in (state / "history").glob("decisions*.jsonl*"):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                run = entry.get("run") if isinstance(entry, dict) else None
                if entry.get("id") == approval and isinstance(run, dict) and run.get("sessionId") == sid:
                    return True
    return False


async def test_class2_another_agents_session_end_is_filed_as_an_approved_runs_end(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(state_dir, FULL_MAIN)
    token = principals.mint(state_dir, "ops")
    # The daemon keeps no session host: its runs die with it, as without one (or one lost with it).
    daemon = Daemon(state_dir, env={"EXECHOST_SESSION_HOLDERS": "0"}).start()
    try:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        ops = await _agent(state_dir, token)
        call = asyncio.ensure_future(
            ops.request("exec", {"command": f"sh -c 'sleep 300; : {MARK}'", "background": True})
        )
        pending = await wait_until(operator.pending_approvals)
        approval = pending[0]["id"]
        await operator.request("approve", {"id": approval, "decision": "allow-once"})
        sid = (await asyncio.wait_for(call, 30))["details"]["sessionId"]
        for client in (operator, ops):
            await client.close()
        # The run's `starting` line (what links the session to the approval) is on disk before the crash.
        await wait_until(lambda: _logged_start(state_dir, approval, sid))
        daemon.kill()  # a crash while ops's approved run runs: its end is never written
    finally:
        daemon.stop()
        _kill_marked()
    # The next gateway's first session happens to get that id (one in 3,192; here, by narrowing the words).
    adjective, noun = sid.split("-", 1)
    monkeypatch.setattr(registry, "_ADJECTIVES", (adjective,))
    monkeypatch.setattr(registry, "_NOUNS", (noun,))
    async with gateway(state_dir) as server:
        main = await _agent(state_dir)
        ran = await main.request("exec", {"command": "sh -c 'exit 7'", "background": True})
        assert ran["details"]["sessionId"] == sid
        session = server.services.sessions.get(sid)
        assert session is not None
        await wait_until(lambda: session.status != "running")
        await server.services.journal.history_writer.barrier()
        await main.close()
    async with gateway(state_dir):  # no live session by that id now: only what the log says
        ops = await _agent(state_dir, token)
        seen = (await ops.request("approvals.status", {"approvalId": approval}))["details"]["run"]
        await ops.close()
    assert seen.get("exitCode") != 7, f"ops's approved run is recorded with main's session's end: {seen}"


LISTENER = (
    "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind(('127.0.0.1', 5999)); s.listen(); print('listening', flush=True)\n"
    "while True:\n c, _ = s.accept(); c.sendall(b'password prompt from agent main\\n'); c.close()"
)
DIALER = (
    "import socket, sys\ntry:\n c = socket.create_connection(('127.0.0.1', 5999), 5)\n"
    " print('got:', c.recv(100).decode().strip())\nexcept OSError as e:\n print('no server:', e)"
)


async def test_class1_the_operators_run_dials_agent_mains_loopback_server(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, FULL_MAIN)
    python = shutil.which("python3")
    assert python is not None
    listener, dialer = tmp_path / "listen.py", tmp_path / "dial.py"
    listener.write_text(LISTENER)
    dialer.write_text(DIALER)
    async with gateway(state_dir):
        main = await _agent(state_dir)  # the gateway token alone (security = full for main here)
        started = await main.request(
            "exec", {"command": f"{python} {listener}", "background": True, "yieldMs": 10_000}
        )
        sid = started["details"]["sessionId"]

        async def up() -> bool:
            got = await main.request("process", {"action": "log", "sessionId": sid})
            return "listening" in str(got.get("text"))

        await wait_until(up)
        operator = await connect(state_dir, "op")
        ran = await operator.request("exec", {"command": f"{python} {dialer}"})
        await main.request("process", {"action": "kill", "sessionId": sid})
        for client in (main, operator):
            await client.close()
    said = str(ran["details"].get("aggregated", ""))
    assert "agent main" not in said, f"the operator's command talked to main's server: {said!r}"


# ---- held: what a rotation does to the old credential's ask (the contrast to the config cut-offs above) ----


async def test_held_a_rotation_settles_what_the_old_credential_asked(state_dir: Path, tmp_path: Path) -> None:
    """The same ask as in the cut-off attacks above, made with a credential the operator then rotates: it is
    settled at once and never runs, however the operator answers its row afterwards."""
    write_config(state_dir, OPS)
    token = principals.mint(state_dir, "ops")
    proof = tmp_path / "ran"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        ops = await _agent(state_dir, token)
        call = asyncio.ensure_future(
            ops.request("exec", {"command": f"sh -c 'echo ran > {proof}'", "background": True})
        )
        await wait_until(lambda: len(server.services.approvals.pending()) == 1)
        ask = server.services.approvals.pending()[0]
        rotated = await operator.request("agents.rotate", {"agent": "ops"})
        assert rotated["dropped"] == 1
        with contextlib.suppress(Exception):
            await asyncio.wait_for(call, 10)
        assert ask.id not in [r.id for r in server.services.approvals.pending()]
        with contextlib.suppress(RemoteError):
            await operator.request("approve", {"id": ask.id, "decision": "allow-once"})
        assert ask.resolved and ask.decision != "allow-once"
        await operator.close()
    assert not proof.exists()


# ---- an agent the config no longer names: its credential keeps it, under the defaults ------------------


async def test_class1_an_agent_removed_from_the_config_runs_under_the_defaults(
    state_dir: Path, tmp_path: Path
) -> None:
    defaults = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    own = '\n[[agents.list]]\nid = "ops"\ntools.exec.security = "allowlist"\ntools.exec.ask = "on-miss"\n'
    write_config(state_dir, defaults + own)
    token = principals.mint(state_dir, "ops")
    proof = tmp_path / "ran"
    async with gateway(state_dir):
        ops = await _agent(state_dir, token)
        before = await ops.request("exec", {"command": f"touch {proof}"})
        assert before["details"]["status"] == "approval-pending" and not proof.exists()
        write_config(state_dir, defaults)  # the operator retires ops: its entry goes
        after: dict[str, Any] = {}
        with contextlib.suppress(RemoteError, ConnectionError):
            after = await ops.request("exec", {"command": f"touch {proof}"})
        with contextlib.suppress(RemoteError, OSError):
            again = await _agent(state_dir, token)
            after = after or await again.request("exec", {"command": f"touch {proof}"})
            await again.close()
        await ops.close()
    assert not proof.exists(), f"retired agent ops ran unasked: {after.get('details', {}).get('status')}"


async def test_class1_the_operators_ask_and_its_env_are_read_by_prefix(state_dir: Path) -> None:
    write_config(state_dir, OPS)  # main under the allowlist: the operator's command asks
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        asked = await operator.request(
            "exec", {"command": "deploy --prod", "env": {"DEPLOY_TOKEN": "op-secret-7731"}}
        )
        assert asked["details"]["status"] == "approval-pending"
        assert len(server.services.approvals.pending()) == 1
        anonymous = await _agent(state_dir)  # the gateway token alone
        found: list[str] = []
        for digit in "0123456789abcdef":
            with contextlib.suppress(RemoteError):
                got = await anonymous.request("approvals.status", {"approvalId": digit})
                found.append(json.dumps(got["details"]["approval"]))
        for client in (anonymous, operator):
            await client.close()
    leaked = [f for f in found if "op-secret-7731" in f]
    assert not leaked, f"the gateway-token holder read the operator's ask: {leaked[0][:300]}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another Unix account")
@pytest.mark.parametrize("proof", ["credential", "operator"])
async def test_held_an_account_borrows_no_token(state_dir: Path, tmp_path: Path, proof: str) -> None:
    """Agent intern's account (the kernel's word) presents agent ops's credential, or the operator token it
    somehow read: refused at its hello, never ops or the operator, and nothing it sent runs."""
    door = Path(tempfile.mkdtemp(prefix="ehag-", dir="/tmp"))
    os.chmod(door, 0o755)  # the other account must reach the socket's own (0750) dir
    ran = tmp_path / "ran"
    config = (
        OPS
        + f'\n[[agents.list]]\nid = "intern"\nuid = {AGENT_UID}\n'
        + f'\n[gateway]\nagentGroup = "nogroup"\nagentSocket = "{door}/s/agents.sock"\n'
    )
    write_config(state_dir, config)
    token = principals.mint(state_dir, "ops")
    try:
        async with gateway(state_dir) as server:
            shown = token if proof == "credential" else read_token(state_dir, OPERATOR_TOKEN_NAME) or ""
            peer = await _account_peer(door, f"touch {ran}", {proof: shown}, agent="")
            await asyncio.wait_for(peer.wait(), 30)
            assert not server.services.approvals.pending()
        assert not ran.exists()
    finally:
        shutil.rmtree(door, ignore_errors=True)


def _writer(fifo: Path) -> int | None:
    """The FIFO's write end once its reader has it open (never blocking), else None."""
    with contextlib.suppress(OSError):
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    return None


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
async def test_class1_a_run_of_a_connection_the_config_cut_off_keeps_its_egress(
    state_dir: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    with origin() as site:
        egress = (
            '\n[agents.defaults.sandbox.egress]\nmode = "allowlist"\n'
            f'allow = ["http://allowed.test:{site.port}"]\nask = false\n'
            'resolve = { "allowed.test" = "127.0.0.1" }\n'
        )
        write_config(state_dir, FULL_MAIN + egress)
        fetch = f"http://allowed.test:{site.port}/x"
        curl = f"curl -sS --max-time 20 -o /dev/null -w 'code=%{{http_code}}' {fetch}"
        script = f"cat {fifo} >/dev/null; {curl}"
        async with gateway(state_dir) as server:
            anonymous = await _agent(state_dir)  # the gateway token alone: main, for now
            started = await anonymous.request("exec", {"command": script, "background": True})
            sid = started["details"]["sessionId"]
            operator = await connect(state_dir, "op")
            write_config(state_dir, FULL_MAIN + egress + '\n[gateway]\nanonymous = "none"\n')
            await operator.request("agents.refresh")
            await wait_until(lambda: anonymous.closed)
            # The run it left behind reaches out now (the FIFO is its trigger), if it still runs at all.
            session = server.services.sessions.get(sid)
            assert session is not None
            fd = await wait_until(lambda: _writer(fifo) or (session.status != "running" and -1))
            if fd >= 0:
                os.write(fd, b"go\n")
                os.close(fd)
            await wait_until(lambda: session.status != "running")
            log = await operator.request("process", {"action": "log", "sessionId": sid})
            await operator.close()
    said = str(log.get("text"))
    assert "code=200" not in said, f"the cut-off connection's run still egresses: {said!r}"


async def test_class1_an_ask_of_a_credential_removed_on_disk_runs_after_a_refresh(
    state_dir: Path, tmp_path: Path
) -> None:
    write_config(state_dir, OPS)
    token = principals.mint(state_dir, "ops")
    proof = tmp_path / "ran"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        await operator.request("approvals.attach")
        ops = await _agent(state_dir, token)
        call = asyncio.ensure_future(
            ops.request("exec", {"command": f"sh -c 'echo ran > {proof}'", "background": True})
        )
        await wait_until(lambda: len(server.services.approvals.pending()) == 1)
        ask = server.services.approvals.pending()[0]
        (principals.agents_dir(state_dir) / "ops.json").unlink()  # the credential is gone from disk
        dropped = (await operator.request("agents.refresh"))["dropped"]
        assert dropped == ["ops"]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(call, 5)
        await _approve_if_pending(server, operator, ask.id)
        await operator.close()
    assert not proof.exists(), f"the removed credential's ask ran as ops after approval ({ask.slug})"
