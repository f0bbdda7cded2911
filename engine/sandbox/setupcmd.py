"""A sandbox's setupCommand, run once in it after its first start: its exit and the tail of its output."""

from __future__ import annotations

import asyncio

from engine.sandbox import supervisor as sv
from engine.sandbox.settings import SandboxSettings

SETUP_TIMEOUT_SEC = 600.0


async def run_setup(name: str, settings: SandboxSettings) -> str | None:
    """setupCommand in container `name`: None when it succeeded, else "(exit N)" and its output tail."""
    from engine.sandbox.launcher import SupervisedProcess

    command = settings.docker.setup_command or ""
    proc = SupervisedProcess(sv.Channel(name), "0" * 16)
    script = sv.spec_script(
        command, settings.docker.workdir, {"HOME": settings.docker.workdir}, None, "/bin/sh"
    )
    output = b""
    try:
        await proc.start(script, False)

        async def drain() -> None:
            nonlocal output
            while (chunk := await proc.read()) is not None:
                output = (output + chunk[1])[-2000:]

        async with asyncio.timeout(SETUP_TIMEOUT_SEC):
            await drain()
            code, sig = await proc.wait()
    except (TimeoutError, sv.SupervisorUnavailable) as exc:
        code, sig = None, str(exc) or "timeout"
    finally:
        proc.close()
    if code == 0:
        return None
    tail = output.decode("utf-8", "replace").strip()
    return f"(exit {code if code is not None else sig})" + (f":\n{tail}" if tail else ".")
