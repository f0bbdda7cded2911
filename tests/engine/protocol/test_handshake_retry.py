"""A gateway that cuts a handshake off unanswered (its loop stalled past its hello timeout, as a restart
under load can: it closes with the hello unread, and the client sees a reset) is dialled again: nothing is
acted upon before a handshake ends. A refusal with a reason is never retried."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient, HandshakeCut
from engine.protocol.frames import RemoteError, socket_path
from tests.helpers.gateway import gateway, write_config

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


async def _cutter(path: Path, real: Path, cuts: int) -> tuple[asyncio.Server, list[int]]:
    """At `path`: the first `cuts` connections are reset once their hello arrived (unread), the rest are
    piped to the gateway at `real`."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(1)
        if len(seen) <= cuts:
            await reader.readexactly(1)  # the hello is there, and left unread
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_unix_connection(str(real))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    return await asyncio.start_unix_server(serve, str(path)), seen


@pytest.mark.parametrize("cuts", [1, 2])
async def test_a_cut_off_handshake_is_dialled_again(state_dir: Path, cuts: int) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        path = socket_path(state_dir)
        real = state_dir / "real.sock"
        os.rename(path, real)
        server, seen = await _cutter(path, real, cuts)
        try:
            client = await ControlClient.connect(state_dir, client="t", autostart=False, operator=True)
            try:
                assert (await client.request("exec", {"command": "echo $((40+2))"}))["text"] == "42"
            finally:
                await client.close()
        finally:
            server.close()
        assert len(seen) == cuts + 1


async def test_a_gateway_that_always_cuts_is_reported_and_a_refusal_is_not_retried(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        path = socket_path(state_dir)
        real = state_dir / "real.sock"
        os.rename(path, real)
        server, seen = await _cutter(path, real, 99)
        try:
            with pytest.raises(HandshakeCut):
                await ControlClient.connect(state_dir, client="t", autostart=False, operator=True)
            assert len(seen) == 3  # bounded: two more tries
        finally:
            server.close()
        os.unlink(path)
        os.rename(real, path)
        with pytest.raises(RemoteError):  # a refusal with a reason (a bad credential): once
            await ControlClient.connect(
                state_dir, client="t", autostart=False, credential="exa_not-a-credential"
            )
