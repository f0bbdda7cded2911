"""Issue 27 §1: `agents revoke` left the agent's sandboxes' egress proxy serving as the agent (the listener
was its authority by place). Each request now carries the agent's credential generation its sandbox was served
under, and the hub refuses an older one than now: every listener of the agent at once, an ask in flight is
denied, a connection already relayed is ended, another agent's sandbox is untouched, and a run of the
agent's new credential serving its sandbox again brings its egress back."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from engine import principals
from engine.sandbox.egress import forwarder
from tests.helpers.egress import host_forwarder, origin
from tests.helpers.gateway import connect, gateway, listed, wait_until, write_config

OPS_A, OPS_B, DEV = "exechost-rv12-ops-a", "exechost-rv12-ops-b", "exechost-rv12-dev"


def _config(port: int, held: int) -> str:
    return (
        "[agents.defaults.sandbox.egress]\n"
        'mode = "allowlist"\n'
        f'allow = ["http://allowed.test:{port}", "held.test:{held}"]\n'
        "ask = true\n"
        'resolve = { "allowed.test" = "127.0.0.1", "asked.test" = "127.0.0.1", "held.test" = "127.0.0.1" }\n'
    )


async def _status(proxy: int, url: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "60"),
        *("-x", f"http://127.0.0.1:{proxy}", url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    return out.decode()


async def _tunnel(proxy: int, target: str) -> socket.socket:
    """A CONNECT tunnel through the sandbox's proxy, established (the origin holds it open)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", proxy))
    await loop.sock_sendall(sock, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await loop.sock_recv(sock, 4096)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def _asks(rows: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    return [r for r in rows if (r.get("agentId") or (r.get("request") or {}).get("agentId")) == agent]


async def test_a_revoke_reaches_every_listener_ask_and_connection_of_the_agent(state_dir: Path) -> None:
    held_conns: list[asyncio.StreamWriter] = []
    held_open = asyncio.Event()

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held_conns.append(writer)
        held_open.set()

    holder = await asyncio.start_server(hold, "127.0.0.1", 0)
    held_port = holder.sockets[0].getsockname()[1]
    try:
        with origin() as site:
            write_config(state_dir, _config(site.port, held_port) + listed("ops", "dev"))
            principals.mint(state_dir, "ops")
            principals.mint(state_dir, "dev")
            async with gateway(state_dir) as server:
                egress = server.services.egress
                dirs = {name: forwarder.prepare_dir(name) for name in (OPS_A, OPS_B, DEV)}
                for name, agent in ((OPS_A, "ops"), (OPS_B, "ops"), (DEV, "dev")):
                    await egress.listen(name, agent, None)  # as each sandbox's making does
                operator = await connect(state_dir)
                allowed = f"http://allowed.test:{site.port}/"
                try:
                    with (
                        host_forwarder(dirs[OPS_A]) as a,
                        host_forwarder(dirs[OPS_B]) as b,
                        host_forwarder(dirs[DEV]) as dev,
                    ):
                        assert await _status(a, allowed) == "200"
                        assert await _status(b, allowed) == "200"
                        tunnel = await _tunnel(a, f"held.test:{held_port}")
                        await held_open.wait()
                        # An ask of ops's waits in the inbox as the revoke comes.
                        asking = asyncio.ensure_future(_status(b, f"http://asked.test:{site.port}/"))
                        await wait_until(
                            lambda: [
                                r for r in server.services.approvals.pending() if r.request.agent_id == "ops"
                            ],
                            timeout=30,
                        )

                        await operator.request("agents.revoke", {"agent": "ops"})

                        assert await asking == "403"  # the ask in flight was denied, not left waiting
                        assert _asks(await operator.pending_approvals(), "ops") == []
                        loop = asyncio.get_running_loop()
                        # the tunnel it held was ended (the bound only keeps a broken build from hanging)
                        assert await asyncio.wait_for(loop.sock_recv(tunnel, 1), 60) == b""
                        tunnel.close()
                        for proxy in (a, b):  # every listener of ops's at once, with no list chased
                            assert await _status(proxy, allowed) == "403"
                            assert await _status(proxy, f"http://asked.test:{site.port}/") == "403"
                        assert _asks(await operator.pending_approvals(), "ops") == []
                        assert await _status(dev, allowed) == "200"  # another agent's egress goes on

                        # ops added again: a run of its new credential serving a sandbox brings that
                        # one's egress back; the one no new run served stays refused.
                        principals.mint(state_dir, "ops")
                        # (as SandboxManager._egress_ready: served under the ended generation, the sandbox
                        # is ended first — its processes are the old credential's — then served anew)
                        assert await egress.listen(OPS_A, "ops", None)
                        assert not await egress.listen(OPS_A, "ops", None)
                        assert await _status(a, allowed) == "200"
                        assert await _status(b, allowed) == "403"
                finally:
                    await operator.close()
    finally:
        for writer in held_conns:
            writer.close()
        holder.close()
        await holder.wait_closed()
