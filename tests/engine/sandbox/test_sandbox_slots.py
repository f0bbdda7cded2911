"""Ready command slots (engine.sandbox.slots): what a command sees is what a fresh start gives it, the
profile is read per command, the pool refills, and idle or orphaned slots leave nothing behind."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.sandbox import SandboxExec, SandboxManager, prepare_exec, slots
from engine.sandbox import supervisor as sv
from engine.sandbox.launcher import SandboxLauncher
from engine.sandbox.settings import agent_workspace_dir
from engine.sessions import RunSpec
from tests.engine.sandbox.test_sandbox_docker import config, run
from tests.helpers.sandbox import build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"slot-{os.getpid()}-{secrets.token_hex(3)}"

# What a command can observe of how it was started: env, open fds, signal dispositions, umask, $0, $-,
# SHLVL, its session, stdin, and the message of a failing cd (which names the spec).
PROBE = (
    'env | sort; ls /proc/$$/fd; grep -E "^Sig(Ign|Blk)" /proc/$$/status; umask; echo "$0|$-|$SHLVL"; '
    'ps -o pid,sid,args | grep "^ *$$ " | { read -r p s _; [ "$p" = "$s" ] && echo leader; }; '
    "cat; echo stdin=$?"
)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield build_test_image()
    remove_labelled(RUN_ID)


@pytest.fixture
def mgr(image: str) -> Iterator[SandboxManager]:
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    remove_labelled(RUN_ID)


@pytest.fixture
def agent() -> str:
    return "s" + secrets.token_hex(4)


def pool(sx: SandboxExec) -> slots.SlotPool:
    return slots.pool_for(sv.Channel(sx.container))


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def without_slots(sx: SandboxExec) -> SandboxLauncher:
    """The same launcher on the path a container with an older supervisor takes (run.sh, no slot)."""
    launcher = sx.launcher
    clone = object.__new__(SandboxLauncher)
    clone.__dict__.update(launcher.__dict__)
    clone._slots = False
    return clone


def normalised(text: str) -> str:
    text = re.sub(r"/x/[0-9a-f]{16}/", "/x/ID/", text)
    return re.sub(r"EXECHOST_SESSION=[0-9a-f]+", "EXECHOST_SESSION=M", text)


async def test_a_slot_command_sees_what_a_fresh_start_gives(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    await run(sx, "true")
    await until(lambda: pool(sx).counts[0] == slots.TARGET, "ready slots")
    results = []
    for launcher in (sx.launcher, without_slots(sx)):
        for stdin in (False, True):
            handle = await launcher.spawn(RunSpec(command=PROBE, cwd=sx.cwd, env={"FOO": "bar"}, stdin=stdin))
            if stdin:
                await handle.write(b"typed\n")
                await handle.close_stdin()
            out = b""
            while (chunk := await handle.read()) is not None:
                out += chunk[1]
            results.append((normalised(out.decode()), await handle.wait()))
            handle.close()
        bad_cwd = await launcher.spawn(RunSpec(command="pwd", cwd="/workspace/none", env={}))
        text = b""
        while (chunk := await bad_cwd.read()) is not None:
            text += chunk[1]
        results.append((normalised(text.decode()), await bad_cwd.wait()))
        bad_cwd.close()
    slot_runs, fresh_runs = results[:3], results[3:]
    assert slot_runs == fresh_runs
    plain, typed, cd = slot_runs
    assert "FOO=bar" in plain[0] and "SHLVL=4" in plain[0] and "leader" in plain[0]
    assert "\n9\n" not in plain[0]  # the status FIFO is not the command's (run.sh used to leak it)
    assert plain[0].endswith("stdin=0\n") and typed[0].endswith("typed\nstdin=0\n")
    assert cd == (
        "/.exechost/x/ID/spec: cd: line 1: can't cd to /workspace/none: No such file or directory\n",
        (126, None),
    )


async def test_ready_slots_are_taken_and_refilled(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    assert (await run(sx, "echo first"))[1] == "first\n"  # a fresh slot: none was ready
    await until(lambda: pool(sx).counts == (slots.TARGET, 0), "the pool filled")
    ready = set(pool(sx)._ready)
    handle = await sx.launcher.spawn(RunSpec(command="echo $$", cwd=sx.cwd, env={}))
    used = [s for s in ready if s.pid == handle.pid]  # started at once: its pid known before the command
    out = b""
    while (chunk := await handle.read()) is not None:
        out += chunk[1]
    assert out == f"{handle.pid}\n".encode() and await handle.wait() == (0, None)
    handle.close()
    await until(lambda: pool(sx).counts == (slots.TARGET, 0), "the pool refilled")
    assert len(used) == 1 and used[0] not in pool(sx)._ready  # a used slot is never used again


async def test_the_profile_is_read_per_command_even_in_a_slot_made_before_it_changed(
    mgr: SandboxManager, agent: str
) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    profile = Path(sx.workspace_dir) / ".profile"  # HOME is the workspace: ~/.profile is read by sh -l
    await run(sx, "true")  # the pool fills after a first take
    for value in ("one", "two", "three"):
        await until(lambda: pool(sx).counts[0] == slots.TARGET, "ready slots")  # made before the change
        profile.write_text(f"export FROM_PROFILE={value}\ncd /tmp\n")
        assert (await run(sx, 'echo "$FROM_PROFILE $PWD"'))[1] == f"{value} /tmp\n"
    profile.unlink()
    assert (await run(sx, 'echo "${FROM_PROFILE:-unset} $PWD"'))[1] == "unset /workspace\n"


async def test_concurrent_commands_beyond_the_pool_still_each_get_their_own(
    mgr: SandboxManager, agent: str
) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    await run(sx, "true")
    await until(lambda: pool(sx).counts[0] == slots.TARGET, "ready slots")

    async def one(i: int) -> tuple[bytes, tuple[int | None, str | None]]:
        handle = await sx.launcher.spawn(
            RunSpec(command="read x; echo $x-$$", cwd=sx.cwd, env={}, stdin=True)
        )
        await handle.write(f"in{i}\n".encode())
        await handle.close_stdin()
        out = b""
        while (chunk := await handle.read()) is not None:
            out += chunk[1]
        status = await handle.wait()
        handle.close()
        return out, status

    results = await asyncio.gather(*(one(i) for i in range(slots.TARGET + 3)))  # ready, then fresh ones
    outs = [out.decode().split("-") for out, _ in results]
    assert [o[0] for o in outs] == [f"in{i}" for i in range(slots.TARGET + 3)]
    assert len({o[1] for o in outs}) == len(outs) and {s for _, s in results} == {(0, None)}


def container_view(container: str) -> tuple[list[str], list[str]]:
    """(the container's waiting slot processes' args, the names in its x/)."""
    ps = subprocess.run(
        ["docker", "exec", container, "sh", "-c", "ps -o args | grep '[s]lot.sh'; echo --; ls /.exechost/x"],
        capture_output=True,
        text=True,
        check=True,
    )
    procs, _, names = ps.stdout.partition("--\n")
    return procs.splitlines(), names.split()


async def test_dropped_slots_leave_the_container(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    await run(sx, "true")
    await until(lambda: pool(sx).counts[0] == slots.TARGET, "ready slots")
    ids = {s.exec_id for s in pool(sx)._ready}
    procs, names = container_view(sx.container)
    assert len(procs) == slots.TARGET and ids <= set(names)
    pool(sx).drop()  # what IDLE_SEC without a command does
    for _ in range(500):
        procs, names = container_view(sx.container)
        if not procs and not ids & set(names):
            break
        await asyncio.sleep(0.02)
    assert procs == [] and not ids & set(names)


def test_a_gateway_that_exits_leaves_no_slot_behind(image: str, state_dir: Path) -> None:
    """Its slots' processes see EOF on their in FIFO once it is gone, and leave; their dirs (the host's
    alone to remove: the control dir is read-only inside) go at the next gateway's first use (the same
    script again: a process of its own, started after the first ended)."""
    agent = "g" + secrets.token_hex(4)
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from engine.sandbox import SandboxManager, prepare_exec, slots
        from engine.sandbox import supervisor as sv
        from tests.engine.sandbox.test_sandbox_docker import config, run

        async def main():
            mgr = SandboxManager(extra_labels={{"exechost.test": "{RUN_ID}"}})
            sx = await prepare_exec(config(), "{agent}", "s", None, manager=mgr)
            await run(sx, "true")
            pool = slots.pool_for(sv.Channel(sx.container))
            while pool.counts[0] < slots.TARGET:
                await asyncio.sleep(0.01)
            print(sx.container, *(s.exec_id for s in pool._ready), flush=True)
            os._exit(0)  # as a crash would: nothing is closed in order

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}

    def gateway() -> tuple[str, list[str]]:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        container, *ids = done.stdout.split()
        assert len(ids) == slots.TARGET
        return container, ids

    container, ids = gateway()
    for _ in range(500):
        procs, names = container_view(container)
        if not procs:
            break
        time.sleep(0.02)
    assert procs == [] and set(ids) <= set(names)
    again, _ = gateway()
    assert again == container
    assert not set(ids) & set(container_view(container)[1])


async def test_skills_are_still_mirrored_on_each_warm_exec(mgr: SandboxManager, agent: str) -> None:
    skills = Path(agent_workspace_dir(agent)) / "skills"
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    assert (await run(sx, "ls skills 2>&1 || echo none"))[1].endswith("none\n")
    skills.mkdir(parents=True)
    (skills / "a.md").write_text("first\n")
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    (skills / "b.md").write_text("second\n")
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    assert (await run(sx, "cat skills/a.md skills/b.md"))[1] == "first\nsecond\n"


async def test_idle_slots_are_capped_across_containers(
    mgr: SandboxManager, agent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "MAX_IDLE", 3)
    boxes = [await prepare_exec(config(), agent + str(i), "s", None, manager=mgr) for i in range(3)]
    for _ in range(2):
        for sx in boxes:
            assert (await run(sx, "echo ok"))[1] == "ok\n"
    await asyncio.sleep(0.2)
    assert sum(sum(pool(sx).counts) for sx in boxes) <= 3
