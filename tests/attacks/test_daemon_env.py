"""An autostarted gateway daemon takes only named keys of the starting client's env
(engine.protocol.daemonenv): the client that happened to start it (an agent's MCP server) does not steer
the host view every agent's runs get (EXECHOST_HOSTENTER, EXECHOST_HOST_PRIVATE) nor hand its own keys on."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from engine.protocol.client import ControlClient
from engine.protocol.daemonenv import TEST_MARK, daemon_env
from tests.helpers.gateway import ALLOWLIST, connect, wait_until, write_config


def test_only_named_keys_and_the_hooks_only_in_a_marked_run() -> None:
    client = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "https_proxy": "http://127.0.0.1:3128",
        "EXECHOST_HOSTENTER": "/tmp/planted",
        "EXECHOST_HOST_PRIVATE": "/nowhere",
        "GIT_CONFIG_GLOBAL": "/tmp/planted.gitconfig",
        "LD_PRELOAD": "/tmp/planted.so",
        "ANTHROPIC_API_KEY": "sk-x",
    }
    assert daemon_env(client) == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "https_proxy": "http://127.0.0.1:3128",
    }
    marked = daemon_env({**client, TEST_MARK: "1"})
    assert marked["EXECHOST_HOST_PRIVATE"] == "/nowhere" and "LD_PRELOAD" not in marked


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.decode().split("=", 1) for kv in raw.split(b"\0") if b"=" in kv)


async def test_an_autostarting_clients_steering_keys_do_not_reach_the_daemon(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(state_dir, ALLOWLIST)
    monkeypatch.delenv(TEST_MARK)  # a client outside the suite's run
    monkeypatch.setenv("EXECHOST_HOSTENTER", str(state_dir.parent / "planted-helper"))
    monkeypatch.setenv("EXECHOST_HOST_PRIVATE", str(state_dir.parent))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(state_dir.parent / "planted.gitconfig"))
    monkeypatch.setenv("LANG", "C.UTF-8")
    first = await ControlClient.connect(state_dir, client="mcp-a", autostart=True)
    pid = first.server_pid
    try:
        env = _environ(pid)
    finally:
        await first.close()
        operator = await connect(state_dir)
        with contextlib.suppress(Exception):
            await operator.request("shutdown", {})
        with contextlib.suppress(Exception):
            await operator.close()

        def reaped() -> bool:
            try:
                return os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                return True

        await wait_until(reaped, timeout=30)
    assert not {"EXECHOST_HOSTENTER", "EXECHOST_HOST_PRIVATE", "GIT_CONFIG_GLOBAL"} & set(env), env
    assert env.get("LANG") == "C.UTF-8" and env["OPENCLAW_STATE_DIR"] == str(state_dir)
