"""The pool of ready sandbox containers on the real Docker engine: claim, refill, config change, restart."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.sandbox import SandboxManager, docker_ops, prepare_exec, wsfs
from engine.sandbox import supervisor as sv
from engine.sandbox.pool import PoolEntry, is_pool_name
from engine.sandbox.registry import Registry
from engine.sandbox.settings import layout, resolve_settings
from tests.engine.sandbox.test_sandbox_docker import config, inspect, run
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"pool-{os.getpid()}-{secrets.token_hex(3)}"
LABELS = {"exechost.test": RUN_ID}


@pytest.fixture(scope="module")
def image() -> str:
    return build_test_image()


@pytest.fixture
async def mgr(image: str, state_dir: Path) -> AsyncIterator[SandboxManager]:
    manager = SandboxManager(extra_labels=LABELS)
    yield manager
    await manager.stop_pool()
    remove_labelled(RUN_ID)


def agent() -> str:
    return "p" + secrets.token_hex(4)


async def warmed(mgr: SandboxManager, cfg: Any) -> PoolEntry:
    await mgr.start_pool(cfg)
    await mgr.pool.settle()
    (entry,) = mgr.pool.ready()
    return entry


def pool_containers() -> list[str]:
    names = [str(c["Names"][0]).lstrip("/") for c in docker_ops.list_sandboxes(f"exechost.test={RUN_ID}")]
    return sorted(n for n in names if is_pool_name(n))


async def test_a_claim_serves_the_scope_workspace_and_the_pool_refills(mgr: SandboxManager) -> None:
    cfg = config()
    spare = await warmed(mgr, cfg)
    spare_id = inspect(spare.name)["Id"]
    a = "main"  # the agent the config lists: its owner's spares (pool.pool_key)
    sx = await prepare_exec(cfg, a, "s", None, manager=mgr)
    lay = layout(resolve_settings(cfg, a), a, "s")
    assert sx.container == lay.name and sx.created
    assert inspect(sx.container)["Id"] == spare_id  # the spare itself, renamed: nothing was created
    assert not docker_ops.inspect(spare.name).exists and not os.path.exists(spare.workspace)
    assert not sv.ctl_dir(spare.name).exists()
    status, out, _ = await run(sx, "echo hello > made-here.txt && pwd && ls /.exechost")
    assert status == (0, None) and out.startswith("/workspace\n")
    assert Path(lay.sandbox_workspace, "made-here.txt").read_text() == "hello\n"
    if os.geteuid() == 0:  # the spare's own capped filesystem came with it (engine.sandbox.wsfs)
        assert os.path.ismount(lay.sandbox_workspace)
        assert os.path.exists(wsfs.image_path(os.path.dirname(lay.sandbox_workspace), lay.sandbox_workspace))
        assert not os.path.exists(wsfs.image_path(os.path.dirname(spare.workspace), spare.workspace))
    entry = Registry().get(lay.name)
    assert entry is not None and entry.sessionKey == lay.scope_key and entry.agentId == a
    # The next use is warm, and list shows the claimed container as the scope's, matching its config.
    again = await prepare_exec(cfg, a, "s", None, manager=mgr)
    assert inspect(again.container)["Id"] == spare_id and not again.created
    (row,) = [r for r in mgr.list_runtimes(cfg) if r["containerName"] == lay.name]
    assert row["configMatch"] and row["sessionKey"] == lay.scope_key and row["agentId"] == a
    await mgr.pool.settle()
    (refill,) = mgr.pool.ready()
    assert refill.name != spare.name and docker_ops.inspect(refill.name).running
    assert all(not is_pool_name(r["containerName"]) for r in mgr.list_runtimes(cfg))  # spares hidden


async def test_a_claimed_container_is_never_handed_to_a_second_scope(mgr: SandboxManager) -> None:
    cfg = config(extra_sandbox='scope = "session"')  # a scope per session key, one owner
    await warmed(mgr, cfg)
    a = b = "main"  # two new scopes of the agent the spare was made for
    # Both new scopes at once, one spare: one claims it, the other is created as usual.
    first, second = await asyncio.gather(
        prepare_exec(cfg, a, "s", None, manager=mgr), prepare_exec(cfg, b, "t", None, manager=mgr)
    )
    assert inspect(first.container)["Id"] != inspect(second.container)["Id"]
    await run(first, "echo secret-a > a.txt")
    status, out, _ = await run(second, "ls -a /workspace; cat /workspace/a.txt")
    assert "a.txt" not in out and status[0] != 0
    await mgr.pool.settle()
    third = await prepare_exec(cfg, a, "u", None, manager=mgr)
    ids = {inspect(x.container)["Id"] for x in (first, second, third)}
    assert len(ids) == 3
    assert (await run(third, "ls -A /workspace"))[1] == ""


async def test_a_config_change_leaves_old_spares_unused_and_prunes_them(mgr: SandboxManager) -> None:
    old = await warmed(mgr, config())
    changed = config(docker="pidsLimit = 64")
    a = "main"
    sx = await prepare_exec(changed, a, "s", None, manager=mgr)
    info = inspect(sx.container)
    assert info["Name"].lstrip("/") == sx.container and info["HostConfig"]["PidsLimit"] == 64
    await mgr.pool.settle()
    assert not docker_ops.inspect(old.name).exists  # the agent's key changed: its old spares went
    (new,) = mgr.pool.ready()
    assert inspect(new.name)["HostConfig"]["PidsLimit"] == 64
    # `sandbox prune` with yet another config removes the spares that config does not ask for.
    assert mgr.prune_pool(config(docker="pidsLimit = 32")) == [new.name]
    assert not docker_ops.inspect(new.name).exists and mgr.pool.ready() == []


async def test_a_new_manager_adopts_valid_spares_and_removes_the_rest(mgr: SandboxManager) -> None:
    cfg = config()
    spare = await warmed(mgr, cfg)
    await mgr.stop_pool()
    assert docker_ops.inspect(spare.name).running  # kept for the next gateway
    after = SandboxManager(extra_labels=LABELS)
    try:
        assert await warmed(after, cfg) == spare  # adopted, not replaced
        await after.stop_pool()
        # A spare whose supervisor died cannot be trusted to answer: removed, a fresh one made.
        docker_ops.client().api.kill(spare.name)
        third = SandboxManager(extra_labels=LABELS)
        fresh = await warmed(third, cfg)
        assert fresh.name != spare.name and not docker_ops.inspect(spare.name).exists
        await third.stop_pool()
        # Another config: the spare is stale and removed at start.
        fourth = SandboxManager(extra_labels=LABELS)
        await fourth.start_pool(config(docker="pidsLimit = 48"))
        await fourth.pool.settle()
        assert not docker_ops.inspect(fresh.name).exists
        assert [inspect(e.name)["HostConfig"]["PidsLimit"] for e in fourth.pool.ready()] == [48]
        await fourth.stop_pool()
    finally:
        await after.stop_pool()


async def test_pool_zero_disables_it(mgr: SandboxManager) -> None:
    cfg = config(docker="pool = 0")
    await mgr.start_pool(cfg)
    await mgr.pool.settle()
    sx = await prepare_exec(cfg, agent(), "s", None, manager=mgr)
    await mgr.pool.settle()
    assert mgr.pool.ready() == [] and pool_containers() == []
    assert (await run(sx, "echo ok"))[1] == "ok\n"
    assert docker_ops.POOL_LABEL not in inspect(sx.container)["Config"]["Labels"]


async def test_pool_size_and_rw_access_fall_back(mgr: SandboxManager) -> None:
    cfg = config(docker="pool = 2")
    await mgr.start_pool(cfg)
    await mgr.pool.settle()
    assert len(mgr.pool.ready()) == 2 and len(pool_containers()) == 2
    rw = config(extra_sandbox='workspaceAccess = "rw"')
    sx = await prepare_exec(rw, agent(), "s", None, manager=mgr)  # the agent's own workspace: not pooled
    assert docker_ops.POOL_LABEL not in inspect(sx.container)["Config"]["Labels"]


async def test_a_used_scope_workspace_is_not_replaced_by_a_claim(mgr: SandboxManager) -> None:
    cfg = config(extra_sandbox='scope = "session"')  # a scope per session key, one owner
    spare = await warmed(mgr, cfg)
    a = "main"  # the agent the config lists: its owner's spares (pool.pool_key)
    lay = layout(resolve_settings(cfg, a), a, "s")
    os.makedirs(lay.sandbox_workspace, mode=0o700)
    Path(lay.sandbox_workspace, "kept.txt").write_text("from before")
    sx = await prepare_exec(cfg, a, "s", None, manager=mgr)
    assert docker_ops.POOL_LABEL not in inspect(sx.container)["Config"]["Labels"]
    assert (await run(sx, "cat kept.txt"))[1] == "from before"
    assert mgr.pool.ready() == [spare]  # untouched, still ready for a new scope
    # Even an empty one stays: it may be mounted already (the scope's browser sandbox shares it).
    b = a
    empty = layout(resolve_settings(cfg, b), b, "t").sandbox_workspace
    os.makedirs(empty, mode=0o700)
    ino = os.stat(empty).st_ino
    sx = await prepare_exec(cfg, b, "t", None, manager=mgr)
    assert docker_ops.POOL_LABEL not in inspect(sx.container)["Config"]["Labels"]
    # the same dir (as root, its own filesystem mounted on it: engine.sandbox.wsfs), never the spare's
    assert os.stat(empty).st_ino == ino or os.path.ismount(empty)
    assert mgr.pool.ready() == [spare]


async def test_a_claimed_container_that_stopped_is_replaced_not_restarted(mgr: SandboxManager) -> None:
    cfg = config()
    await warmed(mgr, cfg)
    a = "main"
    sx = await prepare_exec(cfg, a, "s", None, manager=mgr)
    claimed_id = inspect(sx.container)["Id"]
    await run(sx, "echo kept > k.txt")
    docker_ops.client().api.stop(sx.container, timeout=1)
    mgr.forget(sx.container)
    again = await prepare_exec(cfg, a, "s", None, manager=mgr)
    assert inspect(again.container)["Id"] != claimed_id  # Docker would have mounted the pool paths
    status, out, _ = await run(again, "cat k.txt; ls /.exechost")
    assert status == (0, None) and out.startswith("kept\n")
    assert inspect(again.container)["State"]["Running"]


async def test_old_spares_expire_with_max_age_and_a_lost_record_is_nobodys(mgr: SandboxManager) -> None:
    cfg = config()
    spare = await warmed(mgr, cfg)
    spare.created_at_ms -= 8 * 86_400_000  # older than the default maxAgeDays (7)
    await mgr.maybe_prune(resolve_settings(cfg, "main"), force=True)
    await mgr.pool.settle()
    assert not docker_ops.inspect(spare.name).exists
    (fresh,) = mgr.pool.ready()
    a = "main"
    sx = await prepare_exec(cfg, a, "s", None, manager=mgr)
    claimed = inspect(sx.container)
    assert fresh.name not in pool_containers()  # the fresh spare is the one it claimed
    assert docker_ops.POOL_LABEL in claimed["Config"]["Labels"]
    Registry().remove(sx.container)  # the registry lost it: no label says whose it is
    (row,) = [r for r in mgr.list_runtimes(cfg) if r["containerName"] == sx.container]
    assert row["agentId"] is None and not row["configMatch"]
    mgr.forget(sx.container)
    again = await prepare_exec(cfg, a, "s", None, manager=mgr)  # not trusted: replaced
    assert inspect(again.container)["Id"] != claimed["Id"] and Registry().get(again.container) is not None


async def test_a_non_root_container_user_is_claimed_and_adopted(mgr: SandboxManager) -> None:
    cfg = config(docker='user = "1000:1000"')
    spare = await warmed(mgr, cfg)
    await mgr.stop_pool()
    after = SandboxManager(extra_labels=LABELS)
    try:
        assert await warmed(after, cfg) == spare  # its workspace is the container user's now: still adopted
        sx = await prepare_exec(cfg, "main", "s", None, manager=after)
        assert docker_ops.POOL_LABEL in inspect(sx.container)["Config"]["Labels"]
        status, out, err = await run(sx, "id -u; echo w > /workspace/f && cat /workspace/f")
        assert status == (0, None) and out == "1000\nw\n", err
    finally:
        await after.stop_pool()


async def test_recreate_all_and_prune_reach_the_spares(mgr: SandboxManager) -> None:
    from engine.sandbox import admin

    cfg = config()
    spare = await warmed(mgr, cfg)
    assert await asyncio.to_thread(admin.prune, cfg, "main", mgr) == []  # asked for: kept
    assert docker_ops.inspect(spare.name).running
    # recreate --all: every spare goes too (an image rebuilt under the same tag reaches them only so).
    await asyncio.to_thread(admin.recreate, cfg, all=True, manager=mgr)
    assert not docker_ops.inspect(spare.name).exists and mgr.pool.ready() == []
    await prepare_exec(cfg, "main", "s", None, manager=mgr)  # refilled on the next use
    await mgr.pool.settle()
    (fresh,) = mgr.pool.ready()
    removed = await asyncio.to_thread(admin.prune, config(docker="pool = 0"), "main", mgr)
    assert removed == [fresh.name] and not docker_ops.inspect(fresh.name).exists


async def test_a_config_a_spare_cannot_have_is_not_pooled(mgr: SandboxManager, state_dir: Path) -> None:
    data = state_dir / "workspace" / "data"  # inside the main agent's workspace: allowed for its scopes only
    data.mkdir(parents=True)
    cfg = config(docker=f'binds = ["{data}:/data:ro"]')
    await mgr.start_pool(cfg)
    await mgr.pool.settle()
    assert mgr.pool.ready() == [] and pool_containers() == []
    sx = await prepare_exec(cfg, "main", "s", None, manager=mgr)  # created and validated as usual
    await mgr.pool.settle()
    assert (await run(sx, "ls -d /data"))[1] == "/data\n" and pool_containers() == []


async def test_cli_list_counts_the_spares_apart_from_the_rows(
    mgr: SandboxManager, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from engine.config.loader import load_config
    from runner.cli import main

    cfg_path = state_dir / "config.toml"
    sandbox = '[agents.defaults.sandbox]\nmode = "all"\n'
    cfg_path.write_text(f'{sandbox}[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n')
    spare = await warmed(mgr, load_config(cfg_path))
    assert await asyncio.to_thread(main, ["sandbox", "list"]) == 0
    text = capsys.readouterr().out
    assert "Pool: 1 ready container(s) for new scopes" in text and spare.name not in text
    assert await asyncio.to_thread(main, ["sandbox", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["spares"] == [spare.name] and listed["containers"] == []


async def test_one_agents_spares_never_serve_another_and_sit_in_its_owner_group(mgr: SandboxManager) -> None:
    from engine.sandbox import dockercg

    cfg = config()
    spare = await warmed(mgr, cfg)  # made for main (the agent the config lists)
    other = agent()
    sx = await prepare_exec(cfg, other, "s", None, manager=mgr)
    assert inspect(sx.container)["Id"] != inspect(spare.name)["Id"]  # created as usual, in its own group
    assert docker_ops.POOL_LABEL not in inspect(sx.container)["Config"]["Labels"]
    assert mgr.pool.ready(mgr.pool.key(resolve_settings(cfg, "main"), "main")) == [spare]
    await mgr.pool.settle()  # the other agent's own key is filled now, made in its owner's group
    (own,) = mgr.pool.ready(mgr.pool.key(resolve_settings(cfg, other), other))
    parent = dockercg.parent_for(dockercg.owner_of("session", other))
    assert inspect(own.name)["HostConfig"]["CgroupParent"] == (parent or "")
    assert inspect(spare.name)["HostConfig"]["CgroupParent"] == (
        dockercg.parent_for(dockercg.owner_of("session", "main")) or ""
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="workspaces are capped filesystems for a root gateway only")
async def test_a_spare_becomes_an_agents_workspace_only_within_its_budget(
    mgr: SandboxManager, tmp_path: Path
) -> None:
    from engine.results import ToolError
    from tests.engine.sandbox.test_wsfs import small_root

    with small_root(tmp_path / "ws") as root:  # 16 MiB: every workspace (spares too) its 2 MiB floor
        cfg = config(f'scope = "session"\nworkspaceRoot = "{root}"\nmaxWorkspaceBytesPerAgent = {4 << 20}')
        spare = await warmed(mgr, cfg)
        spare_id = inspect(spare.name)["Id"]
        first = await prepare_exec(cfg, "main", "agent:main:a", None, manager=mgr)
        assert inspect(first.container)["Id"] == spare_id
        assert not docker_ops.inspect(spare.name).exists  # claimed: its image is main's now
        await prepare_exec(cfg, "main", "agent:main:b", None, manager=mgr)
        await mgr.pool.settle()
        (waiting,) = mgr.pool.ready()
        with pytest.raises(ToolError, match=r"agent main's sandbox workspaces already take 4194304 bytes"):
            await prepare_exec(cfg, "main", "agent:main:c", None, manager=mgr)
        assert [e.name for e in mgr.pool.ready()] == [waiting.name]  # not spent on a refused scope
        assert os.path.ismount(waiting.workspace)
