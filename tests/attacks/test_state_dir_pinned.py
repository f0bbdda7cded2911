"""A state dir named through a link another account may re-point (fresh round 17 c): every service uses the
real path it judged, and neither client sends a token to a socket another account serves, whichever dir
the named path leads to when it dials (the blocking CLI client as the asyncio one)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engine import statefs
from engine.protocol.frames import GatewayForeign
from engine.protocol.syncclient import SyncClient
from tests.helpers.gateway import wait_until

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another account needs root to stand in for it")

# Another account's listener: records whatever a client sends it (a hello carries the token it read).
LISTENER = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1] + "/gateway.sock")
s.listen(1)
open(sys.argv[1] + "/ready", "w").close()
c, _ = s.accept()
c.settimeout(5)
got = b""
try:
    while chunk := c.recv(65536):
        got += chunk
except OSError:
    pass
open(sys.argv[1] + "/got", "wb").write(got)
"""


@needs_root
async def test_the_cli_client_sends_no_token_to_a_socket_another_account_serves(state_dir: Path) -> None:
    """The operator's state dir is named through another account's link, re-pointed at that account's
    own dir: a listener of its own there, and token files of its choosing (a link moved back between
    the dial and the token read would make them the operator's real ones). The CLI's blocking
    client dials, asks the kernel who serves the socket, and sends nothing."""
    root = state_dir.parent
    os.chmod(root, 0o755)
    evil = root / "evil"
    evil.mkdir()
    os.chown(evil, NOBODY, NOBODY)
    token = json.dumps({"version": 1, "token": "t" * 32})
    subprocess.run(
        ["/bin/sh", "-ec", f"for f in gateway operator; do printf '%s' '{token}' > {evil}/$f.json; done"],
        user=NOBODY, group=NOBODY, extra_groups=[], check=True, cwd="/",
    )  # fmt: skip
    listener = subprocess.Popen(
        ["/usr/bin/python3", "-c", LISTENER, str(evil)], user=NOBODY, group=NOBODY, extra_groups=[], cwd="/"
    )
    try:
        await wait_until(lambda: (evil / "ready").exists(), timeout=10)
        with pytest.raises(GatewayForeign):
            SyncClient.connect(evil, client="cli", name="cli", operator=True)
        listener.wait(timeout=20)  # it saw the connection end
        assert (evil / "got").read_bytes() == b"", "a hello (and its token) went to another account"
    finally:
        listener.kill()
        listener.wait()


def test_a_pinned_state_dir_is_what_state_dir_answers_until_unpinned(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned, the named path's real dir is every caller's answer, however the link on the way changes;
    unpinned (the service stopped), the name is followed again."""
    root = state_dir.parent
    (root / "other").mkdir()
    link = root / "l"
    link.symlink_to(root)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(link / "s"))
    assert statefs.pin_state_dir(link / "s") == state_dir
    try:
        link.unlink()
        link.symlink_to(root / "other")
        assert statefs.state_dir() == state_dir
    finally:
        statefs.unpin_state_dir(link / "s")
    assert statefs.state_dir() == link / "s"
