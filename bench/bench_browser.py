"""Browser sandbox: cold start to "CDP answers", and a navigate + snapshot round trip through the gateway.

Run: .venv/bin/python bench/bench_browser.py [--cold N] [--warm N]
Baselines in the same run: `docker run` of the same image and start script polled until CDP answers (the
Docker floor for a cold start), and Playwright driving the same Chromium directly over CDP (the floor for
a round trip). Builds the browser image once if missing; throwaway state dir; its containers are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGE = "<!doctype html><title>Bench</title><h1>Hello</h1><p>" + "words " * 200 + "</p><a href='#x'>x</a>"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def report(name: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{name:<52} n={len(ms):<4} p50={pct(ms, 50):8.1f} ms  p90={pct(ms, 90):8.1f} ms  "
        f"mean={statistics.fmean(ms):8.1f} ms"
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--warm", type=int, default=30)
    args, _ = ap.parse_known_args()
    root = tempfile.mkdtemp(prefix="eh-bb-", dir="/tmp")
    state = Path(root) / "s"
    state.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    (state / "config.toml").write_text(
        '[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.browser]\nenabled = true\n'
    )
    os.chmod(state / "config.toml", 0o600)

    from playwright.async_api import async_playwright

    from engine.config.loader import load_config
    from engine.protocol.client import ControlClient
    from engine.sandbox import admin, docker_ops
    from engine.sandbox.browser import (
        START_SCRIPT,
        BrowserManager,
        browser_layout,
        create_kwargs,
        http_get,
        list_browsers,
    )
    from engine.sandbox.images import BROWSER_FLAVOUR, IMAGE_LABEL
    from engine.sandbox.settings import resolve_settings
    from runner.gateway.browser_proxy import BrowserProxy
    from runner.gateway.server import GatewayServer

    config = load_config(state / "config.toml")
    settings = resolve_settings(config, "main")
    image = settings.browser.image
    try:
        labels = (docker_ops.client().images.get(image).attrs.get("Config") or {}).get("Labels") or {}
    except docker_ops.not_found_type():
        labels = {}
    if labels.get(IMAGE_LABEL) != BROWSER_FLAVOUR:
        t0 = time.perf_counter()
        admin.setup_image(config, lambda line: print("  " + line), BROWSER_FLAVOUR)
        print(f"browser image built in {time.perf_counter() - t0:.1f} s")
    print(f"image size: {docker_ops.client().images.get(image).attrs['Size'] / 1e6:.0f} MB")
    blay = browser_layout(settings, "main", "agent:main:main")
    Path(blay.workspace_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    (Path(blay.workspace_dir) / "index.html").write_text(PAGE)

    try:
        # Cold start, baseline: the same image and start script with plain docker-py, polled to CDP.
        raw: list[float] = []
        for i in range(args.cold):
            name = f"eh-bench-raw-{os.getpid()}-{i}"
            sock_dir = Path(root) / f"r{i}"
            sock_dir.mkdir(mode=0o700)
            kwargs = create_kwargs(
                settings, blay, config_hash="", created_at_ms=0, env={}, user=None, agent_id="main"
            )
            kwargs.update(
                name=name, volumes=[f"{blay.workspace_dir}:/workspace:ro", f"{sock_dir}:/.exechost-browser"]
            )
            kwargs["labels"] = {"exechost.bench": "1"}
            t0 = time.perf_counter()
            await asyncio.to_thread(docker_ops.create_and_start, kwargs)
            cid = (await asyncio.to_thread(docker_ops.inspect, name)).id
            while True:
                try:
                    status, _ = await http_get(str(sock_dir / "cdp.sock"), "/json/version", cid, 2.0)
                    if status == 200:
                        break
                except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
                    pass
                await asyncio.sleep(0.02)
            raw.append(time.perf_counter() - t0)
            await asyncio.to_thread(docker_ops.remove, name)
        report("baseline: docker run + poll CDP (same image, script)", raw)
        assert START_SCRIPT

        # Cold start, exechost: BrowserManager.ensure (inspect, validate, dirs, create, start, CDP ready).
        manager = BrowserManager()
        cold: list[float] = []
        for _ in range(args.cold):
            t0 = time.perf_counter()
            await manager.ensure(settings, blay, "main")
            cold.append(time.perf_counter() - t0)
            await manager.stop(blay.name)
        report("exechost cold: ensure() until CDP answers", cold)

        # Round trips with the browser running: the gateway verb vs Playwright straight over CDP.
        server = GatewayServer(state)
        await server.start()
        try:
            agent = await ControlClient.connect(state, client="bench", name="bench", autostart=False)
            url = "file:///workspace/index.html"
            await agent.request("browser", {"action": "navigate", "url": url})  # starts it
            via: list[float] = []
            for _ in range(args.warm):
                t0 = time.perf_counter()
                await agent.request("browser", {"action": "navigate", "url": url})
                await agent.request("browser", {"action": "snapshot"})
                via.append(time.perf_counter() - t0)
            shots: list[float] = []
            for _ in range(max(5, args.warm // 3)):
                t0 = time.perf_counter()
                await agent.request("browser", {"action": "screenshot"})
                shots.append(time.perf_counter() - t0)
            await agent.close()
            proxy = BrowserProxy()
            await proxy.start()
            proxy.open(
                "b", blay.cdp_socket, None, (await asyncio.to_thread(docker_ops.inspect, blay.name)).id
            )
            endpoint = proxy.base_url("b")
            async with async_playwright() as pw:
                browser = await pw.chromium.connect_over_cdp(str(endpoint))
                page = browser.contexts[0].pages[0]
                direct: list[float] = []
                for _ in range(args.warm):
                    t0 = time.perf_counter()
                    await page.goto(url, wait_until="load")
                    await page.locator("body").aria_snapshot()
                    direct.append(time.perf_counter() - t0)
            await proxy.close()
        finally:
            await server.stop()
        report("baseline: Playwright direct, navigate + aria snapshot", direct)
        report("exechost: browser navigate + snapshot (2 verbs)", via)
        report("exechost: browser screenshot (PNG, 1280x800)", shots)
    finally:
        for c in list_browsers():
            docker_ops.remove(c["Id"])
        for c in docker_ops.client().api.containers(all=True, filters={"label": ["exechost.bench=1"]}):
            docker_ops.remove(c["Id"])


if __name__ == "__main__":
    asyncio.run(main())
