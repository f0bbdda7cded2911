"""Fresh round 15 a: the host runs a gateway-token-only connection started kept their way out after
`anonymous = "none"` cut that connection off (no credential generation moved). Host runs of a proof that is
not a credential are served by a listener of their own, under that proof's generation: the proof's cut ends
its tunnels, settles its asks and refuses what comes after, exactly as a revoke does the agent's, while
the agent's runs under its credential keep their way out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.commands import hostnet
from engine.protocol.frames import read_token
from runner.gateway.tokenfiles import token_id
from tests.attacks.test_revoke_egress import _asks, _config, _status, _tunnel
from tests.helpers.egress import host_forwarder, origin
from tests.helpers.gateway import connect, gateway, wait_until, write_config


def _anonymous(state_dir: Path) -> str:
    """runner.gateway.liveprincipal.proof_key of the gateway token alone: it names that very token."""
    return f"anonymous>main@{token_id(read_token(state_dir) or '')}"


async def test_a_proofs_cut_reaches_its_host_runs_listener_ask_and_tunnel_only(state_dir: Path) -> None:
    held_conns: list[asyncio.StreamWriter] = []
    held_open = asyncio.Event()

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held_conns.append(writer)
        held_open.set()

    holder = await asyncio.start_server(hold, "127.0.0.1", 0)
    held_port = holder.sockets[0].getsockname()[1]
    try:
        with origin() as site:
            config = _config(site.port, held_port)
            write_config(state_dir, config)
            async with gateway(state_dir) as server:
                egress, owner = server.services.egress, server.services.approvals.generations
                # As a call of the gateway token alone is taken up (handlers/exec.py), and a credential's.
                proof = _anonymous(state_dir)
                anonymous = hostnet.Authority(0, proof, owner.proof(proof, "main"))
                ways = [await asyncio.to_thread(egress.host_runs, "main", a) for a in (anonymous, None)]
                assert ways[0] is not None and ways[1] is not None and ways[0].socket != ways[1].socket
                operator = await connect(state_dir)
                allowed = f"http://allowed.test:{site.port}/"
                try:
                    with (
                        host_forwarder(Path(ways[0].socket).parent) as anon,
                        host_forwarder(Path(ways[1].socket).parent) as cred,
                    ):
                        assert await _status(anon, allowed) == "200"
                        tunnel = await _tunnel(anon, f"held.test:{held_port}")
                        await held_open.wait()
                        asking = asyncio.ensure_future(_status(anon, f"http://asked.test:{site.port}/"))
                        await wait_until(lambda: server.services.approvals.pending(), timeout=30)

                        write_config(state_dir, config + '\n[gateway]\nanonymous = "none"\n')
                        await operator.request("agents.refresh")

                        assert await asking == "403"  # its ask was settled, not left waiting
                        assert _asks(await operator.pending_approvals(), "main") == []
                        loop = asyncio.get_running_loop()
                        assert await asyncio.wait_for(loop.sock_recv(tunnel, 1), 60) == b""  # tunnel ended
                        tunnel.close()
                        assert await _status(anon, allowed) == "403"
                        assert await _status(cred, allowed) == "200"  # main's credential runs go on
                finally:
                    await operator.close()
    finally:
        for writer in held_conns:
            writer.close()
        holder.close()
        await holder.wait_closed()
