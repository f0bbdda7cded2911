"""Pseudo-terminal plumbing: open with a size, resize, and the two things a host must answer or track."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios

DSR_QUERIES = (b"\x1b[6n", b"\x1b[?6n")
_APP_CURSOR_ON = b"\x1b[?1h"
_APP_CURSOR_OFF = b"\x1b[?1l"


def set_winsize(fd: int, cols: int, rows: int) -> None:
    """TIOCSWINSZ on a PTY fd; the kernel sends SIGWINCH to the terminal's foreground process group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def get_winsize(fd: int) -> tuple[int, int]:
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return cols, rows


def open_pty(cols: int, rows: int) -> tuple[int, int]:
    """(master, slave), both close-on-exec, the master non-blocking, the size already set."""
    master, slave = os.openpty()
    os.set_inheritable(master, False)
    os.set_blocking(master, False)
    set_winsize(slave, cols, rows)
    return master, slave


def become_controlling_tty() -> None:  # pragma: no cover - runs in the forked child
    """preexec_fn for PTY children: new session, then the PTY on fd 0 becomes its controlling tty.

    Needed for SIGWINCH on resize, ^C through the line discipline and programs that open /dev/tty
    (getpass). Only async-signal-safe system calls here: the parent may have other threads.
    """
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # A gateway started with `&` or nohup ignores SIGINT/SIGQUIT, and ignored signals survive exec:
    # without this, ^C sent to the terminal would do nothing.
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


class TerminalWatcher:
    """Scans PTY output for cursor-position queries (answered by the host) and DECCKM toggles.

    Cursor-key mode is `unknown` until the program prints something: sending arrow keys blind could
    produce the wrong bytes for a full-screen program that has not started yet.
    """

    def __init__(self) -> None:
        self.cursor_key_mode = "unknown"

    def feed(self, data: bytes) -> tuple[bytes, int]:
        """Return (data with DSR queries removed, number of queries to answer)."""
        if self.cursor_key_mode == "unknown" and data:
            self.cursor_key_mode = "normal"
        if b"\x1b" not in data:
            return data, 0
        on, off = data.rfind(_APP_CURSOR_ON), data.rfind(_APP_CURSOR_OFF)
        if on != off:  # the last toggle in a chunk wins
            self.cursor_key_mode = "application" if on > off else "normal"
        queries = 0
        for query in DSR_QUERIES:
            if query in data:
                queries += data.count(query)
                data = data.replace(query, b"")
        return data, queries

    @staticmethod
    def cursor_position_response(row: int = 1, col: int = 1) -> bytes:
        return f"\x1b[{row};{col}R".encode()
