"""Issue 27 (round-4 e): a peer with no token must not exhaust what the operator's web console needs.

Any local account can open TCP connections to the console's loopback port, and the token is checked only
once a request head is in. 1,100 idle tokenless connections made accept() fail with EMFILE and the console
exited (test_fresh_round4_e.test_tokenless_peer_kills_the_web_console). Now a connection that has not
shown the token waits in one of engine.preauth's few slots (the oldest shed first, 5 s each), and an
accept() error is reported in one plain line and retried, never fatal. These are the operator's side of
it: the page still loads while tokenless peers hold connections, the console's descriptors stay bounded,
and even at its descriptor limit the console lives on and serves again."""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

from engine.preauth import SLOTS
from tests.helpers.gateway import FULL, wait_until, write_config
from tests.helpers.webconsole import serve_web


def _loads(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as res:
            return bool(res.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _tokenless(port: int, count: int) -> list[socket.socket]:
    """Up to `count` connections that each send the start of a request line and nothing more."""
    peers = []
    for _ in range(count):
        try:
            peer = socket.create_connection(("127.0.0.1", port), timeout=2)
            peer.sendall(b"GET / HTTP/1.1\r\n")
        except OSError:
            break
        peers.append(peer)
    return peers


async def test_the_operators_page_loads_while_tokenless_peers_hold_connections(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    web = await serve_web(state_dir)
    peers: list[socket.socket] = []
    try:
        await wait_until(lambda: asyncio.to_thread(_loads, web.url), timeout=30)
        idle = len(os.listdir(f"/proc/{web.proc.pid}/fd"))
        peers = _tokenless(web.port, 4 * SLOTS)
        assert len(peers) == 4 * SLOTS
        # Every peer is still open on its side; the console holds at most its slots of them.
        assert await asyncio.to_thread(_loads, web.url), "the operator's page did not load"
        held = len(os.listdir(f"/proc/{web.proc.pid}/fd")) - idle
        assert held <= SLOTS + 8, f"the console holds {held} descriptors for tokenless peers"
        assert web.proc.returncode is None
    finally:
        for peer in peers:
            peer.close()
        await web.stop()


async def test_running_out_of_descriptors_never_ends_the_web_console(state_dir: Path) -> None:
    """With a soft limit of 40 descriptors the slots alone pass it: accept() fails with EMFILE. The console
    says so in one line (not a traceback per failed accept), keeps running, and serves the operator again
    once the peers are gone."""
    write_config(state_dir, FULL)
    web = await serve_web(state_dir, nofile=40)
    peers: list[socket.socket] = []
    try:
        await wait_until(lambda: asyncio.to_thread(_loads, web.url), timeout=30)
        peers = _tokenless(web.port, 2 * SLOTS)
        fds = f"/proc/{web.proc.pid}/fd"
        await wait_until(lambda: len(os.listdir(fds)) >= 40, timeout=30)  # at its limit
        for peer in peers:
            peer.close()
        peers.clear()
        await wait_until(
            lambda: web.proc.returncode is not None or asyncio.to_thread(_loads, web.url), timeout=60
        )
        assert web.proc.returncode is None, "the web console exited"
    finally:
        for peer in peers:
            peer.close()
        printed = await web.stop()
    said = [line for line in printed.splitlines() if "accept() failed" in line]
    assert said and len(said) <= 10, said
    assert "Traceback" not in printed, printed[-2000:]
