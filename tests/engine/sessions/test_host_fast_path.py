"""The session host's fast spawn (issue 31): no Python runs in the child unless a passed fd must be moved
there, and the session file's pid is written after the reply, never back over a forgotten session."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.commands.verified import sealed_copy
from engine.sessions import LocalLauncher, RunSpec, SessionManager, host_spawn
from engine.sessions import host_io as wire
from engine.sessions.host import HOLDERS_DIR, HostLauncher
from engine.sessions.hostlink import open_host
from tests.helpers.gateway import wait_until


class _Spy:
    """subprocess.Popen as host_spawn calls it, remembering whether a preexec_fn was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.preexec: list[object] = []
        real = subprocess.Popen

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            self.preexec.append(kwargs.get("preexec_fn"))
            return real(*args, **kwargs)

        monkeypatch.setattr(host_spawn.subprocess, "Popen", popen)


def _run(msg: dict[str, Any], fds: list[int]) -> bytes:
    started = host_spawn.start(msg, fds)
    out = b""
    try:
        (fd,) = [fd for fd, stream in started.streams.items() if stream == host_spawn.STDOUT]
        while chunk := os.read(fd, 65536):
            out += chunk
        started.popen.wait(30)
    finally:
        for fd in started.streams:
            os.close(fd)
    return out


def _free_fd() -> int:
    """A number no fd of this process has (the host's side of a passed fd's number)."""
    # Above every fd open now: in a long run, earlier tests' threads hold fds at scattered numbers, and
    # "the lowest free one + 40" was once taken (a chance failure of the full suite).
    return max(int(n) for n in os.listdir("/proc/self/fd")) + 64


def test_a_passed_fd_at_a_free_number_needs_no_code_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    copy = sealed_copy(b"echo from-the-copy\n", "script")
    target = _free_fd()
    try:
        msg = {"argv": ["/bin/sh", f"/proc/self/fd/{target}"], "env": {}, "fds": [target], "stdin": False}
        assert _run(msg, [copy]) == b"from-the-copy\n"
    finally:
        os.close(copy)
    assert spy.preexec == [None]  # Popen's vfork path: nothing of ours runs between fork and exec
    with pytest.raises(OSError):
        os.fstat(target)  # the placeholder is gone again


def test_a_passed_fd_at_a_number_the_host_uses_is_moved_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    copy = sealed_copy(b"echo from-the-copy\n", "script")
    mine = sealed_copy(b"echo the-hosts-own-file\n", "other")  # open here at the number the command names
    try:
        msg = {"argv": ["/bin/sh", f"/proc/self/fd/{mine}"], "env": {}, "fds": [mine], "stdin": False}
        assert _run(msg, [copy]) == b"from-the-copy\n"
        os.lseek(mine, 0, os.SEEK_SET)
        assert os.read(mine, 100) == b"echo the-hosts-own-file\n"  # ours untouched
    finally:
        os.close(copy)
        os.close(mine)
    assert len(spy.preexec) == 1 and spy.preexec[0] is not None


def test_a_passed_fd_already_at_its_number_is_passed_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    copy = sealed_copy(b"echo same-number\n", "script")
    try:
        msg = {"argv": ["/bin/sh", f"/proc/self/fd/{copy}"], "env": {}, "fds": [copy], "stdin": False}
        assert _run(msg, [copy]) == b"same-number\n"
    finally:
        os.close(copy)
    assert spy.preexec == [None]


async def test_the_session_file_gets_the_pid_after_the_reply(state_dir: Path) -> None:
    launcher = HostLauncher(state_dir / HOLDERS_DIR, fallback=LocalLauncher())
    manager = SessionManager(state_dir, kill_grace_sec=1.0, launcher=launcher)
    assert await launcher.connect() is not None, launcher.problem
    try:
        res = await manager.run(RunSpec(command="exec sleep 300", background=True, scope_key="s"))
        sid = str(res.details["sessionId"])
        session = manager.registry.get(sid)
        assert session is not None and session.pid is not None
        meta = launcher.paths(sid).meta

        def has_pid() -> bool:
            try:
                return json.loads(meta.read_text()).get("pid") == session.pid
            except (OSError, ValueError):
                return False

        await wait_until(has_pid)
        manager.request_kill(session)
        await asyncio.wait_for(session.done.wait(), 30)
    finally:
        await manager.close()
        await launcher.close()


def _recv_frame(sock: socket.socket) -> tuple[int, int, bytes]:
    head = b""
    while len(head) < wire.HEADER.size:
        head += sock.recv(wire.HEADER.size - len(head))
    size, kind, chan = wire.HEADER.unpack(head)
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return kind, chan, body


def _reply(sock: socket.socket, req: int) -> dict[str, Any]:
    while True:
        kind, chan, body = _recv_frame(sock)
        if kind == wire.REPLY and chan == req:  # a reply's channel field is its request's number
            return dict(json.loads(body))


async def test_a_session_forgotten_before_its_pid_was_written_stays_forgotten(state_dir: Path) -> None:
    directory = state_dir / HOLDERS_DIR
    sock, _ = await asyncio.to_thread(open_host, directory)
    sock.setblocking(True)
    sock.settimeout(30)
    try:
        sid = "forgotten-at-once"
        spawn = {
            "id": sid,
            "argv": ["/bin/sh", "-c", "exec sleep 300"],
            "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            "cwd": "/",
            "stdin": False,
            "fds": [],
            "nfds": 0,
            "meta": {"version": 1, "sessionId": sid},
            "req": 1,
        }
        # One write: the host reads SPAWN and FORGET together, so FORGET comes while the pid waits to be
        # written (after the reply). LIST asks for the running session's pid.
        sock.sendall(
            wire.frame(wire.SPAWN, 0, json.dumps(spawn).encode())
            + wire.frame(wire.FORGET, 0, json.dumps({"id": sid}).encode())
        )
        started = _reply(sock, 1)
        assert isinstance(started.get("pid"), int), started
        # Two round trips after it: the host has ended the round that wrote pending session files.
        for req in (2, 3):
            sock.sendall(wire.frame(wire.LIST, 0, json.dumps({"req": req}).encode()))
            _reply(sock, req)
        assert not (directory / f"{sid}.json").exists()
        os.killpg(started["pid"], 9)
        while _recv_frame(sock)[:2] != (wire.EXITED, started["chan"]):
            pass
        sock.sendall(wire.frame(wire.CLOSE, started["chan"]) + wire.frame(wire.BYE, 0))  # the host ends
    finally:
        sock.close()
