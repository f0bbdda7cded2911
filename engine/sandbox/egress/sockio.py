"""I/O on a socket the sandbox handed over, which never trusts that socket's O_NONBLOCK flag.

The descriptor the forwarder sends shares its open file description with any copy a program in the sandbox
kept, so the sandbox can set or clear O_NONBLOCK on it at any moment. On the event loop every call is
therefore non-blocking by its own flags (MSG_DONTWAIT), waiting through `add_reader`/`add_writer`; in the
relay's worker threads a call that finds the socket non-blocking (EAGAIN) waits in poll(2) and tries again.
Neither ever depends on what the flag says.
"""

from __future__ import annotations

import asyncio
import select
import socket

_SEND = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL


async def _ready(sock: socket.socket, write: bool) -> None:
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    done: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await done
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def recv(sock: socket.socket, size: int) -> bytes:
    """Up to `size` bytes (b"" at EOF), without ever blocking the loop."""
    while True:
        try:
            return sock.recv(size, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass
        await _ready(sock, write=False)


async def sendall(sock: socket.socket, data: bytes) -> None:
    """All of `data`, without ever blocking the loop."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view, _SEND) :]
            continue
        except (BlockingIOError, InterruptedError):
            pass
        await _ready(sock, write=True)


def wait(fd: int, write: bool) -> None:
    """In a worker thread: block until `fd` is readable (or writable), whatever its flags say."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT if write else select.POLLIN)
    poller.poll()
