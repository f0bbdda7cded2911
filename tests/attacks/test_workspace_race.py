"""Issue 18 §4: the host's writes into a sandbox workspace never follow a link the sandbox swaps in.

The attacker is a sandboxed process: it owns everything below its workspace's mount point and can, in a
tight loop, atomically exchange a directory the host is about to write into with a link to a host directory
(`renameat2(RENAME_EXCHANGE)`). The race tests below run that loop from a host process on the same
directory, which is what the container's bind mount is: the kernel sees the same inode and the same
rename. (The busybox test image has no renameat2 tool; `test_the_race_from_inside_a_real_sandbox` runs
a static racer inside the container when a C compiler is there to build one.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import SandboxManager, beneath, prepare_exec
from engine.sandbox.settings import layout, resolve_settings
from engine.sandbox.workspace import WorkspaceError, ensure_dir, stage_inbound, sync_skills
from engine.sessions.launcher import RunSpec
from tests.engine.sandbox.test_sandbox_docker import run
from tests.helpers.gateway import cli
from tests.helpers.race import exchange_loop
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

RUN_ID = f"race-{os.getpid()}-{secrets.token_hex(3)}"

STAGED = 3000
REFRESHES = 1000
SEEDED = 2000
SEED_SYNCS = 100


@pytest.fixture(params=["openat2", "per-component"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways down a tree: openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and the O_NOFOLLOW walk used
    where the kernel has no openat2."""
    if request.param == "openat2" and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(beneath, "use_openat2", request.param == "openat2")
    return str(request.param)


def _tree(path: Path) -> dict[str, bytes]:
    """Every file under `path` with its content (links listed by target), to compare before and after."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path)
            if os.path.islink(full):
                out[rel] = b"-> " + os.fsencode(os.readlink(full))
            elif os.path.isfile(full):
                out[rel] = Path(full).read_bytes() + b"@" + str(os.lstat(full).st_mtime_ns).encode()
            else:
                out[rel + "/"] = b""
    return out


@pytest.mark.usefixtures("resolver")
def test_stage_never_lands_in_the_swapped_in_host_dir(tmp_path: Path) -> None:
    root, box = tmp_path / "root", tmp_path / "root" / "box"
    stage_inbound(str(root), str(box), "first.txt", b"first")
    inbound, evil = box / "media" / "inbound", box / "media" / "evil"
    decoy = tmp_path / "host-dir"
    decoy.mkdir()
    (decoy / "first.txt").write_bytes(b"host file")
    before = _tree(decoy)
    evil.symlink_to(decoy)
    landed, refused = 0, []
    with exchange_loop(str(inbound), str(evil)):
        for i in range(STAGED):
            try:
                stage_inbound(str(root), str(box), f"f{i}.txt", b"staged")
                landed += 1
            except WorkspaceError as exc:
                refused.append(str(exc))
    assert _tree(decoy) == before, f"{len(_tree(decoy)) - len(before)} staged files landed in the host dir"
    real = evil if inbound.is_symlink() else inbound
    assert len(os.listdir(real)) == landed + 1
    assert all("media/inbound" in text for text in refused)  # a refusal names the path it refused


@pytest.mark.usefixtures("resolver")
def test_skills_refresh_never_replaces_a_host_file(tmp_path: Path) -> None:
    root, agent, box = tmp_path / "root", tmp_path / "agent", tmp_path / "root" / "box"
    (agent / "skills" / "s").mkdir(parents=True)
    source = agent / "skills" / "s" / "SKILL.md"
    source.write_text("the skill")
    sync_skills(str(root), str(agent), str(box))
    real, evil = box / "skills" / "s", box / "skills" / "evil"
    decoy = tmp_path / "host-dir"
    decoy.mkdir()
    (decoy / "SKILL.md").write_text("host file: keep")
    before = _tree(decoy)
    evil.symlink_to(decoy)
    with exchange_loop(str(real), str(evil)):
        for i in range(REFRESHES):
            os.utime(source, ns=(i + 1, (i + 1) * 1_000_000_000))  # changed: every sync copies it again
            # The old code gave up on a swapped dir; what matters is where the bytes went.
            with contextlib.suppress(WorkspaceError, OSError):
                sync_skills(str(root), str(agent), str(box))
    assert _tree(decoy) == before


@pytest.mark.usefixtures("resolver")
def test_skills_seeding_never_creates_files_in_the_swapped_in_host_dir(tmp_path: Path) -> None:
    """First sync of a skill tree into a dir the sandbox swaps for a link to, say, a home directory: a
    skill's `deep/.ssh/authorized_keys` would then be written into the host's `.ssh`."""
    root, agent, box = tmp_path / "root", tmp_path / "agent", tmp_path / "root" / "box"
    src = agent / "skills" / "deep" / ".ssh"
    src.mkdir(parents=True)
    (agent / "skills" / "deep" / "README.md").write_text("deep")
    for i in range(SEEDED):
        (src / f"k{i}").write_text(f"key {i}")
    (src / "authorized_keys").write_text("ssh-ed25519 ATTACKER")
    (box / "skills" / "deep").mkdir(parents=True)  # the sandbox made it, empty
    real, evil = box / "skills" / "deep", box / "skills" / "evil"
    decoy = tmp_path / "home"
    (decoy / ".ssh").mkdir(parents=True)
    (decoy / ".ssh" / "authorized_keys").write_text("ssh-ed25519 OWNER")
    before = _tree(decoy)
    evil.symlink_to(decoy)
    with exchange_loop(str(real), str(evil)):
        for _ in range(SEED_SYNCS):  # each use syncs again: what a swap skipped is tried once more
            with contextlib.suppress(WorkspaceError, OSError):  # the old code gave up half way through
                sync_skills(str(root), str(agent), str(box))
    assert _tree(decoy) == before


@pytest.mark.usefixtures("resolver")
def test_skills_sync_never_reads_through_a_swapped_source_dir(tmp_path: Path) -> None:
    """The other direction: the skills being read can be swapped too (the agent's host commands, or a
    sandbox with the agent workspace mounted, can write there): a host secret is never copied in."""
    root, agent, box = tmp_path / "root", tmp_path / "agent", tmp_path / "root" / "box"
    (agent / "skills" / "s").mkdir(parents=True)
    source = agent / "skills" / "s" / "id_rsa"
    source.write_text("a skill file")
    secret = tmp_path / "home-ssh"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE KEY")
    (agent / "skills" / "evil").symlink_to(secret)
    seen: set[str] = set()
    with exchange_loop(str(agent / "skills" / "s"), str(agent / "skills" / "evil")):
        for i in range(REFRESHES // 2):
            os.utime(source, ns=(i + 1, (i + 1) * 1_000_000_000))
            with contextlib.suppress(WorkspaceError, OSError):
                sync_skills(str(root), str(agent), str(box))
            # What the sandbox could read after this sync (the box side is not raced here).
            seen.update(p.read_text() for p in (box / "skills").rglob("*") if p.is_file())
    assert "a skill file" in seen and "PRIVATE KEY" not in seen


@pytest.fixture
def mgr() -> Iterator[SandboxManager]:
    build_test_image()
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    remove_labelled(RUN_ID)


@pytest.mark.docker
async def test_a_link_left_in_the_workspace_refuses_that_write_and_the_agent_keeps_working(
    mgr: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    agent = "l" + secrets.token_hex(3)
    text = f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    (state_dir / "config.toml").write_text(text)
    cfg = load_config_text(text)
    key = f"agent:{agent}:main"
    lay = layout(resolve_settings(cfg, agent), agent, key)
    skills = Path(lay.agent_workspace) / "skills"
    (skills / "git").mkdir(parents=True)
    (skills / "git" / "SKILL.md").write_text("use git")
    (skills / "top.md").write_text("top")
    decoy = tmp_path / "host-dir"
    decoy.mkdir()
    (decoy / "SKILL.md").write_text("host file: keep")
    before = _tree(decoy)

    sx = await prepare_exec(cfg, agent, key, None, manager=mgr)
    # Inside the sandbox: leave links where the host writes next (the skill's dir, the inbound dir).
    plant = (
        "cat /workspace/skills/git/SKILL.md && rm -rf /workspace/skills/git && "
        f"ln -s {decoy} /workspace/skills/git && mkdir -p /workspace/media && "
        f"ln -s {decoy} /workspace/media/inbound"
    )
    status, out, err = await run(sx, plant)
    assert status[0] == 0 and "use git" in out, err
    (skills / "git" / "SKILL.md").write_text("use git, v2")  # changed: the next use copies it again
    (skills / "top.md").write_text("top, v2")

    again = await prepare_exec(cfg, agent, key, None, manager=mgr)
    refused = [w for w in again.warnings if w.startswith("skills sync: refused")]
    assert refused == [
        "skills sync: refused skills/git: it is a symlink (left by the sandbox?); other files synced"
    ]
    status, out, _ = await run(again, "cat /workspace/skills/top.md")
    assert status[0] == 0 and out == "top, v2"  # the agent keeps working, the other skill is fresh

    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG")
    proc = cli(state_dir, "sandbox", "stage", str(photo), "--agent", agent)
    assert proc.returncode != 0
    assert "refused media/inbound" in proc.stderr + proc.stdout and "symlink" in proc.stderr + proc.stdout
    assert _tree(decoy) == before
    status, out, _ = await run(await prepare_exec(cfg, agent, key, None, manager=mgr), "echo still here")
    assert status[0] == 0 and out == "still here\n"


RACER_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/fs.h>
int main(int argc, char **argv) {
    unsigned long n = 0;
    if (argc != 4) return 2;
    if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE)) {
        perror("renameat2");
        return 1;
    }
    n = 1;
    printf("go\n");
    fflush(stdout);
    for (;;) {
        syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE);
        if ((++n & 1023) == 0 && access(argv[3], F_OK) == 0) return 0; /* even: both back in place */
    }
}
"""


def _static_racer(tmp_path: Path) -> Path:
    """The racer as a static binary for the busybox image, or skip where no C toolchain can build one."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc to build the in-container racer (the host-process race tests still run)")
    src, out = tmp_path / "racer.c", tmp_path / "racer"
    src.write_text(RACER_C)
    proc = subprocess.run([gcc, "-static", "-O2", "-o", str(out), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot build a static racer: {proc.stderr[-300:]}")
    return out


@pytest.mark.docker
async def test_the_race_from_inside_a_real_sandbox(
    mgr: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    """The same exchange loop run by a process inside the container, on its bind-mounted workspace, while
    the host stages files into it and syncs a changing skill: nothing lands in the host dir."""
    racer = _static_racer(tmp_path)
    agent = "r" + secrets.token_hex(3)
    text = f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    cfg = load_config_text(text)
    key = f"agent:{agent}:main"
    settings = resolve_settings(cfg, agent)
    lay = layout(settings, agent, key)
    skill = Path(lay.agent_workspace) / "skills" / "inbound" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("the skill")
    sx = await prepare_exec(cfg, agent, key, None, manager=mgr)
    box = Path(lay.sandbox_workspace)
    stage_inbound(settings.workspace_root, str(box), "first.txt", b"first")
    shutil.copy(racer, box / "racer")
    decoy = tmp_path / "host-dir"
    decoy.mkdir()
    (decoy / "SKILL.md").write_text("host file: keep")
    before = _tree(decoy)
    # Inside the sandbox: a link to the host dir next to each dir the host writes into, and the racer
    # exchanging them (the skill dir `skills/inbound` and `media/inbound` at once, in two racers).
    setup = f"ln -s {decoy} /workspace/media/evil && ln -s {decoy} /workspace/skills/evil && chmod 755 racer"
    status, _, err = await run(sx, setup)
    assert status[0] == 0, err
    command = (
        "/workspace/racer /workspace/media/inbound /workspace/media/evil /workspace/stop & "
        "/workspace/racer /workspace/skills/inbound /workspace/skills/evil /workspace/stop & wait"
    )
    handle = await sx.launcher.spawn(RunSpec(command=command, cwd=sx.cwd, env={}))
    seen = b""
    while seen.count(b"go") < 2:
        chunk = await handle.read()
        assert chunk is not None, f"the racers did not start: {seen!r}"
        seen += chunk[1]

    def host_writes() -> int:
        landed = 0
        for i in range(STAGED):
            with contextlib.suppress(WorkspaceError):
                stage_inbound(settings.workspace_root, str(box), f"f{i}.txt", b"staged")
                landed += 1
            if i % 3 == 0:
                os.utime(skill, ns=(i + 1, (i + 1) * 1_000_000_000))
                with contextlib.suppress(WorkspaceError, OSError):  # the old code gave up on a swap
                    sync_skills(settings.workspace_root, lay.agent_workspace, str(box))
        return landed

    try:
        landed = await asyncio.to_thread(host_writes)
    finally:
        (box / "stop").touch()
        while await handle.read() is not None:
            pass
        await handle.wait()
        handle.close()
    assert _tree(decoy) == before
    assert landed > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another account")
def test_a_workspace_root_another_account_made_first_is_refused(tmp_path: Path) -> None:
    """A workspaceRoot another account made first (in a shared dir) could have the workspaces in it renamed
    by that account between their check and Docker's mount: refused, naming the root, its owner and what
    to do (engine.pathtrust.foreign_hold, the hostWritable judgement: fresh round 16 a)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    root = shared / "sandboxes"
    root.mkdir()
    os.chown(root, 64016, 64016)
    with pytest.raises(WorkspaceError, match=r"owned by uid 64016 .*workspaceRoot"):
        ensure_dir(str(root), str(root / "agent-x"))
    assert not (root / "agent-x").exists()
    os.chown(root, os.geteuid(), os.getegid())  # the gateway's own, under a sticky dir: used
    ensure_dir(str(root), str(root / "agent-x"))
    assert (root / "agent-x").is_dir()
