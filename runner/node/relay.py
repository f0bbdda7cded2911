"""The link side of `exechost node run`: `node serve --stdio` relays its bytes to the service on node.sock.

Owned by neither end: `serve.py` (the stdio entry) and `service.py` (the service) both import it, and it
imports neither, so the two never import each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Protocol

from engine import unixsock
from engine.nodes.wire import MAX_LINE
from runner.node.peerns import outside_our_namespaces

SOCKET_NAME = "node.sock"
RELAY_CHUNK = 256 * 1024


class ByteSink(Protocol):
    """Where the service's bytes go: the link's stdout (links.Output)."""

    async def write(self, data: bytes) -> None: ...


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def peer_is_us(writer: asyncio.StreamWriter) -> tuple[bool, str]:
    peer = unixsock.peer_info(writer.get_extra_info("socket"))
    if peer is None:
        return False, "the kernel did not say who the peer is"
    if peer.uid != os.geteuid():
        return False, f"peer pid {peer.pid} runs as uid {peer.uid}, not uid {os.geteuid()}"
    # The uid alone is no proof: a host run of a gateway on this account is that uid (runner.node.peerns).
    why = outside_our_namespaces(writer.get_extra_info("socket"), peer.pid)
    return (False, why) if why is not None else (True, "")


async def relay_to_service(state_dir: Path, stdin: asyncio.StreamReader, stdout: ByteSink) -> int | None:
    """Relay the link's bytes to a `node run` service if one answers on node.sock; None when none does (the
    caller then serves in-process). A socket held by another uid is refused, not used and not replaced."""
    path = socket_path(state_dir)
    if unixsock.socket_path_problem(path) is not None or not path.exists():
        return None
    try:
        sock_reader, sock_writer = await asyncio.open_unix_connection(str(path), limit=MAX_LINE)
    except OSError:
        return None  # stale: nobody listens (the service was killed); in-process it is
    ok, why = peer_is_us(sock_writer)
    if not ok:
        sock_writer.close()
        print(f"exechost node: refusing {path}: {why}", file=sys.stderr)
        return 1
    await _pump_both(stdin, stdout, sock_reader, sock_writer)
    return 0


async def _pump_both(
    stdin: asyncio.StreamReader,
    stdout: ByteSink,
    sock_reader: asyncio.StreamReader,
    sock_writer: asyncio.StreamWriter,
) -> None:
    async def up() -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while chunk := await stdin.read(RELAY_CHUNK):
                sock_writer.write(chunk)
                await sock_writer.drain()
        with contextlib.suppress(OSError):
            sock_writer.write_eof()  # the gateway left: the service detaches this link

    async def down() -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while chunk := await sock_reader.read(RELAY_CHUNK):
                await stdout.write(chunk)

    up_task, down_task = asyncio.ensure_future(up()), asyncio.ensure_future(down())
    # Either side ending ends the link: the service closing (stopped, or a newer link took over) or the
    # gateway going away (its EOF is passed on, then the service's close ends `down`).
    await asyncio.wait({down_task, up_task}, return_when=asyncio.FIRST_COMPLETED)
    if up_task.done() and not down_task.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(down_task), 5)
    for task in (up_task, down_task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    sock_writer.close()
