"""Issue 9 items 11 and 12: one sandbox redirecting another's workspace; containers shared across installs."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config.loader import load_config_text
from engine.results import ToolError
from engine.sandbox import SandboxManager, docker_ops, prepare_exec
from engine.sandbox.settings import layout, resolve_settings
from tests.engine.sandbox.test_sandbox_docker import run
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled, unmount_workspace

pytestmark = pytest.mark.docker

RUN_ID = f"att-{os.getpid()}-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield build_test_image()
    remove_labelled(RUN_ID)


@pytest.fixture
def mgr(image: str) -> Iterator[SandboxManager]:
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    remove_labelled(RUN_ID)


def config(attacker: str) -> Any:
    return load_config_text(
        '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
        f'[[agents.list]]\nid = "{attacker}"\nsandbox.scope = "shared"\n'
    )


async def test_a_shared_sandbox_cannot_redirect_another_agents_workspace(
    mgr: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    victim, attacker = "v" + secrets.token_hex(3), "a" + secrets.token_hex(3)
    cfg = config(attacker)
    host_dir = tmp_path / "host-secrets"
    host_dir.mkdir()
    (host_dir / "id_rsa").write_text("PRIVATE")
    sx = await prepare_exec(cfg, victim, f"agent:{victim}:main", None, manager=mgr)
    victim_dir = layout(resolve_settings(cfg, victim), victim, f"agent:{victim}:main").sandbox_workspace
    assert os.path.isdir(victim_dir)
    mgr.remove_runtime(sx.container)  # the victim's next use creates a new container

    shared = await prepare_exec(cfg, attacker, f"agent:{attacker}:main", None, manager=mgr)
    name = os.path.basename(victim_dir)
    # The shared container must not see the other scopes' workspaces at all...
    _, listing, _ = await run(shared, "ls -a /workspace; ls -a /workspace/..")
    assert name not in listing
    # ...so its attempts to swap the victim's dir for a link to a host path change nothing on the host.
    await run(shared, f"rm -rf /workspace/{name} /workspace/../{name}; ln -s {host_dir} /workspace/{name}")
    assert os.path.isdir(victim_dir) and not os.path.islink(victim_dir)

    again = await prepare_exec(cfg, victim, f"agent:{victim}:main", None, manager=mgr)
    status, out, _ = await run(again, "cat /workspace/id_rsa 2>&1; echo planted > /workspace/planted")
    assert "PRIVATE" not in out and status[0] == 0
    assert not (host_dir / "planted").exists()


async def test_a_workspace_replaced_by_a_link_is_refused_before_create(
    mgr: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    """Defence in depth: whatever swapped it, a workspace that is a link is never mounted."""
    victim = "v" + secrets.token_hex(3)
    cfg = config("nobody")
    sx = await prepare_exec(cfg, victim, f"agent:{victim}:main", None, manager=mgr)
    victim_dir = Path(layout(resolve_settings(cfg, victim), victim, f"agent:{victim}:main").sandbox_workspace)
    mgr.remove_runtime(sx.container)
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    unmount_workspace(victim_dir)  # (mounted, it cannot be renamed at all: engine.sandbox.wsfs)
    os.rename(victim_dir, tmp_path / "moved-away")
    victim_dir.symlink_to(host_dir)
    with pytest.raises(ToolError, match="is a link"):
        await prepare_exec(cfg, victim, f"agent:{victim}:main", None, manager=mgr)
    assert list(host_dir.iterdir()) == []
    assert docker_ops.inspect(sx.container).exists is False


async def test_two_installs_never_share_or_touch_each_others_containers(
    mgr: SandboxManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\nscope = "agent"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    states = []
    for name in ("one", "two"):
        state = tmp_path / name
        state.mkdir(mode=0o700)
        states.append(state)
    containers = []
    for state in states:
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        sx = await prepare_exec(
            cfg,
            "main",
            "agent:main:main",
            None,
            manager=SandboxManager(extra_labels={"exechost.test": RUN_ID}),
        )
        status, out, _ = await run(sx, "echo ok")
        assert status[0] == 0 and out.strip() == "ok"  # the second install's sandbox starts and runs
        containers.append(sx.container)
    assert containers[0] != containers[1]
    # `sandbox list` / recreate / prune of install two see only install two's container.
    rows = SandboxManager().list_runtimes(cfg)
    assert [r["containerName"] for r in rows] == [containers[1]]
    SandboxManager().remove_runtime(containers[1])
    assert docker_ops.inspect(containers[0]).running
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(states[0]))
    assert [r["containerName"] for r in SandboxManager().list_runtimes(cfg)] == [containers[0]]
