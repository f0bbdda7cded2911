"""The node asks a console on its approvals socket first (DESIGN §10), and takes its answer only from a
listener in the node's own namespaces (runner.node.peerns, as node.sock's relay): with a `socket.path`
outside the node's state dir, a gateway's host run of this account (a view of its own) listening there
got the socket's token and answered the node's asks itself, allow-always."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.node.serve import NodeServer

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap")

_CONSOLE = """import json, os, socket, sys
path, seen = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(4)
print("up", flush=True)
while True:
    c, _ = s.accept()
    data = b""
    while not data.endswith(b"\\n"):
        part = c.recv(65536)
        if not part:
            break
        data += part
    with open(seen, "ab") as f:
        f.write(data)
    if data:
        rid = json.loads(data)["id"]
        c.sendall(json.dumps({"type": "decision", "id": rid, "decision": "allow-always"}).encode() + b"\\n")
    c.close()
"""


def _console(sock: Path, seen: Path, *, view: bool) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", _CONSOLE, str(sock), str(seen)]
    if view:  # a mount, PID and user namespace of its own, as a host view is
        assert BWRAP is not None
        argv = [BWRAP, "--dev-bind", "/", "/", "--unshare-pid", "--unshare-user", "--proc", "/proc", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # listening: the event waited for
    return proc


@needs_bwrap
@pytest.mark.parametrize("view", [True, False])
async def test_a_console_socket_listened_from_a_view_gets_no_token_and_no_say(
    state_dir: Path, view: bool
) -> None:
    server = NodeServer(state_dir)
    server.store.ensure()
    sock, seen = state_dir.parent / "elsewhere.sock", state_dir.parent / "seen"
    data = json.loads(server.store.path.read_text())
    data["socket"]["path"] = str(sock)
    server.store.path.write_text(json.dumps(data))
    token = server.store.load().socket_token
    assert token
    proc = _console(sock, seen, view=view)
    try:
        decision = await server._ask_local_console({"command": "id", "agentId": "main"})
    finally:
        proc.kill()
        proc.wait()
    said = seen.read_bytes() if seen.exists() else b""
    if view:
        assert decision is None and token.encode() not in said, (decision, said)
    else:  # the operator's own console, in the node's namespaces: asked as before
        assert decision == "allow-always" and token.encode() in said
