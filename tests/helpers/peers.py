"""Raw peers and event collectors the gateway verb tests share."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from engine.protocol.client import ControlClient
from engine.protocol.frames import (
    MAX_FRAME_BYTES,
    Event,
    Hello,
    encode_frame,
    read_token,
    socket_path,
)
from tests.helpers.gateway import connect


async def raw(state: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(str(socket_path(state)), limit=4 * MAX_FRAME_BYTES)


async def hello(state: Path, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> dict:
    writer.write(encode_frame(Hello(token=read_token(state) or "", client="raw")))
    await writer.drain()
    return json.loads(await reader.readline())


async def still_works(state: Path) -> None:
    client = await connect(state)
    try:
        assert (await client.request("status"))["pid"] == os.getpid()
    finally:
        await client.close()


PRINTER = "for i in $(seq 1 30); do echo {tag}-$i; sleep 0.02; done"


def collect(client: ControlClient) -> list[Event]:
    seen: list[Event] = []
    client.add_listener(seen.append)
    return seen


def output_of(events: list[Event], sid: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == "session.output" and e.data.get("sessionId") == sid]


def exited(events: list[Event], *sids: str) -> bool:
    done = {e.data.get("sessionId") for e in events if e.event == "session.exited"}
    return set(sids) <= done


async def start(agent: ControlClient, tag: str, *, gated: bool = False) -> str:
    """A background PRINTER; `gated`: it prints nothing until `release` (what a subscriber is sent before
    then is decided by what it asked for, never by how fast the printer started)."""
    command = ("read go; " if gated else "") + PRINTER.format(tag=tag)
    res = await agent.request("exec", {"command": command, "background": True})
    return str(res["details"]["sessionId"])


async def release(agent: ControlClient, *sids: str) -> None:
    """Let gated PRINTERs print."""
    for sid in sids:
        await agent.request("process", {"action": "write", "sessionId": sid, "data": "go\n"})
