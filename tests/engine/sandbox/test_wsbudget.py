"""One agent's sandbox workspaces together within its budget (engine.sandbox.wsbudget): a new one past it is
refused naming the agent, the budget and how to free space; other agents and the shared scope keep theirs; a
changed config applies to the next workspace; `sandbox prune --workspaces` (engine.sandbox.wsprune) frees
the budget of workspaces whose sandboxes are gone, and keeps those that exist."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from engine.config.model import ConfigError
from engine.results import ToolError
from engine.sandbox import admin, bwrap, prepare_exec, wsbudget, wsfs, wsprune
from engine.sandbox.manager import SandboxManager
from engine.sandbox.registry import Registry, RegistryEntry, now_ms
from engine.sandbox.settings import layout, resolve_settings
from engine.sandbox.wsbudget import Budget, WorkspaceBudgetError
from tests.engine.sandbox.test_wsfs import needs_root, small_root
from tests.helpers.bwrap import bwrap_mgr, needs_bwrap, run

__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

MIB = 1 << 20


def sizes(root: str, *names: str) -> list[int]:
    return [os.stat(wsfs.image_path(root, os.path.join(root, n))).st_size for n in names]


def unmount_all(root: str) -> None:
    for name in os.listdir(root):
        if os.path.ismount(os.path.join(root, name)):
            subprocess.run(["umount", "-l", os.path.join(root, name)], check=False)


@needs_root
def test_an_agents_workspaces_together_stay_within_its_budget_and_others_keep_theirs(tmp_path: Path) -> None:
    with small_root(
        tmp_path / "sandboxes"
    ) as root:  # 16 MiB: each workspace its 2 MiB floor, 4 MiB each agent
        try:
            main = Budget("main")
            assert wsfs.ensure(root, f"{root}/s0-{'0' * 32}", main)
            assert wsfs.ensure(root, f"{root}/s1-{'0' * 32}", main)
            with pytest.raises(WorkspaceBudgetError) as refused:
                wsfs.ensure(root, f"{root}/s2-{'0' * 32}", main)
            text = str(refused.value)
            assert "agent main" in text and "4194304 bytes" in text, text  # whose, and the budget
            assert "maxWorkspaceBytesPerAgent" in text and "sandbox prune --workspaces" in text, text
            assert not os.path.exists(wsfs.image_path(root, f"{root}/s2-{'0' * 32}"))  # (nothing made)
            # an existing one of main's is mounted again as ever (its files are its own)
            subprocess.run(["umount", f"{root}/s0-{'0' * 32}"], check=True)
            assert wsfs.ensure(root, f"{root}/s0-{'0' * 32}", main)
            # another agent's, and the shared scope's (nobody's), are not main's to spend
            assert wsfs.ensure(root, f"{root}/o0-{'0' * 32}", Budget("ops"))
            assert wsfs.ensure(root, f"{root}/shared", None)
            # a gateway's agent of the same name on a shared node is another owner
            assert wsfs.ensure(root, f"{root}/n0-{'0' * 32}", Budget("ab12/main"))
        finally:
            unmount_all(root)


@needs_root
def test_a_new_workspace_gets_what_the_budget_has_left_when_that_is_less_than_its_cap(tmp_path: Path) -> None:
    with small_root(tmp_path / "sandboxes", "64m") as root:  # caps of 8 MiB
        try:
            budget = Budget("main", 12 * MIB)
            names = [f"s{n}-{'0' * 32}" for n in range(3)]
            assert wsfs.ensure(root, f"{root}/{names[0]}", budget)
            assert wsfs.ensure(root, f"{root}/{names[1]}", budget)
            assert sizes(root, *names[:2]) == [8 * MIB, 4 * MIB]
            with pytest.raises(WorkspaceBudgetError):  # (0 left: less than the smallest workspace)
                wsfs.ensure(root, f"{root}/{names[2]}", budget)
        finally:
            unmount_all(root)


@needs_root
def test_under_scope_session_a_workspace_takes_at_most_a_part_of_the_budget(tmp_path: Path) -> None:
    with small_root(tmp_path / "sandboxes", "256m") as root:  # caps of 32 MiB, a budget of 64 MiB
        try:
            session = Budget("main", None, wsbudget.SESSION_PARTS)
            names = [f"s{n}-{'0' * 32}" for n in range(wsbudget.SESSION_PARTS + 1)]
            for name in names[:-1]:  # 16 sessions' workspaces, each a 16th (4 MiB), not 2 of 32 MiB
                assert wsfs.ensure(root, f"{root}/{name}", session)
            assert set(sizes(root, *names[:-1])) == {4 * MIB}
            with pytest.raises(WorkspaceBudgetError):
                wsfs.ensure(root, f"{root}/{names[-1]}", session)
            assert wsfs.ensure(root, f"{root}/a-{'0' * 32}", Budget("ops"))  # scope agent: its one, full size
            assert sizes(root, f"a-{'0' * 32}") == [32 * MIB]
        finally:
            unmount_all(root)


CONFIG = """
[agents.defaults.sandbox]
mode = "all"
backend = "bwrap"
scope = "session"
workspaceRoot = "{root}"
maxWorkspaceBytesPerAgent = {budget}
"""


@needs_root
def test_the_budget_follows_a_config_change(tmp_path: Path, state_dir: Path) -> None:
    with small_root(tmp_path / "sandboxes") as root:
        try:

            def make(budget: int, key: str) -> None:
                config = load_config_text(CONFIG.format(root=root, budget=budget))
                settings = resolve_settings(config, "main")  # (memoised: by what the config says)
                lay = layout(settings, "main", key)
                wsfs.ensure(root, lay.sandbox_workspace, wsbudget.for_scope(settings, lay.scope_key, "main"))

            make(4 * MIB, "agent:main:a")
            make(4 * MIB, "agent:main:b")
            with pytest.raises(WorkspaceBudgetError):
                make(4 * MIB, "agent:main:c")
            make(6 * MIB, "agent:main:c")  # raised: room for one more
            with pytest.raises(WorkspaceBudgetError):
                make(6 * MIB, "agent:main:d")
            with pytest.raises(WorkspaceBudgetError):  # lowered: the ones it has stay, no new one
                make(2 * MIB, "agent:main:d")
        finally:
            unmount_all(root)


def test_the_budget_is_a_config_key_with_a_clear_error_for_bad_values(state_dir: Path) -> None:
    config = load_config_text(
        "[agents.defaults.sandbox]\nmaxWorkspaceBytesPerAgent = 8388608\n"
        '[[agents.list]]\nid = "ops"\n[agents.list.sandbox]\nmaxWorkspaceBytesPerAgent = 4194304\n'
    )
    assert resolve_settings(config, "main").max_workspace_bytes == 8 * MIB
    assert resolve_settings(config, "ops").max_workspace_bytes == 4 * MIB  # per agent
    assert resolve_settings(load_config_text(""), "main").max_workspace_bytes is None  # a share of the disk
    assert (
        admin.explain(config, "ops")["maxWorkspaceBytesPerAgent"] == 4 * MIB
    )  # (what `sandbox explain` shows)
    for bad, said in (("1024", "at least 2097152"), ('"8m"', "expected an integer")):
        with pytest.raises(ConfigError) as exc:
            load_config_text(f"[agents.defaults.sandbox]\nmaxWorkspaceBytesPerAgent = {bad}\n")
        assert "maxWorkspaceBytesPerAgent" in str(exc.value) and said in str(exc.value), exc.value


@needs_root
def test_images_from_before_owners_were_recorded_become_their_scopes_agents(tmp_path: Path) -> None:
    with small_root(tmp_path / "sandboxes") as root:
        try:
            old = f"{root}/s0-{'0' * 32}"
            assert wsfs.ensure(root, old)  # (made by an exechost that recorded no owner)
            images = os.open(f"{root}/.images", os.O_RDONLY | os.O_DIRECTORY)
            try:
                assert wsbudget.owner_of(images, f"s0-{'0' * 32}.img") is None
            finally:
                os.close(images)
            assert wsfs.ensure(root, old, Budget("main"))  # mounted already: adopted all the same
            assert wsfs.ensure(root, f"{root}/s1-{'0' * 32}", Budget("main"))
            with pytest.raises(WorkspaceBudgetError):  # the old one counts now
                wsfs.ensure(root, f"{root}/s2-{'0' * 32}", Budget("main"))
        finally:
            unmount_all(root)


@needs_root
def test_a_pool_spare_becomes_an_agents_only_within_its_budget(tmp_path: Path) -> None:
    with small_root(tmp_path / "sandboxes") as root:
        try:
            main = Budget("main")
            spare = f"{root}/pool.0123456789ab"
            assert wsfs.ensure(root, spare)  # (nobody's while it waits)
            assert wsfs.fits(root, main)
            first = f"{root}/s0-{'0' * 32}"
            os.mkdir(first, 0o700)
            wsfs.move(root, spare, first, main)
            assert wsfs.ensure(root, f"{root}/s1-{'0' * 32}", main)
            assert not wsfs.fits(root, main)
            spare = f"{root}/pool.ba9876543210"
            assert wsfs.ensure(root, spare)
            target = f"{root}/s2-{'0' * 32}"
            os.mkdir(target, 0o700)
            with pytest.raises(WorkspaceBudgetError):
                wsfs.move(root, spare, target, main)
            assert os.path.ismount(spare) and not os.path.ismount(target)  # nothing moved
        finally:
            unmount_all(root)


@needs_root
def test_prune_workspaces_removes_those_of_sandboxes_gone_and_keeps_the_rest(
    tmp_path: Path, state_dir: Path
) -> None:
    with small_root(tmp_path / "sandboxes") as root:
        try:
            config = load_config_text(CONFIG.format(root=root, budget=6 * MIB))  # three of 2 MiB
            settings = resolve_settings(config, "main")
            later = layout(settings, "main", "agent:main:later")
            lays = [layout(settings, "main", f"agent:main:{k}") for k in ("live", "gone", "new")]
            for lay in lays:
                wsfs.ensure(root, lay.sandbox_workspace, wsbudget.for_scope(settings, lay.scope_key, "main"))
            Path(lays[1].sandbox_workspace, "f").write_bytes(b"x" * 100_000)
            Path(root, "notes").mkdir()  # (not a workspace's name: never touched)
            stamp = now_ms()
            old = (time.time() - 3600, time.time() - 3600)
            for lay in lays[:2]:  # the new one was made a moment ago: a sandbox may be starting on it
                os.utime(lay.sandbox_workspace, old)
                os.utime(wsfs.image_path(root, lay.sandbox_workspace), old)
            with pytest.raises(WorkspaceBudgetError):
                wsfs.ensure(
                    root, later.sandbox_workspace, wsbudget.for_scope(settings, later.scope_key, "main")
                )
            Registry().replace(
                RegistryEntry(lays[0].name, lays[0].scope_key, stamp, stamp, "host", None, "bwrap", "main")
            )
            gone = wsprune.prune(config, SandboxManager())
            assert [g.path for g in gone] == [lays[1].sandbox_workspace]
            assert gone[0].size == 2 * MIB and gone[0].disk > 0  # (its budget; its blocks on the disk)
            assert not os.path.lexists(lays[1].sandbox_workspace)
            assert not os.path.exists(wsfs.image_path(root, lays[1].sandbox_workspace))
            assert os.path.ismount(lays[0].sandbox_workspace) and os.path.ismount(lays[2].sandbox_workspace)
            assert Path(root, "notes").is_dir()
            # its budget has room again
            wsfs.ensure(root, later.sandbox_workspace, wsbudget.for_scope(settings, later.scope_key, "main"))
        finally:
            unmount_all(root)


@needs_root
@needs_bwrap
async def test_an_agent_refused_by_its_budget_gets_room_after_the_operator_prunes_workspaces(
    tmp_path: Path, state_dir: Path, bwrap_mgr: SandboxManager, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.config.loader import load_config
    from runner.cli import main

    with small_root(tmp_path / "sandboxes") as root:
        try:
            cfg_path = state_dir / "config.toml"
            cfg_path.write_text(CONFIG.format(root=root, budget=4 * MIB))  # two workspaces of 2 MiB
            config = load_config(cfg_path)
            kept = await prepare_exec(config, "main", "agent:main:kept", None, manager=bwrap_mgr)
            await prepare_exec(config, "main", "agent:main:ended", None, manager=bwrap_mgr)
            with pytest.raises(ToolError, match=r"agent main's sandbox workspaces .* prune --workspaces"):
                await prepare_exec(config, "main", "agent:main:new", None, manager=bwrap_mgr)
            await bwrap_mgr.settle()
            assert admin.recreate(config, session="agent:main:ended", manager=bwrap_mgr)["removed"]
            ws = {
                k: layout(resolve_settings(config, "main"), "main", f"agent:main:{k}").sandbox_workspace
                for k in ("kept", "ended")
            }
            old = (time.time() - 3600, time.time() - 3600)
            for path in ws.values():
                os.utime(path, old)
                os.utime(wsfs.image_path(root, path), old)
            assert main(["sandbox", "prune", "--workspaces", "--config", str(cfg_path)]) == 0
            out = capsys.readouterr().out
            assert f"✓ Removed workspace {ws['ended']} (2097152 bytes of its agent's budget" in out, out
            assert "Pruned 1 workspace(s)" in out and os.path.ismount(ws["kept"]), out
            assert (await run(kept, "echo still"))[1] == "still\n"
            again = await prepare_exec(config, "main", "agent:main:new", None, manager=bwrap_mgr)
            assert (await run(again, "echo made"))[1] == "made\n"  # (in a new 2 MiB workspace)
        finally:
            bwrap.remove_all()
            unmount_all(root)
