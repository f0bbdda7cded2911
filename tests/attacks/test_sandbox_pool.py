"""The pool of ready sandbox containers (engine.sandbox.pool): no scope reaches another's files through it."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sandbox import SandboxManager, docker_ops, prepare_exec
from engine.sandbox import supervisor as sv
from engine.sandbox.pool import _POOL_DIR, is_pool_name
from engine.sandbox.settings import container_name, layout, resolve_settings
from tests.engine.sandbox.test_sandbox_docker import config, inspect, run
from tests.helpers.sandbox import build_test_image, remove_labelled, unmount_workspace

RUN_ID = f"attpool-{os.getpid()}-{secrets.token_hex(3)}"
LABELS = {"exechost.test": RUN_ID}


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SandboxManager]:
    build_test_image()
    manager = SandboxManager(extra_labels=LABELS)
    yield manager
    await manager.stop_pool()
    remove_labelled(RUN_ID)


async def ready(mgr: SandboxManager) -> str:
    await mgr.start_pool(config(extra_sandbox='scope = "session"'))
    await mgr.pool.settle()
    (entry,) = mgr.pool.ready()
    return entry.name


@pytest.mark.docker
async def test_what_one_scope_leaves_never_reaches_the_next_through_the_pool(
    mgr: SandboxManager, tmp_path: Path
) -> None:
    cfg = config(extra_sandbox='scope = "session"')
    await ready(mgr)
    victim_host = tmp_path / "host-dir"
    victim_host.mkdir()
    (victim_host / "keep").write_text("host file")
    attacker = await prepare_exec(cfg, "main", "agent:main:one", None, manager=mgr)
    # Everything the first scope can write: its workspace, the tmpfs dirs, and its control dir (with a
    # link to a host dir, hoping a later claim or cleanup follows it).
    await run(
        attacker,
        "echo A > /workspace/a.txt; echo A > /tmp/a; echo A > /var/tmp/a; echo A > /run/a; "
        f"echo A > /.exechost/planted; ln -s {victim_host} /.exechost/link; ln -s {victim_host} /workspace/l",
    )
    first_id = inspect(attacker.container)["Id"]
    mgr.remove_runtime(attacker.container)  # its scope's control dir stays behind, links and all
    await mgr.pool.settle()
    # A new scope gets a fresh spare, never the first scope's container, and none of its files.
    other = await prepare_exec(cfg, "main", "agent:main:two", None, manager=mgr)
    assert inspect(other.container)["Id"] != first_id
    _, out, _ = await run(other, "ls -A /workspace /tmp /var/tmp /run /.exechost; cat /.exechost/planted")
    assert "a.txt" not in out and "planted" not in out and "A" not in out.split()
    await mgr.pool.settle()
    # A scope that left only control-dir debris (its workspace removed) is served by a claim, which
    # replaces the old control dir without following the link in it.
    third = await prepare_exec(cfg, "main", "agent:main:three", None, manager=mgr)
    await run(third, f"echo A > /.exechost/planted; ln -s {victim_host} /.exechost/link")
    mgr.remove_runtime(third.container)
    three = layout(resolve_settings(cfg, "main"), "main", "agent:main:three").sandbox_workspace
    unmount_workspace(three)
    os.rmdir(three)
    await mgr.pool.settle()
    again = await prepare_exec(cfg, "main", "agent:main:three", None, manager=mgr)
    assert docker_ops.POOL_LABEL in inspect(again.container)["Config"]["Labels"]  # claimed
    _, out, _ = await run(again, "ls -A /.exechost")
    assert "planted" not in out and "link" not in out
    assert (victim_host / "keep").read_text() == "host file"
    assert not (victim_host / "planted").exists()


@pytest.mark.docker
async def test_a_spare_whose_workspace_was_swapped_between_gateways_is_never_adopted(
    mgr: SandboxManager,
) -> None:
    name = await ready(mgr)
    (entry,) = mgr.pool.ready()
    await mgr.stop_pool()
    # Between two gateways something replaces the spare's (empty) workspace with one holding a payload.
    unmount_workspace(entry.workspace)
    os.rmdir(entry.workspace)
    os.mkdir(entry.workspace, 0o700)
    Path(entry.workspace, "payload.sh").write_text("echo owned\n")
    after = SandboxManager(extra_labels=LABELS)
    try:
        await after.start_pool(config(extra_sandbox='scope = "session"'))
        await after.pool.settle()
        assert not docker_ops.inspect(name).exists  # not the dir it was created with: removed
        assert [e.name for e in after.pool.ready()] != [name]
        sx = await prepare_exec(
            config(extra_sandbox='scope = "session"'), "main", "agent:main:x", None, manager=after
        )
        assert (await run(sx, "ls -A /workspace"))[1] == ""
    finally:
        await after.stop_pool()


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=80))
def test_no_session_key_names_a_pool_container_or_dir(key: str) -> None:
    """A scope whose name or workspace looked like a spare's could be taken for one (or take one)."""
    s = resolve_settings(config(extra_sandbox='scope = "session"'), "main")
    assert not is_pool_name(container_name(s, key))
    lay = layout(s, "main", key)
    assert not _POOL_DIR.match(os.path.basename(lay.sandbox_workspace))
    assert not is_pool_name(lay.name) and sv.ctl_dir(lay.name).name == lay.name


def test_keys_crafted_like_pool_names_stay_scopes() -> None:
    s = resolve_settings(config(extra_sandbox='scope = "session"'), "main")
    for key in ("pool.0123456789ab", "-pool.0123456789ab", "x-pool.0123456789ab", "POOL.0123456789AB"):
        assert not is_pool_name(container_name(s, key))
        assert not _POOL_DIR.match(os.path.basename(layout(s, "main", key).sandbox_workspace))
