"""The browser sandbox for real: Chromium in a hardened container, driven by the `browser` verb over CDP.

The image is built once per machine (`sandbox setup --browser`, about 60 s) and reused.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from engine import principals
from engine.config.loader import load_config_text
from engine.protocol.frames import RemoteError
from engine.sandbox import docker_ops
from engine.sandbox.browser import list_browsers
from tests.helpers.browser import CONFIG, browser_image, browser_state, get, status_of, vnc_banner, ws_open
from tests.helpers.gateway import cli, connect, gateway, list_agents, listed, wait_until, write_config

__all__ = ["browser_image", "browser_state"]  # fixtures

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PAGE = """<!doctype html><html><head><title>Workspace page</title></head>
<body><h1>Hello from the workspace</h1><a href="#next">next</a>
<input id="q" aria-label="query"><p id="out"></p>
<script>document.getElementById('q').addEventListener('keydown', e => {
  if (e.key === 'Enter') document.getElementById('out').textContent = 'got ' + e.target.value; });</script>
</body></html>"""


def _seed_page(state: Path) -> None:
    """The agent's sandbox workspace, as exec would have left it: a page to load from file://."""
    from engine.sandbox.settings import layout, resolve_settings

    settings = resolve_settings(load_config_text(CONFIG), "main")
    ws = Path(layout(settings, "main", "agent:main:main").sandbox_workspace)
    ws.mkdir(parents=True, exist_ok=True, mode=0o700)
    (ws / "index.html").write_text(PAGE)


async def test_the_agent_reads_a_workspace_page_and_takes_a_screenshot(browser_state: Path) -> None:
    _seed_page(browser_state)
    list_agents(browser_state, "other")
    async with gateway(browser_state) as server:
        agent = await connect(browser_state, "agent", operator=False)
        try:
            nav = await agent.request(
                "browser", {"action": "navigate", "url": "file:///workspace/index.html"}
            )
            assert nav["details"]["title"] == "Workspace page", nav
            snap = await agent.request("browser", {"action": "snapshot"})
            assert 'heading "Hello from the workspace"' in snap["text"]
            assert 'link "next"' in snap["text"]
            typed = await agent.request(
                "browser", {"action": "type", "selector": "#q", "text": "kittens", "submit": True}
            )
            assert typed["details"]["status"] == "ok"
            value = await agent.request(
                "browser", {"action": "evaluate", "expression": "document.getElementById('out').textContent"}
            )
            assert value["text"] == '"got kittens"'
            await agent.request("browser", {"action": "click", "selector": "text=next"})
            shot = await agent.request("browser", {"action": "screenshot"})
            png = base64.b64decode(shot["details"]["image"])
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and shot["details"]["mimeType"] == "image/png"
            bad = await agent.request(
                "browser", {"action": "click", "selector": "#missing", "timeoutMs": 300}
            )
            raise AssertionError(f"a missing selector must fail: {bad}")
        except RemoteError as exc:
            assert "browser click failed" in str(exc)
        finally:
            mine = (await agent.request("browser.status", {"agentId": "main"}))["browsers"]
            principals.mint(browser_state, "other")
            other = await connect(browser_state, "other", operator=False, agent="other")
            theirs = (await other.request("browser.status", {}))["browsers"]
            assert len(mine) == 1 and theirs == []  # an agent sees only its own browsers
            await other.close()
            await agent.close()

        op = await connect(browser_state, "op")
        try:
            rows = (await op.request("browser.status", {}))["browsers"]
            assert len(rows) == 1 and rows[0]["running"] and rows[0]["cdp"]
            assert rows[0]["url"].endswith("/workspace/index.html#next")
            assert rows[0]["title"] == "Workspace page" and rows[0]["noVnc"] is True
            assert "cdpUrl" not in rows[0]  # status never hands out the token
            shot = (await op.request("browser.screenshot", {"containerName": rows[0]["containerName"]}))[
                "screenshot"
            ]
            assert base64.b64decode(shot["image"])[:4] == b"\x89PNG"
            urls = await op.request("browser.url", {"agentId": "main"})
            vnc = await asyncio.to_thread(get, urls["noVncUrl"].split("?")[0])
            assert b"noVNC" in vnc
            page = urls["noVncUrl"].split("?")[0]  # the wrapper's module, from the container's noVNC
            assert b"export default class RFB" in await asyncio.to_thread(
                get, page.rsplit("/", 1)[0] + "/core/rfb.js"
            )
            door = server.services.browsers.proxy.base_url(rows[0]["containerName"])
            assert door is not None  # the door's own URL, with its token: the gateway's tool's alone
            assert b"RFB 003.008" in await vnc_banner(door)  # the VNC server itself, through the door
            # The operator's CDP URL is a one-use ticket: one /json answer, whose websocket URLs carry a
            # one-use secret (never the door's token), followable back through the door once.
            ticket = urls["cdpUrl"].rsplit("/", 1)[1]
            assert ticket not in door
            version = json.loads(await asyncio.to_thread(get, urls["cdpUrl"] + "/json/version"))
            ws_url = version["webSocketDebuggerUrl"]
            secret = ws_url.split("/")[3]
            assert ws_url.split("/", 4)[4].startswith("devtools/browser/") and secret not in (ticket, door)
            assert await asyncio.to_thread(status_of, urls["cdpUrl"] + "/json/version") == 403  # spent
            assert (await ws_open(ws_url)).startswith(b"HTTP/1.1 101")
            assert (await ws_open(ws_url)).startswith(b"HTTP/1.1 403")  # the secret is spent too
            stopped = await op.request("browser.stop", {"agentId": "main"})
            assert stopped["removed"] is True
            await wait_until(lambda: not list_browsers())
        finally:
            await op.close()


async def test_the_container_is_hardened_and_publishes_nothing(browser_state: Path) -> None:
    async with gateway(browser_state):
        op = await connect(browser_state, "op")
        try:
            started = await op.request("browser.start", {"agentId": "main"})
        finally:
            await op.close()
    info = docker_ops.client().api.inspect_container(started["containerName"])
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert not host.get("PortBindings") and not info["NetworkSettings"].get("Ports")
    assert any(m["Destination"] == "/workspace" and not m["RW"] for m in info["Mounts"])


def test_disabled_by_default_and_refused_by_the_tool_policy(state_dir: Path) -> None:
    async def go() -> None:
        write_config(state_dir, '[agents.defaults.sandbox]\nmode = "all"\n')
        async with gateway(state_dir):
            agent = await connect(state_dir, "agent", operator=False)
            try:
                with pytest.raises(RemoteError, match="browser sandbox is disabled"):
                    await agent.request("browser", {"action": "snapshot"})
                write_config(state_dir, CONFIG + '[tools.sandbox.tools]\ndeny = ["brow*"]\n')
                with pytest.raises(RemoteError, match=r"denied in sandboxed sessions by .* 'brow\*'"):
                    await agent.request("browser", {"action": "snapshot"})
                for verb in ("browser.start", "browser.stop", "browser.url", "browser.screenshot"):
                    with pytest.raises(RemoteError, match="needs the operator role"):
                        await agent.request(verb, {"agentId": "main", "containerName": "x"})
            finally:
                await agent.close()

    asyncio.run(go())


def test_cli_browser_verbs_explain_and_prune(browser_state: Path) -> None:
    explained = cli(browser_state, "sandbox", "explain")
    assert "Browser sandbox (sandbox.browser):" in explained.stdout and "(none published)" in explained.stdout
    try:
        started = cli(browser_state, "sandbox", "browser", "start")
        assert started.returncode == 0 and "is running (CDP answers)" in started.stdout, started.stderr
        status = cli(browser_state, "sandbox", "browser", "status")
        assert "🟢 running" in status.stdout and "CDP:     answers" in status.stdout
        listed = cli(browser_state, "sandbox", "list", "--browser")  # no gateway needed for this one
        assert "🟢 running" in listed.stdout and "about:blank" in listed.stdout
        both = json.loads(cli(browser_state, "sandbox", "list", "--json").stdout)
        assert both["containers"] == [] and both["browsers"][0]["running"] is True
        urls = json.loads(cli(browser_state, "sandbox", "browser", "url", "--json").stdout)
        assert b'"Browser"' in get(urls["cdpUrl"] + "/json/version")  # the daemon's door answers, once
        # Idle for ages: `sandbox prune` removes the browser like any sandbox.
        registry = browser_state / "sandbox-browsers.json"
        data = json.loads(registry.read_text())
        for entry in data["entries"]:
            entry["lastUsedAtMs"] = entry["createdAtMs"] = 1
        registry.write_text(json.dumps(data))
        pruned = cli(browser_state, "sandbox", "prune")
        assert "openclaw-sbx-browser-" in pruned.stdout, pruned.stdout + pruned.stderr
        assert not list_browsers()
        stopped = cli(browser_state, "sandbox", "browser", "stop")
        assert stopped.returncode == 0 and "No container" in stopped.stdout
    finally:
        cli(browser_state, "gateway", "stop")


async def test_a_browser_removed_behind_the_gateways_back_comes_back(browser_state: Path) -> None:
    """Warm calls skip Docker; when the container is gone, the next call brings it up again (autoStart)."""
    async with gateway(browser_state):
        agent = await connect(browser_state, "agent", operator=False)
        try:
            first = await agent.request(
                "browser", {"action": "navigate", "url": "data:text/html,<title>one</title>"}
            )
            docker_ops.remove(first["details"]["containerName"])
            again = await agent.request(
                "browser", {"action": "navigate", "url": "data:text/html,<title>two</title>"}
            )
            assert again["details"]["title"] == "two"
            write_config(browser_state, CONFIG + "autoStart = false\n")
            docker_ops.remove(first["details"]["containerName"])
            with pytest.raises(RemoteError, match="autoStart is false"):
                await agent.request("browser", {"action": "snapshot"})
        finally:
            await agent.close()


async def test_the_mcp_browser_tool_returns_text_and_an_image(browser_state: Path) -> None:
    import jsonschema
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    from runner.mcp_schema import BROWSER_SCHEMA
    from tests.runner.test_mcp import server_params

    jsonschema.Draft202012Validator.check_schema(BROWSER_SCHEMA)
    _seed_page(browser_state)
    try:
        async with (
            stdio_client(server_params(browser_state)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert tools["browser"].input_schema["properties"]["action"]["enum"][0] == "navigate"
            for bad in (
                {"action": "navigate"},  # no url
                {"action": "type", "selector": "#q"},  # no text
                {"action": "fly"},
                {"action": "snapshot", "timeoutMs": 10},
            ):
                res = await session.call_tool("browser", bad)
                assert res.is_error and "invalid browser arguments" in res.content[0].text, bad
            nav = await session.call_tool(
                "browser", {"action": "navigate", "url": "file:///workspace/index.html"}
            )
            assert not nav.is_error and "Workspace page" in nav.content[0].text
            shot = await session.call_tool("browser", {"action": "screenshot"})
            assert [c.type for c in shot.content] == ["text", "image"]
            assert base64.b64decode(shot.content[1].data)[:4] == b"\x89PNG"
            assert "image" not in shot.structured_content["details"]  # once, as the image block
            missing = await session.call_tool(
                "browser", {"action": "click", "selector": "#nope", "timeoutMs": 300}
            )
            assert missing.is_error and "browser click failed" in missing.content[0].text
    finally:
        cli(browser_state, "gateway", "stop")


async def test_headless_has_no_display_and_no_novnc(browser_state: Path) -> None:
    write_config(browser_state, CONFIG + "headless = true\n")
    async with gateway(browser_state):
        agent = await connect(browser_state, "agent", operator=False)
        op = await connect(browser_state, "op")
        try:
            page = "data:text/html,<title>headless</title><p>still here</p>"
            nav = await agent.request("browser", {"action": "navigate", "url": page})
            assert nav["details"]["title"] == "headless"
            snap = await agent.request("browser", {"action": "snapshot"})
            assert "still here" in snap["text"]
            urls = await op.request("browser.url", {"agentId": "main"})
            assert urls["noVnc"] is False and urls["noVncUrl"] is None
            name = urls["containerName"]
            ps = docker_ops.client().containers.get(name).exec_run(["ps", "-eo", "args"])
            # The init line carries the whole start script; the processes themselves are what ran.
            commands = "\n".join(ln for ln in ps.output.decode().splitlines() if "docker-init" not in ln)
            assert "--headless=new" in commands and "Xvfb" not in commands and "x11vnc" not in commands
        finally:
            await agent.close()
            await op.close()


async def test_a_page_that_needs_a_network_says_the_browser_has_none(browser_state: Path) -> None:
    """Issue 21: ERR_INTERNET_DISCONNECTED said nothing about network = "none"."""
    async with gateway(browser_state):
        agent = await connect(browser_state, "agent", operator=False)
        try:
            with pytest.raises(RemoteError) as failed:
                await agent.request("browser", {"action": "navigate", "url": "http://example.com/"})
            assert "ERR_" in str(failed.value)
            assert 'The browser sandbox has network = "none"' in str(failed.value)
        finally:
            await agent.close()


def test_offline_hint_only_for_network_errors_without_a_network() -> None:
    from engine.tools.browser import BrowserTool

    message = "browser navigate failed: net::ERR_INTERNET_DISCONNECTED at http://example.com/"
    assert 'network = "none"' in BrowserTool.offline_hint(message, "none")
    assert BrowserTool.offline_hint(message, "bridge") == message
    other = "browser navigate failed: net::ERR_CONNECTION_REFUSED at http://localhost:1/"
    assert BrowserTool.offline_hint(other, "none") == other


def test_the_door_puts_its_token_only_in_urls_of_its_own_origin() -> None:
    """The websocket URLs and a same-origin DevTools frontend carry the token; a frontend on another
    origin is dropped rather than given it (fresh round 10 a)."""
    import json

    from runner.gateway.browser_proxy import _with_token

    host, token = b"127.0.0.1:9333", b"T0K"
    listing = [
        {
            "webSocketDebuggerUrl": "ws://127.0.0.1:9333/devtools/page/A",
            "devtoolsFrontendUrl": "/devtools/inspector.html?ws=127.0.0.1:9333/devtools/page/A",
        },
        {
            "webSocketDebuggerUrl": "ws://127.0.0.1:9333/devtools/page/B",
            "devtoolsFrontendUrl": "https://chrome-devtools-frontend.appspot.com/x?ws=127.0.0.1:9333/devtools/page/B",
        },
    ]
    out = json.loads(_with_token(json.dumps(listing).encode(), host, token))
    assert out[0]["webSocketDebuggerUrl"] == "ws://127.0.0.1:9333/T0K/devtools/page/A"
    assert out[0]["devtoolsFrontendUrl"] == "/devtools/inspector.html?ws=127.0.0.1:9333/T0K/devtools/page/A"
    assert out[1]["webSocketDebuggerUrl"] == "ws://127.0.0.1:9333/T0K/devtools/page/B"
    assert "devtoolsFrontendUrl" not in out[1]


async def test_an_agents_browsers_are_capped_and_its_least_recently_used_one_ends(
    browser_state: Path,
) -> None:
    """`tools.exec.maxSandboxesPerAgent` caps an agent's browsers too (each session key names one, and each
    is a Chromium): the agent's least recently used browser ends for a new one, never another agent's."""
    write_config(
        browser_state,
        "[tools.exec]\nmaxSandboxesPerAgent = 2\n"
        + CONFIG.replace("\n[", '\nscope = "session"\n[', 1)
        + listed("ops"),
    )
    principals.mint(browser_state, "ops")
    async with gateway(browser_state):
        agent = await connect(browser_state, "agent", operator=False)
        ops = await connect(browser_state, "ops", operator=False, agent="ops")
        try:

            async def open_in(client: object, key: str) -> str:
                done = await client.request(  # type: ignore[attr-defined]
                    "browser",
                    {"action": "navigate", "url": f"data:text/html,<title>{key}</title>", "sessionKey": key},
                )
                assert done["details"]["title"] == key, done
                return str(done["details"]["containerName"])

            theirs = await open_in(ops, "agent:ops:x")
            first = await open_in(agent, "agent:main:a")
            second = await open_in(agent, "agent:main:b")
            third = await open_in(agent, "agent:main:c")
            assert len({theirs, first, second, third}) == 4  # one browser per session key
            names = {c["Names"][0].lstrip("/") for c in list_browsers()}
            assert names == {theirs, second, third}, names
            # the ended one comes back on its next call, ending the least recently used again
            assert await open_in(agent, "agent:main:a") == first
            assert {c["Names"][0].lstrip("/") for c in list_browsers()} == {theirs, third, first}
        finally:
            await agent.close()
            await ops.close()
