"""Egress from real sandboxes (bwrap and Docker) through the real proxy to a real loopback origin."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from engine.config.egress import EgressPolicy, decide
from engine.config.loader import load_config_text
from engine.sandbox import SandboxExec, SandboxManager, bwrap, prepare_exec
from engine.sandbox.egress import forwarder
from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
from tests.helpers.bwrap import needs_bwrap, run
from tests.helpers.egress import origin
from tests.helpers.sandbox import build_test_image, remove_labelled

RUN_ID = secrets.token_hex(4)


@dataclass
class Rig:
    manager: SandboxManager
    proxy: EgressProxy
    records: list[Connection]
    port: int


def _egress_toml(port: int) -> str:
    return (
        '[agents.defaults.sandbox.egress]\nmode = "allowlist"\n'
        f'allow = ["origin.test:{port}", "localhost:{port}"]\nask = false\n'
        'resolve = { "origin.test" = "127.0.0.1", "other.test" = "127.0.0.1" }\n'
    )


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    records: list[Connection] = []
    with origin() as o:
        policy = EgressPolicy.from_config(load_config_text(_egress_toml(o.port)).sandbox.egress)

        async def decide_it(req: Request) -> Decision:
            verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
            return Decision(verdict.action == "allow", verdict.rule, "policy", dict(policy.resolve))

        proxy = EgressProxy(decide_it, records.append)
        manager = SandboxManager(extra_labels={"exechost.test": RUN_ID})

        async def listen(name: str, agent_id: str, uid: int | None) -> bool:
            await proxy.listen(name, agent_id, forwarder.socket_dir(name), uid)
            return False  # (no generations here: a sandbox never outlives its authority)

        manager.egress = listen
        try:
            yield Rig(manager, proxy, records, o.port)
        finally:
            await proxy.close()
            bwrap.remove_all()
            remove_labelled(RUN_ID)


def _config(port: int, backend: str) -> Any:
    image = ""
    if backend == "docker":
        image = f'[agents.defaults.sandbox.docker]\nimage = "{build_test_image()}"\n'
    return load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\nbackend = "{backend}"\n{image}{_egress_toml(port)}'
    )


def _get(url: str, backend: str, *, tunnel: bool = False, no_env: bool = False) -> str:
    """A GET as the sandbox's tools make it: curl in the host's system view, busybox wget/nc in the image."""
    unset = "env -u no_proxy -u NO_PROXY " if no_env else ""
    if backend == "bwrap":
        return f"{unset}curl -sS -i {'-p ' if tunnel else ''}--max-time 10 {url}"
    if tunnel:  # busybox has no CONNECT client: speak it over nc
        host = url.split("/")[2]
        path = "/" + url.split("/", 3)[3]
        req = f"CONNECT {host} HTTP/1.1\\r\\n\\r\\nGET {path} HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n"
        return f"printf '{req}' | nc 127.0.0.1 {forwarder.PORT}"
    return f"{unset}wget -S -O - {url} 2>&1"


async def _check(rig: Rig, sx: SandboxExec, backend: str) -> None:
    port = rig.port
    status, out, err = await run(sx, _get(f"http://origin.test:{port}/plain", backend))
    assert status == (0, None), out + err
    assert f"origin says hello to origin.test:{port} at /plain" in out
    status, out, err = await run(sx, _get(f"http://origin.test:{port}/tunnel", backend, tunnel=True))
    assert "200 Connection established" in out and "at /tunnel" in out, out + err
    _, out, _ = await run(sx, _get(f"http://other.test:{port}/x", backend))
    assert " 403 " in out, out
    # Straight at the origin's address: no route (the sandbox's loopback is its own) ...
    direct = "curl -sS --noproxy '*' --max-time 5" if backend == "bwrap" else "env -u http_proxy wget -O -"
    status, out, err = await run(sx, f"{direct} http://127.0.0.1:{port}/x")
    assert status[0] != 0 and "origin says" not in out
    # ... and through the proxy as an IP literal: refused, and recorded.
    _, out, _ = await run(sx, _get(f"http://127.0.0.1:{port}/x", backend, no_env=True))
    assert " 403 " in out, out
    # An allowed name that DNS resolves to loopback, with no `resolve` entry: refused after resolution.
    _, out, _ = await run(sx, _get(f"http://localhost:{port}/x", backend, no_env=True))
    assert " 403 " in out, out
    if backend == "bwrap":  # SOCKS5 on the same port, names resolved by the proxy (curl speaks it)
        socks = f"curl -sS --max-time 10 -x socks5h://127.0.0.1:{forwarder.PORT} http://origin.test:{port}/s5"
        status, out, err = await run(sx, socks)
        assert status == (0, None) and "at /s5" in out, err
    seen = {(r.name, r.method, r.decision) for r in rig.records}
    assert ("origin.test", "GET", "allowed") in seen
    assert ("origin.test", "CONNECT", "allowed") in seen
    assert ("other.test", "GET", "refused") in seen
    assert ("127.0.0.1", "GET", "refused") in seen
    local = next(r for r in rig.records if r.name == "localhost")
    assert local.decision == "refused" and "non-public" in local.rule and "not public" in str(local.detail)
    assert all(r.sandbox == sx.container and r.agentId == "main" for r in rig.records)
    # The socket's dir is read-only inside: the proxy's socket cannot be replaced or removed.
    status, _, _ = await run(sx, f"rm -f {forwarder.MOUNT}/proxy.sock || exit 3; touch {forwarder.MOUNT}/x")
    assert status[0] != 0
    tunnel = next(r for r in rig.records if r.method == "CONNECT")
    assert tunnel.bytesUp > 0 and tunnel.bytesDown > 0


@needs_bwrap
async def test_bwrap_sandbox_reaches_only_the_allowed_name(rig: Rig) -> None:
    sx = await prepare_exec(_config(rig.port, "bwrap"), "main", "s", None, manager=rig.manager)
    await _check(rig, sx, "bwrap")


async def test_docker_sandbox_reaches_only_the_allowed_name(rig: Rig) -> None:
    sx = await prepare_exec(_config(rig.port, "docker"), "main", "s", None, manager=rig.manager)
    _, out, _ = await run(sx, "cat /proc/net/route; ls /sys/class/net")
    assert out.split() == [
        "Iface",
        "Destination",
        "Gateway",
        "Flags",
        "RefCnt",
        "Use",
        "Metric",
        "Mask",
        "MTU",
        "Window",
        "IRTT",
        "lo",
    ]  # network none: no route, loopback only
    await _check(rig, sx, "docker")
