"""Fresh round 12 a, class 1 (ambient authority): what a key in a URL, a shared listener or a place hands
an agent (or anyone who saw a link) beyond what it was meant to open."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import principals
from engine.approvals.store import ApprovalsStore
from tests.helpers.browser import browser_image, browser_state  # noqa: F401 (fixtures)
from tests.helpers.gateway import connect, gateway, listed, write_config
from tests.helpers.webconsole import serve_web


def _upgrade_head(port: int, path: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: binary\r\n\r\n"
    ).encode()


async def _vnc_through(port: int, ticket: str, how: str) -> bytes:
    """What the door answers a ticket holder who asks for a noVNC asset `how`: as a WebSocket upgrade, or
    plainly with an upgrade to websockify's own path pipelined behind it. Read until VNC's banner or the
    door's close (the timeout only bounds a hang)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if how == "upgrade":
            writer.write(_upgrade_head(port, f"/{ticket}/novnc/core/rfb.js"))
        else:
            plain = f"GET /{ticket}/novnc/core/util/int.js HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            writer.write(plain.encode() + _upgrade_head(port, "/websockify"))
        seen = b""
        while b"RFB 003" not in seen:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break
            seen += chunk
        return seen
    finally:
        writer.close()


async def _post(port: int, path: str) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(), 10)
        head, _, body = answer.partition(b"\r\n\r\n")
        return head, body
    finally:
        writer.close()


@pytest.mark.parametrize("how", ["upgrade", "pipelined"])
async def test_class1_a_novnc_ticket_opens_the_vnc_websocket_through_the_asset_route(
    browser_state: Path,  # noqa: F811 (the fixture imported above)
    how: str,
) -> None:
    """The design: a ticket (what the printed link and the operator's browser profile hold) opens only
    the wrapper page, noVNC's public files and one trade; only the traded secret, held in the page's
    memory, opens one websocket. Whoever saw the link (the terminal, the profile before the trade; the
    door is on the loopback every host run shares) asks for an asset in a way websockify reads as more."""
    async with gateway(browser_state):
        op = await connect(browser_state)
        try:
            await op.request("browser.start", {"agentId": "ops"})
            url = (await op.request("browser.url", {"agentId": "ops"}))["noVncUrl"]
            port = int(url.split(":")[2].split("/")[0])
            ticket = url.split("/")[3]
            first = await _vnc_through(port, ticket, how)
            second = await _vnc_through(port, ticket, how)  # nothing was spent
            # The operator's page trades the same ticket afterwards and is told nothing.
            trade_head, trade_body = await _post(port, f"/{ticket}/novnc/trade")
        finally:
            await op.close()
    assert trade_head.startswith(b"HTTP/1.1 200"), trade_head  # control: the ticket was live and unspent
    assert "websocket" in json.loads(trade_body)
    assert b"RFB 003" not in first, first[-200:]
    assert b"RFB 003" not in second, second[-200:]


SANDBOX_BWRAP = '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
FULL_MAIN = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'

# main's host runs (the browser test's config has sandbox mode "all"): allowlisted `cat` only
MAIN_CAT = """
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"
"""

# ops's own project dir on the host: `hostWritable` for ops only (the config's one way to name a per-agent
# project directory); main may only `cat`.
OPS_WRITES_ITS_DIR = """[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"

[[agents.list]]
id = "ops"
[agents.list.tools.exec]
security = "full"
ask = "off"
hostWritable = ["~/ops-work"]
"""


async def test_class1_another_agents_writable_dir_is_read_by_an_allowlisted_cat(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    work = home / "ops-work"
    work.mkdir()
    write_config(state_dir, OPS_WRITES_ITS_DIR)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            wrote = await op.request(
                "exec",
                {"command": "echo ops-private-7f3a > notes.txt", "agentId": "ops", "workdir": str(work)},
            )
            read = await op.request("exec", {"command": f"cat {work}/notes.txt", "agentId": "main"})
        finally:
            await op.close()
    assert wrote["details"]["status"] == "completed", wrote  # control: ops wrote its own file
    assert (work / "notes.txt").read_text() == "ops-private-7f3a\n"
    assert "ops-private-7f3a" not in read["text"], read["details"]


@contextlib.contextmanager
def _throwaway_account() -> Iterator[int]:
    """A real Unix account with no home and no login shell (this test is root), removed afterwards."""
    name = f"ehr12a{os.getpid() % 100000}"
    subprocess.run(["userdel", name], check=False, capture_output=True)  # one a killed run left
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True
    )
    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd")
@pytest.mark.parametrize("where", ["host", "bwrap-sandbox"])
async def test_class1_an_agent_on_its_own_account_reads_another_agents_running_command(
    state_dir: Path, where: str
) -> None:
    token = f"main-token-{os.urandom(6).hex()}"  # this test's own: no other run's process carries it
    config = FULL_MAIN
    if where != "host":
        config = config.replace('"gateway"', '"sandbox"') + SANDBOX_BWRAP
    with _throwaway_account() as uid:
        write_config(state_dir, f'{config}\n[[agents.list]]\nid = "ops"\nuid = {uid}\n')
        async with gateway(state_dir):
            op = await connect(state_dir)
            try:
                started = await op.request(
                    "exec",
                    {
                        "command": f"sleep 60; echo {token}",
                        "agentId": "main",
                        "background": True,
                    },
                )
                sid = started["details"]["sessionId"]
                assert started["details"]["status"] == "running", started  # control: main's run is live
                # ops's own account, in the host's namespaces as any login of it is
                seen = await asyncio.to_thread(
                    subprocess.run,
                    ["/bin/sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"],
                    user=uid,
                    group=uid,
                    extra_groups=[],
                    capture_output=True,
                    text=True,
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin"},
                )
                await op.request("process", {"action": "kill", "sessionId": sid, "agentId": "main"})
            finally:
                await op.close()
    at = seen.stdout.find(token)
    shown = seen.stdout[max(0, at - 60) : at + len(token)] if at >= 0 else ""
    assert not shown, f"ops's account read main's running command: {shown}"


async def test_class1_a_fifo_in_the_read_only_home_takes_a_host_runs_write(state_dir: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".config" / "mpv").mkdir(parents=True)
    fifo = home / ".config" / "mpv" / "input.fifo"
    os.mkfifo(fifo, 0o600)
    got: list[bytes] = []

    def operators_player() -> None:  # outside every view, reading its input FIFO until a writer closes
        with open(fifo, "rb") as f:
            got.append(f.read())

    player = threading.Thread(target=operators_player, daemon=True)
    player.start()
    write_config(state_dir, FULL_MAIN)
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            line = 'run "sh" "-c" "touch ~/pwned"'
            res = await op.request(
                "exec", {"command": f"printf '%s\\n' '{line}' > {fifo}", "agentId": "main"}
            )
        finally:
            await op.close()
    if player.is_alive():  # nothing reached it: end its read with a writer of our own that writes nothing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    await asyncio.to_thread(player.join, 10)
    assert got, "the player never returned"  # control: it read to EOF either way
    assert b"touch" not in got[0], (res["details"]["status"], got)


async def test_class1_a_web_console_ticket_opens_no_websocket_by_upgrade_or_pipelining(
    state_dir: Path,
) -> None:
    """The same tricks against the web console, which held: aiohttp routes each request itself (no
    client head is relayed), `/<ticket>/` answers only the page, and only a traded secret opens `/ws`."""
    web = await serve_web(state_dir)
    try:
        ticket = web.url.rstrip("/").rsplit("/", 1)[1]
        answers = []
        for path in (f"/{ticket}/", f"/{ticket}/ws"):
            reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
            try:
                writer.write(_upgrade_head(web.port, path))
                answers.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10))
            finally:
                writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", web.port)
        try:
            plain = f"GET /{ticket}/ HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n\r\n".encode()
            last = _upgrade_head(web.port, f"/{ticket}/ws").replace(b"Upgrade\r\n", b"Upgrade, close\r\n")
            writer.write(plain + last)
            seen = b""
            while b"101 Switching" not in seen and (chunk := await asyncio.wait_for(reader.read(65536), 10)):
                seen += chunk
        finally:
            writer.close()
    finally:
        await web.stop()
    assert answers[0].startswith(b"HTTP/1.1 200"), answers[0]  # the page, no upgrade
    assert answers[1].startswith(b"HTTP/1.1 403"), answers[1]  # a ticket is not the secret
    assert seen.count(b"HTTP/1.1 ") == 2, seen[-300:]  # control: both were answered
    assert b"101 Switching" not in seen, seen[-300:]


async def test_class1_a_novnc_ticket_reaches_no_cdp_by_pipelining(
    browser_state: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    """What a ticket reaches is one noVNC file (held): a CDP request pipelined behind a ticket's asset
    request is never relayed (the door asks websockify for the asset in words of its own); Chromium is
    never asked."""
    async with gateway(browser_state):
        op = await connect(browser_state)
        try:
            await op.request("browser.start", {"agentId": "ops"})
            url = (await op.request("browser.url", {"agentId": "ops"}))["noVncUrl"]
            port = int(url.split(":")[2].split("/")[0])
            ticket = url.split("/")[3]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                host = f"Host: 127.0.0.1:{port}\r\n"
                writer.write(
                    f"GET /{ticket}/novnc/core/util/int.js HTTP/1.1\r\n{host}\r\n"
                    f"GET /json/version HTTP/1.1\r\n{host}Connection: close\r\n\r\n".encode()
                )
                seen = b""
                while chunk := await asyncio.wait_for(reader.read(65536), 10):
                    seen += chunk
            finally:
                writer.close()
        finally:
            await op.close()
    # the asset's one answer (the control: the ticket was good); the pipelined request reached nobody
    assert seen.count(b"HTTP/1.") == 1 and b"toSigned32bit" in seen, seen[-300:]
    head = seen.split(b"\r\n\r\n", 1)[0]  # the door's own policy on the file; websockify's headers gone
    assert b"Content-Security-Policy: sandbox; worker-src 'none'" in head and b"WebSockify" not in head, head
    assert b"Browser" not in seen and b"webSocketDebuggerUrl" not in seen, seen[-300:]


async def test_class1_the_cdp_urls_token_in_the_operators_shell_history_drives_another_agents_browser(
    browser_state: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    """Closed: the CDP URL holds a one-use ticket, never the door's token; it opens one /json answer whose
    websocket URLs carry a one-use secret. What the history keeps is spent. (Limit: a URL printed and not
    used is a bearer key for its 60 s.)"""
    home = Path(os.environ["HOME"])
    write_config(browser_state, (browser_state / "config.toml").read_text() + MAIN_CAT + listed("ops"))
    ApprovalsStore(browser_state / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
    async with gateway(browser_state):
        op = await connect(browser_state)
        try:
            await op.request("browser.start", {"agentId": "ops"})
            # ops's own page (the operator's own `browser` call would use a browser of the operator's)
            principals.mint(browser_state, "ops")
            ops = await connect(browser_state, "ops", operator=False, agent="ops")
            try:
                await ops.request(
                    "browser", {"action": "navigate", "url": "data:text/html,<title>ops-page</title>"}
                )
            finally:
                await ops.close()
            cdp = (await op.request("browser.url", {"agentId": "ops"}))["cdpUrl"]
            # The operator looked at ops's pages from a shell; bash kept the line at exit.
            mine = await asyncio.to_thread(_get_or_status, cdp + "/json")
            assert "ops-page" in mine, mine[:300]  # control: the operator's own use worked
            (home / ".bash_history").write_text(
                f"exechost sandbox browser url --agent ops\ncurl -s {cdp}/json\n"
            )
            read = await op.request("exec", {"command": f"cat {home}/.bash_history", "agentId": "main"})
            line = next(ln for ln in read["text"].splitlines() if ln.startswith("curl "))
            stolen = line.split()[-1]  # http://127.0.0.1:<port>/<token>/json, as main's agent read it
            # main's own HTTP client (any local port it can open): ops's browser's targets, over CDP's door
            targets = await asyncio.to_thread(_get_or_status, stolen)
        finally:
            await op.close()
    assert read["details"]["status"] == "completed", read["details"]  # control: an allowlisted run
    assert "ops-page" not in targets, targets[:300]


def _get_or_status(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
