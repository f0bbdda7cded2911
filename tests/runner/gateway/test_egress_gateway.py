"""Issue 29's done-when through a real gateway: sandboxes (bwrap and Docker) reach a real loopback origin
by name through the gateway's egress proxy; unknown names become asks in the inbox that `exechost approve`
answers while the connection waits; grants run out; every connection is listed by `sandbox egress`."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.grants import GrantStore
from engine.protocol.client import ControlClient
from engine.sandbox import SandboxManager, bwrap, bwraprecords, set_default_manager
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.egress import origin
from tests.helpers.gateway import cli, connect, gateway, wait_until, write_config
from tests.helpers.sandbox import build_test_image, remove_labelled

RUN_ID = secrets.token_hex(4)


def _config(port: int, backend: str) -> str:
    image = ""
    if backend == "docker":
        image = f'[agents.defaults.sandbox.docker]\nimage = "{build_test_image()}"\n'
    names = ["origin.test", "asked.test", "denied.test", "granted.test", "kept.test", "twice.test"]
    resolve = ", ".join(f'"{n}" = "127.0.0.1"' for n in names)
    return (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        f'[agents.defaults.sandbox]\nmode = "all"\nbackend = "{backend}"\n{image}'
        '[agents.defaults.sandbox.egress]\nmode = "allowlist"\n'
        f'allow = ["origin.test:{port}"]\nask = true\nresolve = {{ {resolve} }}\n'
    )


def _fetch(backend: str, url: str) -> str:
    """curl in the bwrap system view; in the busybox image, the request by hand over nc (busybox wget
    hides an error's body)."""
    if backend == "bwrap":
        return f"curl -sS -i --max-time 60 {url}"
    host = url.split("/")[2]
    return f"printf 'GET {url} HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n' | nc 127.0.0.1 3128"


async def _exec(client: ControlClient, command: str) -> str:
    result = await client.request("exec", {"command": command, "yieldMs": 120_000})
    return str(result.get("text", ""))


async def _pending(client: ControlClient, target: str) -> dict[str, Any] | None:
    """The ask of a plain request (curl's `http://`) to `target`: it names what its allow-always saves."""
    rows = (await client.request("approvals.pending", {})).get("approvals") or []
    return next((r for r in rows if r.get("egress") == f"http://{target}"), None)


async def _approve(state: Path, row: dict[str, Any], *args: str) -> None:
    done = await asyncio.to_thread(cli, state, "approve", row["slug"], *args)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
async def cleanup() -> AsyncIterator[None]:
    set_default_manager(SandboxManager(extra_labels={"exechost.test": RUN_ID}))
    yield
    set_default_manager(None)
    bwrap.remove_all()
    remove_labelled(RUN_ID)


@pytest.mark.parametrize("backend", [pytest.param("bwrap", marks=needs_bwrap), "docker"])
async def test_egress_through_the_gateway(state_dir: Path, backend: str, cleanup: None) -> None:
    with origin() as o:
        port = o.port
        write_config(state_dir, _config(port, backend))
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                await _run(state_dir, client, backend, port)
            finally:
                await client.close()


async def _run(state: Path, client: ControlClient, backend: str, port: int) -> None:
    watcher = await connect(state, "watcher")
    await watcher.subscribe(["sandboxes"])
    out = await _exec(client, _fetch(backend, f"http://origin.test:{port}/plain"))
    assert f"origin says hello to origin.test:{port} at /plain" in out, out
    async for event in watcher.events():  # every connection is an event on the sandboxes topic
        if event.event == "egress.connection":
            assert event.data["name"] == "origin.test" and event.data["decision"] == "allowed"
            assert event.data["decidedBy"] == "policy" and event.data["bytesDown"] > 0
            break
    await watcher.close()

    # An unknown name: one inbox row for two waiting connections, answered by `exechost approve`.
    first = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://asked.test:{port}/one")))
    second = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://asked.test:{port}/two")))
    target = f"asked.test:{port}"
    row = await wait_until(lambda: _pending_count(client, target, 2), timeout=60)
    assert row["command"] == f"connect http://{target} [plain http]" and row["host"] == "sandbox"
    await _approve(state, row, "allow-once")
    got = await asyncio.gather(first, second)
    assert "at /one" in got[0] and "at /two" in got[1], got
    # allow-once is the ask's one use: the connections that waited on it (its count, shown) went; the
    # next connection to the same name asks again, and is refused here (runner.egress._ask)
    third = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://asked.test:{port}/three")))
    row = await wait_until(lambda: _pending(client, target), timeout=60)
    await _approve(state, row, "deny")
    out = await third
    assert " 403 " in out and "at /three" not in out, out

    # A denial: a clear 403 naming who denied and the ask.
    task = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://denied.test:{port}/x")))
    row = await wait_until(lambda: _pending(client, f"denied.test:{port}"), timeout=60)
    await _approve(state, row, "deny")
    out = await task
    assert " 403 " in out and "denied by" in out and row["slug"] in out, out

    # allow-always with a limit: a grant of one more use; then it has run out, and the name asks again.
    task = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://granted.test:{port}/g1")))
    row = await wait_until(lambda: _pending(client, f"granted.test:{port}"), timeout=60)
    await _approve(state, row, "allow-always", "--uses", "1")
    assert "at /g1" in await task
    assert "at /g2" in await _exec(client, _fetch(backend, f"http://granted.test:{port}/g2"))
    assert not GrantStore(state / "exec-grants.json").active("main")  # used up
    task = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://granted.test:{port}/g3")))
    row = await wait_until(lambda: _pending(client, f"granted.test:{port}"), timeout=60)
    # A grant that expires: approved for an hour, then its hour is over (the file says so).
    await _approve(state, row, "allow-always", "--for", "1h")
    assert "at /g3" in await task
    grants = json.loads((state / "exec-grants.json").read_text())
    for grant in grants["grants"]:
        grant["expiresAtMs"] = 1
    (state / "exec-grants.json").write_text(json.dumps(grants))
    task = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://granted.test:{port}/g4")))
    row = await wait_until(lambda: _pending(client, f"granted.test:{port}"), timeout=60)
    await _approve(state, row, "deny")
    assert " 403 " in await task

    # allow-always: into the approvals file; the next connection goes without an ask.
    task = asyncio.ensure_future(_exec(client, _fetch(backend, f"http://kept.test:{port}/k1")))
    row = await wait_until(lambda: _pending(client, f"kept.test:{port}"), timeout=60)
    await _approve(state, row, "allow-always")
    assert "at /k1" in await task
    approvals = json.loads((state / "exec-approvals.json").read_text())
    # Exactly what was asked: a plain request's name and port, and no tunnel (CONNECT kept.test:port).
    assert approvals["agents"]["main"]["egress"]["allow"] == [f"http://kept.test:{port}"]
    assert "at /k2" in await _exec(client, _fetch(backend, f"http://kept.test:{port}/k2"))
    shown = await asyncio.to_thread(cli, state, "approvals", "get")
    assert "egress.allow" in shown.stdout and f"kept.test:{port}" in shown.stdout, shown.stdout

    listed = await asyncio.to_thread(cli, state, "sandbox", "egress", "--json", "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["connections"]
    seen = [(r["name"], r["decision"], r["decidedBy"]) for r in rows]
    assert ("origin.test", "allowed", "policy") in seen
    assert ("asked.test", "allowed", "cli") in seen
    assert ("denied.test", "refused", "cli") in seen
    assert ("kept.test", "allowed", "policy") in seen  # the second time: the saved entry decided
    assert any(r["name"] == "granted.test" and r["rule"].startswith("grant ") for r in rows)
    assert all(r["agentId"] == "main" and r["port"] == port for r in rows)
    assert any(r["bytesDown"] > 0 for r in rows if r["name"] == "origin.test")
    text = await asyncio.to_thread(cli, state, "sandbox", "egress")
    assert "denied.test" in text.stdout and "⛔" in text.stdout


async def _pending_count(client: ControlClient, target: str, count: int) -> dict[str, Any] | None:
    row = await _pending(client, target)
    return row if row is not None and row.get("count", 1) >= count else None


@needs_bwrap
async def test_a_new_gateway_serves_the_sandboxes_it_finds(state_dir: Path, cleanup: None) -> None:
    """Sandboxes outlive a gateway: the next one listens on their sockets at start, before any exec, so a
    background job inside keeps its way out across the restart."""
    with origin() as o:
        write_config(state_dir, _config(o.port, "bwrap"))
        async with gateway(state_dir):
            client = await connect(state_dir)
            out = await _exec(client, _fetch("bwrap", f"http://origin.test:{o.port}/before"))
            await client.close()
        assert "at /before" in out
        (sandbox,) = [row["name"] for row in bwraprecords.list_sandboxes() if row["running"]]
        async with gateway(state_dir) as server:
            assert server.services.egress.proxy.listening(sandbox)
            client = await connect(state_dir)
            out = await _exec(client, _fetch("bwrap", f"http://origin.test:{o.port}/after"))
            await client.close()
        assert "at /after" in out


@needs_bwrap
async def test_an_unanswered_ask_ends_in_a_clear_403(
    state_dir: Path, cleanup: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_APPROVAL_TIMEOUT_MS", "1500")  # the ask's timeout, shortened
    with origin() as o:
        write_config(state_dir, _config(o.port, "bwrap"))
        async with gateway(state_dir):
            client = await connect(state_dir)
            try:
                out = await _exec(client, _fetch("bwrap", f"http://asked.test:{o.port}/late"))
            finally:
                await client.close()
    assert " 403 " in out and "got no decision (expired)" in out, out
    assert "asked.test:" in out and "not in the allowlist" in out


@needs_bwrap
async def test_a_removed_sandbox_takes_its_egress_socket_along(state_dir: Path, cleanup: None) -> None:
    from engine.sandbox.egress import forwarder

    with origin() as o:
        write_config(state_dir, _config(o.port, "bwrap"))
        async with gateway(state_dir) as server:
            client = await connect(state_dir)
            try:
                assert "at /one" in await _exec(client, _fetch("bwrap", f"http://origin.test:{o.port}/one"))
                (name,) = [row["name"] for row in bwraprecords.list_sandboxes() if row["running"]]
                assert (forwarder.socket_dir(name) / "proxy.sock").exists()
                done = await asyncio.to_thread(cli, state_dir, "sandbox", "recreate", "--all", "--force")
                assert done.returncode == 0, done.stderr
                await wait_until(lambda: not server.services.egress.proxy.listening(name))
                assert not forwarder.socket_dir(name).exists()
                # Made again under the same name: a new socket, a new listener, the way out again.
                assert "at /two" in await _exec(client, _fetch("bwrap", f"http://origin.test:{o.port}/two"))
                assert server.services.egress.proxy.listening(name)
            finally:
                await client.close()
