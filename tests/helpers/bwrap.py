"""Bubblewrap sandboxes in tests: a config, a manager that ends every sandbox it made, a command runner."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import SandboxExec, SandboxManager, bwrap
from engine.sessions import RunSpec

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def bwrap_config(extra_sandbox: str = "", docker: str = "", extra: str = "") -> Any:
    return load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n{extra_sandbox}\n'
        f"[agents.defaults.sandbox.docker]\n{docker}\n{extra}"
    )


@pytest.fixture
def bwrap_mgr() -> Iterator[SandboxManager]:
    yield SandboxManager()
    bwrap.remove_all()  # this state dir's sandboxes: never leave a keeper running


async def run(sx: SandboxExec, command: str, **kw: Any) -> tuple[tuple[int | None, str | None], str, str]:
    handle = await sx.launcher.spawn(RunSpec(command=command, cwd=sx.cwd, env=kw.pop("env", {}), **kw))
    out, err = b"", b""
    while (chunk := await handle.read()) is not None:
        if chunk[0] == "stderr":
            err += chunk[1]
        else:
            out += chunk[1]
    status = await handle.wait()
    handle.close()
    return status, out.decode(), err.decode()
