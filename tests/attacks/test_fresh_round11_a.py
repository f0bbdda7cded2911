"""Fresh round 11 a: issue 27 §1, no ambient credentials (authority by where a request comes from)."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.commands import dirshadow
from engine.sandbox import docker_ops
from engine.sandbox.browser import list_browsers
from engine.sandbox.egress import forwarder
from tests.helpers.browser import browser_image  # noqa: F401
from tests.helpers.egress import host_forwarder, origin
from tests.helpers.gateway import FULL, connect, gateway, listed, wait_until, write_config
from tests.helpers.sshd import SshdNode, sshd_nodes  # noqa: F401

SANDBOX = "exechost-r11a-ops"


def _egress_config(port: int) -> str:
    return (
        "[agents.defaults.sandbox.egress]\n"
        'mode = "allowlist"\n'
        f'allow = ["http://allowed.test:{port}"]\n'
        "ask = true\n"
        'resolve = { "allowed.test" = "127.0.0.1", "asked.test" = "127.0.0.1" }\n'
    )


async def _curl(proxy: int, url: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "60",
        "-x",
        f"http://127.0.0.1:{proxy}",
        url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _asks_of(rows: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    return [r for r in rows if (r.get("agentId") or (r.get("request") or {}).get("agentId")) == agent]


async def test_class1_a_revoked_agents_sandbox_still_egresses_and_asks_as_it(state_dir: Path) -> None:
    with origin() as site:
        write_config(state_dir, _egress_config(site.port) + listed("ops"))
        principals.mint(state_dir, "ops")
        async with gateway(state_dir) as server:
            directory = forwarder.prepare_dir(SANDBOX)
            await server.services.egress.listen(SANDBOX, "ops", None)  # as the sandbox's making does
            operator = await connect(state_dir)
            try:
                with host_forwarder(directory) as proxy:
                    before = await _curl(proxy, f"http://allowed.test:{site.port}/")
                    out, _ = await before.communicate()
                    assert out.decode() == "200"  # the sandbox egresses as ops while ops holds a credential

                    await operator.request("agents.revoke", {"agent": "ops"})
                    assert principals.read_token(state_dir, "ops") is None

                    after = await _curl(proxy, f"http://allowed.test:{site.port}/")
                    out, _ = await after.communicate()
                    allowed_after = out.decode()

                    asking = await _curl(proxy, f"http://asked.test:{site.port}/")
                    try:

                        async def settled() -> bool:
                            if asking.returncode is not None:
                                return True
                            return bool(_asks_of(await operator.pending_approvals(), "ops"))

                        await wait_until(settled, timeout=20)
                        asked = _asks_of(await operator.pending_approvals(), "ops")
                    finally:
                        with contextlib.suppress(ProcessLookupError):
                            asking.kill()
                        await asking.wait()
                    # Nothing of ops's acts after its revoke: no connection as ops, no ask filed as ops.
                    assert allowed_after == "403", (
                        f"the revoked agent's sandbox still connected: {allowed_after}"
                    )
                    assert asked == [], f"a fresh ask filed as the revoked agent: {asked}"
            finally:
                await operator.close()


async def test_class1_the_gateways_docker_engine_over_tcp_is_a_host_runs(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "dockercerts"
    certs.mkdir()
    (certs / "key.pem").write_text("-----BEGIN PRIVATE KEY-----ENGINEKEY-r11a\n")
    with origin() as engine:  # stands in for dockerd's API: any GET answers 200
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{engine.port}")
        monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
        monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
        write_config(state_dir, FULL)
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request(
                    "exec",
                    {
                        "agentId": "main",
                        "command": f"curl -sS --max-time 10 http://127.0.0.1:{engine.port}/containers/json; "
                        f"cat {certs}/key.pem",
                    },
                )
            finally:
                await operator.close()
    output = result["details"].get("aggregated") or result["text"]
    assert "origin says hello" not in output, f"a host run spoke to the gateway's engine: {output}"
    assert "ENGINEKEY-r11a" not in output, f"a host run read the engine's TLS key: {output}"


async def test_class1_a_revoked_agents_background_run_on_a_node_keeps_running(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    alive = node.marks / "alive"
    write_config(
        state_dir,
        FULL.replace('"gateway"', '"node"') + "".join(n.config_toml() for n in sshd_nodes) + listed("ops"),
    )
    token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        operator = await connect(state_dir)
        ops = await connect(state_dir, client="ops", operator=False, credential=token)
        try:
            started = await ops.request(
                "exec",
                {
                    "command": f"while :; do echo x >> {alive}; sleep 0.1; done",
                    "host": "node",
                    "node": node.name,
                    "background": True,
                },
            )
            sid = started["details"].get("sessionId")
            assert started["details"].get("status") == "running", started
            await wait_until(lambda: alive.exists() and alive.stat().st_size > 0, timeout=30)

            await operator.request("agents.revoke", {"agent": "ops"})

            async def ended() -> bool:
                rows = await operator.list_sessions()
                mine = [r for r in rows if str(r.get("sessionId", "")).endswith(str(sid))]
                return bool(mine) and all(r.get("status") != "running" for r in mine)

            # What the revoked agent left running stops, on a node as on the gateway host.
            try:
                await wait_until(ended, timeout=5)
            except AssertionError:
                rows = [r for r in await operator.list_sessions() if r.get("node") == node.name]
                raise AssertionError(f"still running after the revoke: {rows}") from None
        finally:
            with contextlib.suppress(Exception):
                await ops.close()
            await operator.close()


_KEYCTL, _ADD_KEY = 250, 248  # x86_64
_GET_PERSISTENT, _SEARCH, _INVALIDATE = 22, 10, 21
_PROBE = (
    "import ctypes;l=ctypes.CDLL(None);L=ctypes.c_long;"
    "p=l.syscall(250,22,L(-1),L(-3));"
    "k=l.syscall(250,10,L(p),b'user',b'r11a-krb5cc',L(0));"
    "b=ctypes.create_string_buffer(256);n=l.syscall(250,11,L(k),b,L(256));"
    "print('persistent',p,'key',k,b.raw[:max(n,0)].decode())"
)


async def test_class1_the_persistent_keyring_holds_the_operators_ticket_for_a_host_run(
    state_dir: Path,
) -> None:
    import ctypes
    import os

    if os.geteuid() != 0:
        pytest.skip("a non-root gateway's runs are in a user namespace: a persistent keyring of their own")
    libc = ctypes.CDLL(None, use_errno=True)
    persistent = libc.syscall(_KEYCTL, _GET_PERSISTENT, ctypes.c_long(-1), ctypes.c_long(-3))
    if persistent < 0:
        pytest.skip("no persistent keyrings in this kernel")
    payload = b"TICKET-r11a-operator"
    key = libc.syscall(
        _ADD_KEY, b"user", b"r11a-krb5cc", payload, ctypes.c_size_t(len(payload)), ctypes.c_long(persistent)
    )
    assert key > 0
    try:
        write_config(state_dir, FULL)
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request(
                    "exec", {"agentId": "main", "command": f"python3 -c {shlex.quote(_PROBE)}"}
                )
            finally:
                await operator.close()
        output = result["details"].get("aggregated") or result["text"]
        assert "persistent" in output, output  # the probe ran
        assert "TICKET-r11a" not in output, f"a host run read the operator's persistent keyring: {output}"
    finally:
        libc.syscall(_KEYCTL, _INVALIDATE, ctypes.c_long(key))


BROWSER_CONFIG = FULL + "[agents.defaults.sandbox.browser]\nenabled = true\n"


async def test_class1_the_browser_doors_url_in_the_operators_profile_opens_another_agents_browser(
    state_dir: Path,
    tmp_path: Path,
    browser_image: str,  # noqa: F811
) -> None:
    from tests.helpers.webconsole import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("no chromium")
    profile = tmp_path / "home" / ".config" / "chromium"
    profile.mkdir(parents=True)
    write_config(state_dir, BROWSER_CONFIG)
    (state_dir / "sandboxes").mkdir(mode=0o700, exist_ok=True)
    try:
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                await operator.request("browser.start", {"agentId": "ops"})
                urls = await operator.request("browser.url", {"agentId": "ops"})
                watch = urls.get("noVncUrl")
                assert isinstance(watch, str) and watch, urls
                # The operator watches ops's browser in their own Chromium (the console's `u` link).
                seen = await asyncio.create_subprocess_exec(
                    CHROMIUM,
                    "--headless=new",
                    "--no-sandbox",
                    f"--user-data-dir={profile}",
                    "--virtual-time-budget=3000",
                    "--dump-dom",
                    watch,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await asyncio.wait_for(seen.wait(), 120)
                # Later, agent main's host run reads the operator's profile and uses what it finds.
                probe = (
                    f"u=$(grep -raoh 'http://127.0.0.1:[0-9]*/[A-Za-z0-9_-]*/novnc' {profile} | head -1); "
                    'echo "found ${u:+a door}"; curl -sS --max-time 10 "${u%/novnc}/json/version"'
                )
                result = await operator.request("exec", {"agentId": "main", "command": probe})
            finally:
                await operator.close()
    finally:
        for c in list_browsers():
            docker_ops.remove(c["Id"])
    output = result["details"].get("aggregated") or result["text"]
    assert "webSocketDebuggerUrl" not in output, f"a host run reached ops's browser's CDP: {output}"


async def _runtime_socket_seen(state_dir: Path, monkeypatch: pytest.MonkeyPatch, *, named: bool) -> str:
    """What a host run gets from a socket in the account's runtime dir (/run/user/UID), with the gateway's
    XDG_RUNTIME_DIR naming it (`named`) or unset; the real default `hostPrivate` list."""
    import os
    import socket
    import threading

    runtime = Path(f"/run/user/{os.getuid()}")
    if named:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    else:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("EXECHOST_HOST_PRIVATE", raising=False)  # the real default list
    # This machine's /run is small and holds docker.sock, so it is shown as a copy without sockets
    # (dirshadow); a desktop's /run passes dirshadow's 512-entry budget (udev/data alone) or holds no
    # engine socket, and is then the host's own: as here with no budget.
    monkeypatch.setattr(dirshadow, "MAX_ENTRIES", 0)
    made = False
    if not runtime.exists():
        try:
            runtime.mkdir(mode=0o700)
        except OSError:
            pytest.skip("cannot make the account's runtime dir here")
        made = True
    path = runtime / f"r11a-bus-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(4)

    def answer() -> None:  # stands in for the session bus / systemd --user's private socket
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"OPERATOR-RUNTIME-SOCKET\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        write_config(state_dir, FULL)
        probe = (
            "import socket;s=socket.socket(socket.AF_UNIX);"
            f"s.connect({str(path)!r});print(s.recv(64).decode())"
        )
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request(
                    "exec", {"agentId": "main", "command": f"python3 -c {shlex.quote(probe)}"}
                )
            finally:
                await operator.close()
    finally:
        server.close()
        path.unlink(missing_ok=True)
        if made:
            with contextlib.suppress(OSError):
                runtime.rmdir()
    return str(result["details"].get("aggregated") or result["text"])


async def test_class1_the_runtime_dir_is_shared_when_the_gateway_has_no_xdg_runtime_dir(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = await _runtime_socket_seen(state_dir, monkeypatch, named=False)
    assert "OPERATOR-RUNTIME-SOCKET" not in output, f"a host run reached the operator's runtime dir: {output}"


async def test_class1_the_runtime_dir_named_by_xdg_runtime_dir_is_the_agents_own(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same socket, with the gateway's XDG_RUNTIME_DIR naming the dir: the run's copy holds none."""
    output = await _runtime_socket_seen(state_dir, monkeypatch, named=True)
    assert "OPERATOR-RUNTIME-SOCKET" not in output, output
    assert "No such file" in output or "ConnectionRefused" in output, output


async def test_class1_the_docker_socket_is_no_host_runs(state_dir: Path) -> None:
    """Tried: the engine's unix socket from a host run at security=full (bound over by an empty file)."""
    import os

    if not os.path.exists("/var/run/docker.sock"):
        pytest.skip("no Docker socket on this machine")
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            result = await operator.request(
                "exec",
                {
                    "agentId": "main",
                    "command": "curl -sS --max-time 5 --unix-socket /var/run/docker.sock http://d/_ping; "
                    "curl -sS --max-time 5 --unix-socket /run/docker.sock http://d/version",
                },
            )
        finally:
            await operator.close()
    output = str(result["details"].get("aggregated") or result["text"])
    assert "OK" not in output.split() and "ApiVersion" not in output, output


async def test_class1_the_gateways_session_keyring_is_no_host_runs(state_dir: Path) -> None:
    """Tried: a key in the keyring the gateway's session holds (a krb5 KEYRING: session ccache) read by a
    host run through @s: the run joined a fresh session keyring."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    payload = b"SESSION-r11a-ticket"
    key = libc.syscall(
        _ADD_KEY, b"user", b"r11a-session", payload, ctypes.c_size_t(len(payload)), ctypes.c_long(-3)
    )
    if key < 0:
        pytest.skip("no session keyring here")
    probe = (
        "import ctypes;l=ctypes.CDLL(None);L=ctypes.c_long;"
        "k=l.syscall(250,10,L(-3),b'user',b'r11a-session',L(0));"
        "b=ctypes.create_string_buffer(256);n=l.syscall(250,11,L(k),b,L(256));"
        "print('probe',k,b.raw[:max(n,0)].decode())"
    )
    try:
        write_config(state_dir, FULL)
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request(
                    "exec", {"agentId": "main", "command": f"python3 -c {shlex.quote(probe)}"}
                )
            finally:
                await operator.close()
    finally:
        libc.syscall(_KEYCTL, _INVALIDATE, ctypes.c_long(key))
    output = str(result["details"].get("aggregated") or result["text"])
    assert "probe" in output, output
    assert "SESSION-r11a" not in output, output


_SERVE_ONCE = (
    "import os,socket,sys;s=socket.socket(socket.AF_UNIX);d,n=os.path.split(sys.argv[1]);m=sys.argv[2:]\n"
    "if m==['relative']: os.chdir(d); s.bind(n)\n"
    "elif m==['moved']: os.rmdir(d); os.mkdir(d+'.new'); s.bind(d+'.new/'+n); os.rename(d+'.new',d)\n"
    "else: s.bind(sys.argv[1])\n"
    "s.listen(4);print('ready',flush=True)\n"
    "while True:\n c,_=s.accept();c.sendall(b'OPERATOR-HOME-SOCKET\\n');c.close()"
)


async def _home_socket_seen(state_dir: Path, *, own_netns: bool, how: str = "") -> str:
    """What a host run gets from a socket the operator's program bound in the home, that program in the
    gateway's network namespace or (`own_netns`) in one of its own (a container, `ip netns exec`, a
    systemd service with PrivateNetwork=)."""
    import os

    home = Path(os.environ["HOME"])
    where = home / ".cache" / "devbox"
    where.mkdir(parents=True)
    path = where / "agent.sock"
    argv = ["python3", "-c", _SERVE_ONCE, str(path), *([how] if how else [])]
    if own_netns:
        argv = ["unshare", "--net", *argv]
    server = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        line = await asyncio.wait_for(server.stdout.readline(), 30)
        if not line.startswith(b"ready"):
            pytest.skip("cannot bind a socket in a network namespace of its own here")
        write_config(state_dir, FULL)
        probe = (
            "import socket;s=socket.socket(socket.AF_UNIX);"
            f"s.connect({str(path)!r});print(s.recv(64).decode())"
        )
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request(
                    "exec", {"agentId": "main", "command": f"python3 -c {shlex.quote(probe)}"}
                )
            finally:
                await operator.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            server.kill()
        await server.wait()
    return str(result["details"].get("aggregated") or result["text"])


async def test_class1_a_home_socket_bound_in_another_network_namespace_is_a_host_runs(
    state_dir: Path,
) -> None:
    output = await _home_socket_seen(state_dir, own_netns=True)
    assert "OPERATOR-HOME-SOCKET" not in output, f"a host run used the operator's socket: {output}"


async def test_class1_a_home_socket_bound_in_the_gateways_network_namespace_is_covered(
    state_dir: Path,
) -> None:
    """Tried: the same socket bound by a program in the gateway's own network namespace: covered."""
    output = await _home_socket_seen(state_dir, own_netns=False)
    assert "OPERATOR-HOME-SOCKET" not in output, output


async def test_class1_a_home_socket_bound_by_a_relative_name_is_a_host_runs(state_dir: Path) -> None:
    output = await _home_socket_seen(state_dir, own_netns=False, how="relative")
    assert "OPERATOR-HOME-SOCKET" not in output, f"a host run used the operator's socket: {output}"


async def test_class1_two_gateways_agents_of_one_name_share_a_nodes_sandbox(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    from tests.helpers.daemon import Daemon

    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(
        '[tools.exec]\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
    )
    config = FULL.replace('"gateway"', '"node"') + node.config_toml()
    write_config(state_dir, config)
    other = state_dir.parent / "s2"
    other.mkdir(mode=0o700)
    write_config(other, config)
    run = {"agentId": "main", "host": "node", "node": node.name}
    async with gateway(state_dir):
        mine = await connect(state_dir)
        try:
            wrote = await mine.request("exec", {**run, "command": "echo A-SECRET-r11a > a-secret.txt; pwd"})
        finally:
            await mine.close()
    assert wrote["details"].get("exitCode") == 0, wrote
    with Daemon(other):
        theirs = await connect(other)
        try:
            read = await theirs.request("exec", {**run, "command": "pwd; cat a-secret.txt"})
        finally:
            await theirs.close()
    output = str(read["details"].get("aggregated") or read["text"])
    assert "A-SECRET-r11a" not in output, f"gateway B's main read gateway A's main's sandbox: {output}"


async def test_class1_one_gateways_allow_always_on_a_shared_node_is_another_gateways(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    from tests.helpers.daemon import Daemon

    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    config = FULL.replace('"gateway"', '"node"') + node.config_toml()
    write_config(state_dir, config)
    other = state_dir.parent / "s2"
    other.mkdir(mode=0o700)
    write_config(other, config)
    marker = node.marks / "ran"
    run = {"agentId": "main", "host": "node", "node": node.name, "command": f"touch {marker}"}
    with Daemon(other):
        theirs = await connect(other)
        try:
            asked_b = await theirs.request("exec", run)
            assert asked_b["details"].get("status") == "approval-pending", asked_b
            await theirs.request(
                "approve", {"id": asked_b["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(marker.exists, timeout=30)  # B's main ran it, allowed always by B's human
        finally:
            await theirs.close()
    marker.unlink()
    async with gateway(state_dir):
        mine = await connect(state_dir)
        try:
            result = await mine.request("exec", run)
        finally:
            await mine.close()
    status = result["details"].get("status")
    # Gateway A's human never allowed A's main anything: the node asks them.
    assert status == "approval-pending" and not marker.exists(), (
        f"gateway A's main ran unasked on gateway B's human's allow-always: {result['details']}"
    )


async def test_class1_another_agents_loopback_server_is_a_host_runs(state_dir: Path) -> None:
    import os

    from tests.helpers.egress import free_port

    private = os.environ["EXECHOST_HOST_PRIVATE"]  # stands in for /tmp: each agent has its own copy
    port = free_port()
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            ops = {"agentId": "ops"}
            await operator.request(
                "exec", {**ops, "command": f"echo OPS-PRIVATE-r11a > {private}/ops-note.txt"}
            )
            served = await operator.request(
                "exec",
                {
                    **ops,
                    "command": f"exec python3 -m http.server -b 127.0.0.1 {port} -d {private}",
                    "background": True,
                },
            )
            sid = served["details"].get("sessionId")

            async def ops_reaches_it() -> bool:
                # ops's own later runs reach its server (it is up once one does): the agent's loopback
                own = await operator.request(
                    "exec", {**ops, "command": f"curl -sS --max-time 5 http://127.0.0.1:{port}/ops-note.txt"}
                )
                return "OPS-PRIVATE-r11a" in str(own["details"].get("aggregated") or own["text"])

            await wait_until(ops_reaches_it, timeout=30)
            seen = await operator.request(
                "exec",
                {
                    "agentId": "main",
                    "command": f"cat {private}/ops-note.txt; curl -sS --max-time 10 http://127.0.0.1:{port}/ops-note.txt",
                },
            )
            await operator.request("process", {"action": "kill", "sessionId": sid, "agentId": "ops"})
        finally:
            await operator.close()
    output = str(seen["details"].get("aggregated") or seen["text"])
    assert "No such file" in output, output  # main's own /tmp holds no note of ops's
    assert "OPS-PRIVATE-r11a" not in output, f"agent main read ops's private files over loopback: {output}"


async def test_class1_a_home_socket_whose_directory_was_renamed_is_a_host_runs(state_dir: Path) -> None:
    output = await _home_socket_seen(state_dir, own_netns=False, how="moved")
    assert "OPERATOR-HOME-SOCKET" not in output, f"a host run used the operator's socket: {output}"


async def test_class1_the_operators_git_template_dir_takes_a_host_runs_hook(state_dir: Path) -> None:
    import os

    home = Path(os.environ["HOME"])
    templates = state_dir.parent / "team" / "git-templates"  # outside the home, the operator's to write
    templates.mkdir(parents=True)
    (home / ".gitconfig").write_text(f"[init]\n\ttemplateDir = {templates}\n")
    mark = state_dir.parent / "hook-ran"
    hook = templates / "hooks" / "post-checkout"
    plant = (
        f"mkdir -p {hook.parent} && printf '#!/bin/sh\\ntouch {mark}\\n' > {hook} && chmod +x {hook}; "
        f"ls {hook.parent}"
    )
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            await operator.request("exec", {"agentId": "main", "command": plant})
        finally:
            await operator.close()
    # Later, the operator clones a repository in their own shell.
    origin_repo = state_dir.parent / "origin"
    env = {**os.environ, "GIT_AUTHOR_NAME": "o", "GIT_AUTHOR_EMAIL": "o@x", "GIT_COMMITTER_NAME": "o"}
    env["GIT_COMMITTER_EMAIL"] = "o@x"

    def git(*args: str) -> None:
        subprocess.run(["git", *args], check=True, env=env)

    git("init", "-q", str(origin_repo))
    git("-C", str(origin_repo), "commit", "-q", "--allow-empty", "-m", "x")
    mark.unlink(missing_ok=True)  # only the clone counts
    git("clone", "-q", str(origin_repo), str(state_dir.parent / "clone"))
    assert not mark.exists(), "the operator's git clone ran a hook a host run planted in their template dir"


_COOKIE_THIEF = (
    "import hashlib,sqlite3,sys\n"
    "from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes\n"
    "k=hashlib.pbkdf2_hmac('sha1',b'peanuts',b'saltysalt',1,16)\n"
    "db=sqlite3.connect('file:'+sys.argv[1]+'?immutable=1',uri=True)\n"
    "for host,name,v in db.execute('select host_key,name,encrypted_value from cookies'):\n"
    " d=Cipher(algorithms.AES(k),modes.CBC(b' '*16)).decryptor();p=d.update(v[3:])+d.finalize()\n"
    " print(host,name,p[32:-p[-1]].decode(errors='replace'))\n"
)


async def test_class1_the_operators_browser_cookies_are_a_host_runs(state_dir: Path) -> None:
    import os
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from tests.helpers.webconsole import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("no chromium")

    class Site(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Set-Cookie", "sid=COOKIE-SECRET-r11a; Max-Age=3600; Path=/")
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<p>logged in</p>")

        def log_message(self, *args: object) -> None:
            pass

    site = HTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    profile = Path(os.environ["HOME"]) / ".config" / "chromium"
    try:
        # The operator logs in somewhere in their own Chromium.
        seen = await asyncio.create_subprocess_exec(
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            f"--user-data-dir={profile}",
            "--dump-dom",
            f"http://127.0.0.1:{site.server_address[1]}/",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.wait_for(seen.wait(), 120)
    finally:
        site.shutdown()
        site.server_close()
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            steal = f"python3 -c {shlex.quote(_COOKIE_THIEF)} {profile}/Default/Cookies"
            result = await operator.request("exec", {"agentId": "main", "command": steal})
        finally:
            await operator.close()
    output = str(result["details"].get("aggregated") or result["text"])
    assert "COOKIE-SECRET-r11a" not in output, f"a host run holds the operator's web session: {output}"


async def test_class1_the_gateways_proxy_credentials_are_every_host_runs(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://operator:PROXY-PASS-r11a@proxy.corp.invalid:3128")
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            result = await operator.request("exec", {"agentId": "main", "command": "printenv HTTPS_PROXY"})
        finally:
            await operator.close()
    output = str(result["details"].get("aggregated") or result["text"])
    assert "PROXY-PASS-r11a" not in output, f"a host run read the operator's proxy password: {output}"


async def _git_token_seen(state_dir: Path, *, linked: bool) -> str:
    """What a host run's `git credential-cache get` is handed of the operator's cached token, with ~/.cache
    a directory in the home or (`linked`) a link to another disk."""
    import os

    home = Path(os.environ["HOME"])
    if linked:
        disk = state_dir.parent / "bigdisk" / "cache"  # the operator keeps caches on another disk
        disk.mkdir(parents=True, mode=0o700)
        (home / ".cache").symlink_to(disk)
    env = {**os.environ, "HOME": str(home)}
    stored = "protocol=https\nhost=git.corp.invalid\nusername=operator\npassword=GIT-TOKEN-r11a\n\n"
    subprocess.run(["git", "credential-cache", "store"], input=stored, text=True, check=True, env=env)
    try:
        write_config(state_dir, FULL)
        ask = "printf 'protocol=https\\nhost=git.corp.invalid\\n\\n' | git credential-cache get"
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                result = await operator.request("exec", {"agentId": "main", "command": ask})
            finally:
                await operator.close()
    finally:
        subprocess.run(["git", "credential-cache", "exit"], check=False, env=env, capture_output=True)
    return str(result["details"].get("aggregated") or result["text"])


async def test_class1_the_operators_git_credential_cache_behind_a_linked_cache_dir_is_a_host_runs(
    state_dir: Path,
) -> None:
    output = await _git_token_seen(state_dir, linked=True)
    assert "GIT-TOKEN-r11a" not in output, f"a host run was handed the operator's git token: {output}"


async def test_class1_the_operators_git_credential_cache_in_the_home_is_covered(state_dir: Path) -> None:
    """Tried: the same daemon's socket in a plain ~/.cache: covered (homesockets)."""
    output = await _git_token_seen(state_dir, linked=False)
    assert "GIT-TOKEN-r11a" not in output, output
