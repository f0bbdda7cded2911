"""Fresh round 15 a: issue 27 §1, the authority the gateway grants or accepts on its wires and principals.

Each test is an attack by a hostile agent on a real gateway (its sockets, handshake, verbs, credentials),
as `tests/attacks/harness.py` sets one up. A strict xfail is an attack that works today."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
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


@pytest.mark.xfail(
    strict=True,
    reason="open: an approval's run is kept as a bare session id and `approvals.status`/`history` show "
    "whatever session holds that id now (`current_run`); ids are reused (3,192 two-word slugs, the "
    "dropped set is in memory only), so agent ops reads agent main's session's status as its approved "
    "run's, and the operator's history shows main's live session as the outcome of ops's approval.",
)
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
send({"type": "hello", "version": 1, "client": "acct", "name": "acct", "token": ""})
print(f.readline().decode().strip(), flush=True)
send({"type": "req", "id": 1, "method": "exec", "params": {"command": sys.argv[2], "background": True}})
for line in f:
    print(line.decode().strip(), flush=True)
"""
AGENT_UID = 47123  # no passwd entry needed: the kernel's word (SO_PEERCRED) is all the gateway reads


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another Unix account")
async def test_class1_an_unmapped_accounts_ask_still_runs_as_its_old_agent(
    state_dir: Path, tmp_path: Path
) -> None:
    door = Path(tempfile.mkdtemp(prefix="ehag-", dir="/tmp"))
    os.chmod(door, 0o755)  # the other account must reach the socket's own (0750) dir
    proof = door / "ran"
    mapped = (
        OPS.replace('id = "ops"\n', f'id = "ops"\nuid = {AGENT_UID}\n')
        + f'\n[gateway]\nagentGroup = "nogroup"\nagentSocket = "{door}/s/agents.sock"\n'
    )
    write_config(state_dir, mapped)
    peer = None
    try:
        async with gateway(state_dir) as server:
            operator = await connect(state_dir, "op")
            await operator.request("approvals.attach")
            peer = await asyncio.create_subprocess_exec(
                "/usr/bin/python3", "-I", "-c", ACCOUNT_PEER, f"{door}/s/agents.sock",
                f"sh -c 'echo ran > {proof}'",
                user=AGENT_UID, group=65534, extra_groups=[65534],
                stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert peer.stdout is not None
            welcome = json.loads(await asyncio.wait_for(peer.stdout.readline(), 30))
            assert welcome.get("agent") == "ops", welcome
            await wait_until(lambda: len(server.services.approvals.pending()) == 1)
            ask = server.services.approvals.pending()[0]
            assert ask.request.agent_id == "ops"
            # The account is no longer agent ops (it left, or is someone else's now): its mapping goes.
            write_config(state_dir, mapped.replace(f"uid = {AGENT_UID}\n", ""))
            await operator.request("agents.refresh")
            await asyncio.wait_for(peer.wait(), 30)  # dropped
            if ask.id in [r.id for r in server.services.approvals.pending()]:
                await operator.request("approve", {"id": ask.id, "decision": "allow-once"})
                await wait_until(lambda: _settled(server, ask.run))
            await operator.close()
        assert not proof.exists(), f"the unmapped account's ask ran as ops after approval ({ask.slug})"
    finally:
        if peer is not None and peer.returncode is None:
            peer.kill()
            await peer.wait()
        shutil.rmtree(door, ignore_errors=True)
