"""The agent's `browser` tool: Playwright over CDP into a browser sandbox (navigate, snapshot, screenshot,
click, type, evaluate).

Playwright's `connect_over_cdp` is a maintained CDP client that needs no downloaded browser: the Chromium
is the one in the sandbox container. One Playwright driver per process, started on first use; one CDP
connection per browser sandbox, reopened when it drops (a restarted container).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from engine import redact
from engine.results import ToolError, ToolResult

ACTIONS = ("navigate", "snapshot", "screenshot", "click", "type", "evaluate")
# Chromium's net errors for "there is no network at all" (not a page that is down).
_OFFLINE = re.compile(
    r"ERR_(INTERNET_DISCONNECTED|NAME_NOT_RESOLVED|NAME_RESOLUTION_FAILED|NETWORK_ACCESS_DENIED|ADDRESS_UNREACHABLE)"
)
DEFAULT_TIMEOUT_MS = 15_000
MAX_TIMEOUT_MS = 120_000
SNAPSHOT_CAP = 60_000  # characters of page text handed back
EVALUATE_CAP = 60_000
# A frame on the control socket is at most 1 MiB; the base64 image must fit with room to spare.
IMAGE_CAP = 600 * 1024


class CdpUnavailable(ToolError):
    """The browser's CDP did not answer or the connection dropped (a restarted or removed container)."""


@dataclass
class Screenshot:
    data: bytes
    mime: str
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class BrowserTool:
    """Drives browser sandboxes through their CDP endpoints (the gateway's token URLs)."""

    def __init__(self) -> None:
        self._playwright: Any = None
        self._start_lock = asyncio.Lock()
        self._browsers: dict[str, Any] = {}  # endpoint → playwright Browser
        self._locks: dict[str, asyncio.Lock] = {}
        self.latest: dict[str, Screenshot] = {}  # endpoint → the last screenshot taken

    async def _driver(self) -> Any:
        async with self._start_lock:
            if self._playwright is None:
                try:
                    from playwright.async_api import async_playwright
                except ImportError as exc:  # pragma: no cover - a declared dependency
                    raise ToolError("The browser tool needs Playwright (`pip install playwright`).") from exc
                self._playwright = await async_playwright().start()
            return self._playwright

    async def _page(self, endpoint: str, timeout_ms: int) -> Any:
        browser = self._browsers.get(endpoint)
        if browser is None or not browser.is_connected():
            driver = await self._driver()
            try:
                browser = await driver.chromium.connect_over_cdp(endpoint, timeout=timeout_ms)
            except Exception as exc:
                why = _short(exc, endpoint)
                raise CdpUnavailable(f"The browser sandbox's CDP did not answer: {why}") from None
            self._browsers[endpoint] = browser
        contexts = browser.contexts
        context = contexts[0] if contexts else await browser.new_context()
        pages = [p for p in context.pages if not p.is_closed()]
        page = pages[-1] if pages else await context.new_page()
        page.set_default_timeout(timeout_ms)
        return page

    async def run(self, endpoint: str, params: dict[str, Any]) -> ToolResult:
        action = params.get("action")
        if action not in ACTIONS:
            raise ToolError(f"Unknown browser action {action!r} (expected one of: {', '.join(ACTIONS)})")
        timeout_ms = _int(params.get("timeoutMs"), DEFAULT_TIMEOUT_MS, 100, MAX_TIMEOUT_MS)
        async with self._locks.setdefault(endpoint, asyncio.Lock()):  # one action at a time per browser
            page = await self._page(endpoint, timeout_ms)
            try:
                return await getattr(self, "_" + action)(page, params, endpoint, timeout_ms)
            except ToolError:
                raise
            except Exception as exc:  # Playwright's errors: a timeout, a bad selector, a page error
                browser = self._browsers.get(endpoint)
                if browser is None or not browser.is_connected():
                    raise CdpUnavailable(f"browser {action} failed: the browser went away") from None
                raise ToolError(f"browser {action} failed: {_short(exc, endpoint)}") from None

    @staticmethod
    def offline_hint(message: str, network: str) -> str:
        """A page that fails for want of a network, in a browser that has none, says why (and how)."""
        if network != "none" or not _OFFLINE.search(message):
            return message
        return (
            f'{message}\nThe browser sandbox has network = "none" (sandbox.browser.network): it can reach '
            'no network by design. Give it one in config (e.g. network = "bridge") and recreate it.'
        )

    async def _navigate(
        self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int
    ) -> ToolResult:
        url = _text(params, "url")
        response = await page.goto(url, wait_until="load", timeout=timeout_ms)
        status = response.status if response is not None else None
        title = await page.title()
        text = f"Navigated to {page.url}" + (f" (HTTP {status})" if status else "") + f": {title!r}"
        return ToolResult(text, {"status": "ok", "url": page.url, "title": title, "httpStatus": status})

    async def _snapshot(
        self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int
    ) -> ToolResult:
        """The page as text: its accessibility tree (roles, names, links' targets), then the visible text
        when the tree is empty."""
        title = await page.title()
        tree = await page.locator("body").aria_snapshot(timeout=timeout_ms)
        body = tree or await page.inner_text("body", timeout=timeout_ms)
        truncated = len(body) > SNAPSHOT_CAP
        body = body[:SNAPSHOT_CAP]
        text = f"Page: {title!r} at {page.url}\n{body}" + ("\n[snapshot truncated]" if truncated else "")
        return ToolResult(
            text, {"status": "ok", "url": page.url, "title": title, "snapshot": body, "truncated": truncated}
        )

    async def _screenshot(
        self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int
    ) -> ToolResult:
        full = params.get("fullPage") is True
        shot = Screenshot(await page.screenshot(full_page=full, timeout=timeout_ms), "image/png")
        for quality in (80, 50, 30):  # too big for one frame: JPEG, smaller until it fits
            if len(shot.data) * 4 // 3 <= IMAGE_CAP:
                break
            data = await page.screenshot(full_page=full, type="jpeg", quality=quality, timeout=timeout_ms)
            shot = Screenshot(data, "image/jpeg")
        if len(shot.data) * 4 // 3 > IMAGE_CAP:
            raise ToolError("The screenshot is too large even as a JPEG; try without fullPage.")
        self.latest[endpoint] = shot
        viewport = page.viewport_size or {}
        text = f"Screenshot of {page.url} ({shot.mime}, {len(shot.data)} bytes)"
        return ToolResult(
            text,
            {
                "status": "ok",
                "url": page.url,
                "mimeType": shot.mime,
                "image": base64.b64encode(shot.data).decode("ascii"),
                "width": viewport.get("width"),
                "height": viewport.get("height"),
            },
        )

    async def _click(self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int) -> ToolResult:
        selector = _text(params, "selector")
        await page.click(selector, timeout=timeout_ms)
        return ToolResult(f"Clicked {selector!r} on {page.url}", {"status": "ok", "url": page.url})

    async def _type(self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int) -> ToolResult:
        selector = _text(params, "selector")
        value = params.get("text")
        if not isinstance(value, str):
            raise ToolError("browser type needs `text` (a string)")
        await page.fill(selector, value, timeout=timeout_ms)
        if params.get("submit") is True:
            await page.press(selector, "Enter", timeout=timeout_ms)
        return ToolResult(
            f"Typed {len(value)} characters into {selector!r}"
            + (" and pressed Enter" if params.get("submit") else ""),
            {"status": "ok", "url": page.url},
        )

    async def _evaluate(
        self, page: Any, params: dict[str, Any], endpoint: str, timeout_ms: int
    ) -> ToolResult:
        expression = _text(params, "expression")
        async with asyncio.timeout(timeout_ms / 1000):
            value = await page.evaluate(expression)
        try:
            rendered = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            rendered = repr(value)
        truncated = len(rendered) > EVALUATE_CAP
        rendered = rendered[:EVALUATE_CAP]
        return ToolResult(
            rendered + ("\n[result truncated]" if truncated else ""),
            {"status": "ok", "url": page.url, "result": rendered, "truncated": truncated},
        )

    async def forget(self, endpoint: str) -> None:
        browser = self._browsers.pop(endpoint, None)
        self.latest.pop(endpoint, None)
        if browser is not None:
            with contextlib.suppress(Exception):  # already gone is what we wanted
                await browser.close()  # over CDP this disconnects; the container's Chromium stays up

    async def close(self) -> None:
        for endpoint in list(self._browsers):
            await self.forget(endpoint)
        if self._playwright is not None:
            with contextlib.suppress(Exception):  # the driver process may be gone already
                await self._playwright.stop()
            self._playwright = None


def _text(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise ToolError(f"browser {params.get('action')} needs `{key}` (a non-empty string)")
    return value


def _int(value: Any, default: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(low, min(high, value))


def _short(exc: BaseException, endpoint: str) -> str:
    """Playwright's messages carry a multi-line call log; the first lines say what went wrong. They quote
    the URL they tried, which is the door with its token: that is masked before anything is cut, so no
    part of a token survives (and every other registered secret too)."""
    text = str(exc)
    token = endpoint.rstrip("/").rsplit("/", 1)[-1]
    text = text.replace(endpoint, "<browser door>").replace(token, "<token>") if token else text
    lines = [ln for ln in redact.scrub(text).splitlines() if ln.strip()][:3]
    return " ".join(lines)[:500] or exc.__class__.__name__
