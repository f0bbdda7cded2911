"""Config-set sandbox keys on the real engine: what `docker inspect` and the container itself show."""

from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import SandboxExec, SandboxManager, docker_ops, prepare_exec
from engine.sandbox.settings import state_id
from engine.sessions import RunSpec
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"sbxcfg-{os.getpid()}-{secrets.token_hex(3)}"
TEST_LABEL = f"exechost.test={RUN_ID}"
MIB = 1024 * 1024


def _cleanup() -> None:
    remove_labelled(RUN_ID)


@pytest.fixture(scope="module")
def sandbox_image() -> Iterator[str]:
    yield build_test_image()
    _cleanup()


@pytest.fixture
def mgr(sandbox_image: str) -> Iterator[SandboxManager]:
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    _cleanup()


async def run(sx: SandboxExec, command: str) -> tuple[tuple[int | None, str | None], str, str]:
    handle = await sx.launcher.spawn(RunSpec(command=command, cwd=sx.cwd, env={}))
    out, err = b"", b""
    while (chunk := await handle.read()) is not None:
        if chunk[0] == "stderr":
            err += chunk[1]
        else:
            out += chunk[1]
    status = await handle.wait()
    handle.close()
    return status, out.decode(), err.decode()


async def test_config_keys_reach_the_container(mgr: SandboxManager) -> None:
    agent = "c" + secrets.token_hex(4)
    config = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
        'containerPrefix = "exh-cfgtest-"\nworkdir = "/srv/work"\n'
        'memory = "64m"\nmemorySwap = "128m"\n'
        'ulimits = { nofile = "512:1024", nproc = 200 }\n'
        # nofile x pids within the smallest share of the host's file table (docs/SECURITY.md)
        "pidsLimit = 64\nfileTableShare = 2\n"
        'dns = ["10.1.2.3"]\nextraHosts = ["db.internal:10.1.2.4"]\n'
    )
    sx = await prepare_exec(config, agent, "s", None, manager=mgr)
    assert sx.container.startswith(f"exh-cfgtest-{state_id()}-agent-")
    info: dict[str, Any] = docker_ops.client().api.inspect_container(sx.container)
    host = info["HostConfig"]
    assert info["Config"]["WorkingDir"] == "/srv/work"
    assert host["Memory"] == 64 * MIB
    if docker_ops.client().info().get("SwapLimit"):
        assert host["MemorySwap"] == 128 * MIB
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits == {"nofile": (512, 1024), "nproc": (200, 200), "core": (0, 0)}
    assert host["Dns"] == ["10.1.2.3"]
    assert host["ExtraHosts"] == ["db.internal:10.1.2.4"]
    assert any(m["Destination"] == "/srv/work" for m in info["Mounts"])

    status, out, err = await run(sx, "ulimit -n; ulimit -Hn; pwd; echo hi > f && cat f")
    assert status == (0, None), err
    assert out.split() == ["512", "1024", "/srv/work", "hi"]
    assert (Path(sx.workspace_dir) / "f").read_text() == "hi\n"


def test_setup_never_overwrites_an_image_it_did_not_build(
    sandbox_image: str, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    client = docker_ops.client()
    tag = f"exechost-sbxtest-foreign:{RUN_ID}"
    dockerfile = f'FROM {IMAGE}\nLABEL exechost.image="someone-else"\n'.encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    try:
        (state_dir / "config.toml").write_text(f'[agents.defaults.sandbox.docker]\nimage = "{tag}"\n')
        assert main(["sandbox", "setup"]) == 1
        captured = capsys.readouterr()
        assert f"Building the busybox sandbox image {tag}" in captured.out
        assert f"Image {tag} exists and was not built by `exechost sandbox setup`" in captured.err
        assert client.images.get(tag).id == image.id  # untouched
    finally:
        client.images.remove(tag, force=True)
