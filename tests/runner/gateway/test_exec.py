"""The `exec` verb over the socket: many concurrent calls, none mixed up."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers.gateway import FULL, connect, gateway, write_config


async def test_two_hundred_concurrent_execs_none_mixed_up(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        clients = [await connect(state_dir, f"c{i}") for i in range(4)]
        calls = [
            clients[i % 4].request(
                "exec", {"command": f"echo out-{i}; echo err-{i} >&2", "sessionKey": f"s{i % 7}"}
            )
            for i in range(200)
        ]
        results = await asyncio.gather(*calls)
        for i, result in enumerate(results):
            details = result["details"]
            assert details["status"] == "completed" and details["exitCode"] == 0, result
            assert sorted(result["text"].split()) == [f"err-{i}", f"out-{i}"], result
        for client in clients:
            await client.close()
