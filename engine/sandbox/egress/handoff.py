"""The forwarder's handoff, and letting go of descriptors a sandbox sent.

A sandbox hands the proxy a TCP socket as SCM_RIGHTS over its Unix socket. Whatever descriptor the proxy
does not keep (one of several in a message, which the kernel truncates; any in a message left unread when
the Unix connection is closed) is released by the thread that receives or closes, and releasing the last
reference to a TCP socket the sandbox set SO_LINGER on waits until its unsent bytes are acknowledged. So
the message is received in a worker thread, sandbox sockets are closed with linger turned off, and the
proxy closes a Unix connection it did not read in a worker thread too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct


async def readable(conn: socket.socket, timeout: float) -> bool:
    """Whether the forwarder's message arrived within `timeout` seconds (nothing is read here)."""
    loop = asyncio.get_running_loop()
    conn.setblocking(False)
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        async with asyncio.timeout(timeout):
            await ready
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(conn.fileno())
    return True


def take_socket(conn: socket.socket) -> socket.socket | None:
    """In a worker thread: the TCP socket the forwarder sent, or None (anything else sent, or no
    descriptor, is dropped); `conn` is closed. Here because a descriptor the proxy does not keep (one of
    several, truncated by the kernel; one in a message left unread) is released by whichever thread
    receives or closes, and a lingering TCP socket's release waits for its peer."""
    try:
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, 1, 1, socket.MSG_DONTWAIT)
        except OSError:
            return None
        if data != b"\0" or len(fds) != 1:
            for fd in fds:
                close_fd_unlingered(fd)
            return None
        fd = fds[0]
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                raise OSError("not a socket")
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return None
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            close_unlingered(sock)
            return None
        return sock
    finally:
        conn.close()


def close_fd_unlingered(fd: int) -> None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:  # not a socket: nothing lingers
        os.close(fd)
        return
    close_unlingered(sock)


def close_unlingered(sock: socket.socket) -> None:
    """Linger off, then close: a sandbox that set SO_LINGER and closed its own copy (so that this close is
    the last) gets an ordinary close, whose unsent bytes the kernel still delivers in the background."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 0, 0))
    sock.close()
