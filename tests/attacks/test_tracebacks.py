"""Issue 9 item 23: inputs that produced Python tracebacks instead of clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import jsontext
from engine.approvals.socket.server import ApprovalSocketServer, request_decision
from engine.tools.exec_host import LocalExecHost
from tests.helpers.gateway import ALLOWLIST, REPO, gateway, write_config
from tests.helpers.peers import hello, raw, still_works

DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_PARAMS = b'{"type":"req","id":1,"method":"status","params":{"x":' + b"[" * 5_000 + b"]" * 5_000 + b"}}"


def exechost(state: Path, *args: str | bytes, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        timeout=60,
        **kwargs,
    )  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "args",
    [
        (b"exec", b"--", b"echo \xff\xfe"),
        (b"exec", b"--env", b"X=\xc3(", b"--", b"true"),
        (b"policy", b"check", b"--", b"ls \x80"),
    ],
)
def test_invalid_utf8_in_arguments(state_dir: Path, args: tuple[bytes, ...]) -> None:
    write_config(state_dir, ALLOWLIST)
    proc = exechost(state_dir, *args)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "not valid UTF-8" in err and "Traceback" not in err


def test_a_closed_stdout_pipe(state_dir: Path) -> None:
    """`exechost … | head -0`: the reader went away; no BrokenPipeError traceback."""
    write_config(state_dir, ALLOWLIST)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "policy", "check", "--", "ls -la"],
        env=env,
        cwd=str(REPO),
        stdout=write_end,
        stderr=subprocess.PIPE,
        timeout=60,
    )
    os.close(write_end)
    assert b"Traceback" not in proc.stderr and b"BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


async def test_deeply_nested_json_on_the_control_socket(state_dir: Path) -> None:
    async with gateway(state_dir):
        reader, writer = await raw(state_dir)
        writer.write(DEEP[:900_000] + b"\n")  # before the handshake
        reply = json.loads(await reader.readline())
        assert reply["type"] == "error" and "nested" in reply["message"]
        reader, writer = await raw(state_dir)
        assert (await hello(state_dir, writer, reader))["type"] == "welcome"
        writer.write(DEEP_PARAMS + b"\n")
        writer.write(b'{"type":"req","id":2,"method":"status"}\n')
        first, second = json.loads(await reader.readline()), json.loads(await reader.readline())
        assert first["ok"] is False and "nested" in first["error"]["message"]
        assert second["id"] == 2 and second["ok"] is True
        writer.close()
        await still_works(state_dir)
    log = (state_dir / "gateway.log").read_text() if (state_dir / "gateway.log").exists() else ""
    assert "RecursionError" not in log


async def test_deeply_nested_json_on_the_approvals_socket(state_dir: Path) -> None:
    import asyncio

    path = state_dir / "exec-approvals.sock"
    token = "t" * 32

    async def operator(request: object) -> str:
        return "deny"

    async with ApprovalSocketServer(path, token, decider=operator, exec_handler=LocalExecHost()) as server:
        _, writer = await asyncio.open_unix_connection(str(path), limit=1 << 22)
        writer.write(DEEP[:900_000] + b"\n")
        await writer.drain()
        writer.close()
        assert await request_decision(path, token, {"command": "true"}) == "deny"  # still serving
        assert server.stats["rejected"] >= 1


def test_deep_json_files_are_a_clear_error(state_dir: Path) -> None:
    from engine.approvals.store import ApprovalsFileError, ApprovalsStore

    path = state_dir / "exec-approvals.json"
    path.write_bytes(b'{"version": 1, "agents": ' + DEEP[:20_000] + b"}")
    path.chmod(0o600)
    with pytest.raises(ApprovalsFileError, match="nested"):
        ApprovalsStore(path).load()
    with pytest.raises(ValueError, match="nested"):
        jsontext.loads("[" * 65 + "]" * 65)
    assert jsontext.loads("[" * 64 + "]" * 64) is not None
