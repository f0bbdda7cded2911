"""Fresh round 18 b: the wire and the principals (classes 1, 2, 3 and 5), attacked from a hostile agent's
connection, a client of exec-approvals.sock holding a leaked token, and agents acting together."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from console import socket_asks
from engine import principals
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest
from engine.approvals.socket.wire import request_exec
from engine.approvals.store import ApprovalsStore, generate_token
from engine.protocol.frames import RemoteError
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config

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


@pytest.mark.xfail(
    strict=True,
    reason="open: an exec-approvals.sock `exec` frame's ask (LocalExecHost's PromptRequest) carries no "
    "token_id, so the console relays it with no socketToken and the gateway files it under the gateway "
    "token (the operator's own relay): replacing the leaked socket token leaves it approvable, and on "
    "the operator's yes the old token's command runs and main's allow-always is saved (fresh round 17 b "
    "closed this for `request` frames only)",
)
async def test_class1_a_replaced_socket_tokens_exec_frame_ask_still_runs(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    work = home / "work"
    work.mkdir()
    write_config(state_dir, ALLOWLIST + f'hostWritable = ["{work}"]\n')
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, leaked = store.socket_info()
    target = work / "ran-with-the-old-token"
    async with gateway(state_dir):
        console = await connect(state_dir)  # the console's link to the gateway (operator)

        async def relay(prompt: PromptRequest) -> str:  # console/app.py socket_decider, gateway up
            answer = await console.request(socket_asks.relay_params(prompt))
            return str(answer.get("decision") or "deny")

        server = ApprovalSocketServer(
            sock,
            store.socket_token_now,
            decider=relay,
            exec_handler=LocalExecHost(str(state_dir / "config.toml")),
            config_path=str(state_dir / "config.toml"),
        )
        async with server:
            # The leaked token's holder sends an `exec` frame that needs an ask.
            frame = {"command": ["/usr/bin/touch", str(target)], "cwd": str(work)}
            sent = asyncio.ensure_future(request_exec(sock, leaked, frame, timeout=120))

            async def waiting() -> list[dict[str, Any]]:
                rows: list[dict[str, Any]] = (await console.request("approvals.pending", {}))["approvals"]
                return rows

            rows = await wait_until(waiting)
            # The operator learns the token leaked and replaces it; the old one opens nothing from now on.
            _replace_socket_token(state_dir / "exec-approvals.json")
            assert store.socket_token_now() != leaked
            # The ask in the inbox looks like any other of main's; the operator says yes.
            await console.request("approve", {"id": rows[0]["id"], "decision": "allow-always"})
            result = await sent
        await console.close()
    saved = [e.pattern for e in store.agent("main").allowlist]
    assert result is not None
    assert (result.get("ok"), target.exists(), saved) == (False, False, [])
