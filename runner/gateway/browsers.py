"""The gateway's browser sandboxes: containers (engine), the loopback door (tokens), the agent's tool.

One place decides which browser a call means (the agent/session's scope, like exec's sandbox; the operator's
own calls a browser of the operator's), starts it when `autoStart` allows, opens its door, and tells
subscribers what changed.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from typing import TYPE_CHECKING, Any

from engine.lazymod import lazy
from engine.protocol.methods import EventName, Topic
from engine.results import ToolError, ToolResult
from engine.sandbox import agentcap, docker_ops
from engine.sandbox.errors import SandboxError
from engine.sandbox.settings import SandboxSettings, main_session_key, resolve_settings

if TYPE_CHECKING:
    from engine.sandbox.browser import BrowserInfo, BrowserLayout, BrowserManager
    from engine.tools.browser import BrowserTool
    from runner.gateway.browser_proxy import BrowserProxy
    from runner.gateway.hubs import HubServices

# Loaded with the first browser call, not at gateway start (issue 37: most gateways never run a browser).
browsers = lazy("engine.sandbox.browser")
tools = lazy("engine.tools.browser")
doors = lazy("runner.gateway.browser_proxy")

DISABLED = (
    "The browser sandbox is disabled for agent {agent}: set agents.defaults.sandbox.browser.enabled = true "
    "(and build its image: `exechost sandbox setup --browser`)."
)
NOT_STARTED = (
    "The browser sandbox {name} is not running and browser.autoStart is false: the operator starts it "
    "with `exechost sandbox browser start --agent {agent}`."
)


class BrowserHub:
    def __init__(self, services: HubServices) -> None:
        self._services = services
        self._ready: dict[str, str] = {}  # browser → config hash it was last brought up with here
        self._agent_locks: dict[str, asyncio.Lock] = {}

    # Made on first use: a gateway that never runs a browser never loads their modules.
    @functools.cached_property
    def manager(self) -> BrowserManager:
        manager: BrowserManager = browsers.BrowserManager()
        return manager

    @functools.cached_property
    def proxy(self) -> BrowserProxy:
        proxy: BrowserProxy = doors.BrowserProxy()
        return proxy

    @functools.cached_property
    def tool(self) -> BrowserTool:
        tool: BrowserTool = tools.BrowserTool()
        return tool

    def resolve(
        self, agent_id: str, session_key: str, *, operator: bool = False
    ) -> tuple[SandboxSettings, BrowserLayout]:
        """The agent's settings, and the browser they apply to: the agent's scope's, or with `operator`
        (the operator's own call, naming the agent for policy) the operator's own (browser_layout)."""
        settings = resolve_settings(self._services.config(), agent_id)
        key = session_key or main_session_key(agent_id)
        layout: BrowserLayout = browsers.browser_layout(settings, agent_id, key, operator=operator)
        return settings, layout

    async def _endpoint(self, name: str) -> str:
        """The door's URL for browser `name` (opened on first use; kept while its container is the same)."""
        await self.proxy.start()
        container_id = self.manager.ids.get(name) or await self.manager.container_id(name)
        cdp, vnc = browsers.browser_sockets(name)
        self.proxy.open(name, cdp, vnc, container_id)
        url = self.proxy.base_url(name)
        assert url is not None
        return url

    async def start(self, agent_id: str, session_key: str, *, operator: bool = False) -> dict[str, Any]:
        settings, blay = self.resolve(agent_id, session_key, operator=operator)
        if not settings.browser.enabled:
            raise ToolError(DISABLED.format(agent=agent_id))
        cap = agentcap.cap_for(self._services.config(), agent_id)
        try:
            async with self._agent_locks.setdefault(agent_id, asyncio.Lock()):  # one start at a time counts
                # (the operator's own browser is no agent's to count, and never ends one of the agent's)
                for name in [] if operator else await self.manager.over_cap(blay, agent_id, cap):
                    await self.stop(agent_id, session_key, name)
                warnings = await self.manager.ensure(settings, blay, agent_id)
        except (SandboxError, docker_ops.SandboxUnavailable) as exc:
            raise ToolError(str(exc)) from None
        await self._endpoint(blay.name)
        self._changed(blay.name, "started")
        return {"containerName": blay.name, "warnings": warnings}

    async def stop(self, agent_id: str, session_key: str, name: str | None = None) -> dict[str, Any]:
        if name is None:
            _, blay = self.resolve(agent_id, session_key)
            name = blay.name
        endpoint = self.proxy.base_url(name)
        if endpoint is not None:
            await self.tool.forget(endpoint)
        self.proxy.shut(name)
        self._ready.pop(name, None)
        try:
            removed = await self.manager.stop(name)
        except docker_ops.SandboxUnavailable as exc:
            raise ToolError(str(exc)) from None
        self._changed(name, "stopped")
        return {"containerName": name, "removed": removed}

    async def status(self, *, with_urls: bool = False) -> list[dict[str, Any]]:
        try:
            rows = await self.manager.runtimes()
        except docker_ops.SandboxUnavailable as exc:
            raise ToolError(str(exc)) from None
        return [self._row(info, with_urls) for info in rows]

    def _row(self, info: BrowserInfo, with_urls: bool) -> dict[str, Any]:
        row = info.to_dict()
        endpoint = self.proxy.base_url(info.name) if info.running else None
        shot = self.tool.latest.get(endpoint or "")
        row["screenshotAtMs"] = None if shot is None else shot.at_ms
        if with_urls and endpoint is not None:
            # One-use tickets, never the token: a URL stays in shell histories and browser profiles.
            row["cdpUrl"] = self.proxy.cdp_url(info.name)
            row["noVncUrl"] = self.proxy.novnc_url(info.name) if info.no_vnc else None
        return row

    async def urls(self, agent_id: str, session_key: str) -> dict[str, Any]:
        """The operator's links into a running browser (one-use tickets; never shown to agents)."""
        _, blay = self.resolve(agent_id, session_key)
        info = await self.manager.info(blay.name)
        if info is None or not info.running:
            raise ToolError(
                f"The browser sandbox {blay.name} is not running (`exechost sandbox browser start`)."
            )
        await self._endpoint(blay.name)
        return self._row(info, True)

    def screenshot(self, name: str) -> dict[str, Any] | None:
        endpoint = self.proxy.base_url(name)
        shot = self.tool.latest.get(endpoint or "")
        if shot is None:
            return None
        return {
            "mimeType": shot.mime,
            "image": base64.b64encode(shot.data).decode("ascii"),
            "atMs": shot.at_ms,
        }

    async def capture(self, name: str) -> None:
        """A screenshot for the operator (browser.screenshot fresh=true) of a running browser."""
        endpoint = self.proxy.base_url(name)
        if endpoint is None:
            info = await self.manager.info(name)
            if info is None or not info.running:
                raise ToolError(f"The browser sandbox {name} is not running.")
            endpoint = await self._endpoint(name)
        await self.tool.run(endpoint, {"action": "screenshot"})
        self._changed(name, "screenshot")

    async def call(
        self, agent_id: str, session_key: str, params: dict[str, Any], *, operator: bool = False
    ) -> ToolResult:
        """The `browser` tool call: an agent's in its scope's browser sandbox, the operator's (`operator`)
        in the operator's own, whatever agent it names for policy (the caller owns the state it browses)."""
        settings, blay = self.resolve(agent_id, session_key, operator=operator)
        if not settings.browser.enabled:
            raise ToolError(DISABLED.format(agent=agent_id))
        expected = browsers.browser_hash(settings, blay)
        if self._ready.get(blay.name) != expected:  # warm calls skip Docker entirely
            await self._bring_up(settings, blay, agent_id, session_key, operator)
            self._ready[blay.name] = expected
        else:
            await self.manager.touch(blay.name)
        endpoint = await self._endpoint(blay.name)
        try:
            try:
                result = await self.tool.run(endpoint, params)
            except tools.CdpUnavailable:
                # Removed or restarted behind our back: bring it up again (autoStart permitting), once.
                self._ready.pop(blay.name, None)
                await self.tool.forget(endpoint)
                await self._bring_up(settings, blay, agent_id, session_key, operator)
                self._ready[blay.name] = expected
                result = await self.tool.run(await self._endpoint(blay.name), params)
        except ToolError as exc:
            hinted = tools.BrowserTool.offline_hint(str(exc), settings.browser.network)
            if hinted == str(exc):
                raise
            raise ToolError(hinted) from None
        result.details["containerName"] = blay.name
        if params.get("action") in ("navigate", "screenshot", "click", "type"):
            self._changed(blay.name, str(params.get("action")))
        return result

    async def _bring_up(
        self, settings: SandboxSettings, blay: BrowserLayout, agent_id: str, session_key: str, operator: bool
    ) -> None:
        # autoStart = false keeps starting a browser the operator's decision: its own call is that decision.
        if not settings.browser.auto_start and not operator:
            info = await self.manager.info(blay.name)
            if info is None or not info.running:
                raise ToolError(NOT_STARTED.format(name=blay.name, agent=agent_id))
        await self.start(agent_id, session_key, operator=operator)

    def _changed(self, name: str, what: str) -> None:
        self._services.broadcast(
            Topic.SANDBOXES,
            EventName.BROWSER_UPDATED,
            {"containerName": name, "what": what, "ts": int(time.time() * 1000)},
        )

    async def close(self) -> None:
        if "tool" in self.__dict__:  # (made on first use)
            await self.tool.close()
        if "proxy" in self.__dict__:
            await self.proxy.close()
