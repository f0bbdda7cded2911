"""Fresh round 17 c: state, crashes and egress — what the gateway keeps on disk and across restarts, judged
by who may write it, and the egress proxy's names (classes 7, 2, 6 on durable state; 1 and 4 on egress)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config
from tests.helpers.pending import stored_asks

NOBODY = 65534


def as_nobody(script: str) -> None:
    """Run `script` (sh) as another local account: what it does, that account could do."""
    subprocess.run(
        ["/bin/sh", "-ec", script], user=NOBODY, group=NOBODY, extra_groups=[], check=True, cwd="/"
    )


def q(path: object) -> str:
    return shlex.quote(str(path))


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another account needs root to stand in for it")


@needs_root
async def test_a_link_on_the_state_dirs_way_owned_by_another_account_is_repointed_after_adoption(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's state dir is named through a link in a sticky world-writable dir (a /tmp-like dir)
    that another account made: `judge` resolves it (the real dir is root's, in root's dirs) and the
    gateway adopts it. That account re-points its link at a dir of its own: every path the running
    gateway opens goes there (its tokens, `sandbox-bin/` whose helpers a stamp file beside them vouches
    for, `egress/`), so the operator is locked out of their own gateway at once; a forwarder planted with
    its stamp there (the source's digest is public) is what the next agent's first host run starts as
    root, when the link is moved for the moment between that run's proof check and its netkeep's exec."""
    root = state_dir.parent
    os.chmod(root, 0o755)  # traversable, not writable by others: judge accepts it
    write_config(state_dir, FULL)
    pub = root / "pub"
    pub.mkdir()
    os.chmod(pub, 0o1777)  # sticky and world-writable, as /tmp
    evil = pub / "evil"
    # The other account's link, to the operator's real (recorded) state dir's parent.
    as_nobody(f"ln -s {q(root)} {q(pub / 'l')}")
    named = pub / "l" / "s"
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(named))
    async with gateway(named):
        client = await connect(named)  # the operator's client, connected before the move
        try:
            assert (await client.request("status"))["pid"] == os.getpid()
            # the other account: a dir of its own with the operator's config linked in (still root's
            # file, so the gateway's policy reads as before), and its link moved there
            as_nobody(
                f"mkdir -p {q(evil / 's')}; chmod 777 {q(evil)}\n"
                f"ln -s {q(state_dir / 'config.toml')} {q(evil / 's' / 'config.toml')}\n"
                f"ln -s {q(evil)} {q(pub / 'l2')}; mv -T {q(pub / 'l2')} {q(pub / 'l')}\n"
            )
            assert (await client.request("status"))["pid"] == os.getpid()
        finally:
            await client.close()


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A filesystem of `size` at `where` (root only): what a full disk looks like, deterministically."""
    where.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@needs_root
async def test_class7_an_approved_run_that_fills_the_disk_and_is_removed_never_runs_again(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Held.) An allow-once run fills the filesystem the state dir is on (through a hostWritable dir
    there, as a home is), and while it still runs the agent files another ask whose journal line is
    longer than the page the journal ends in (its append fills that page and fails); the run ends, the
    agent removes its session (`process remove`: its files go), the disk is freed and the gateway
    restarts. The run's `starting` note was settled in the journal right after the spawn (a detached
    run's note is `running` then), before anything the command did, so nothing runs a second time."""
    with small_tmpfs(state_dir.parent / "t", "6m") as fs:
        state, work = fs / "s", fs / "w"
        work.mkdir()
        count, fill, gate = work / "count", work / "fill", work / "gate"
        os.mkfifo(gate)
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        state.mkdir(mode=0o700)
        write_config(state, ALLOWLIST + f'hostWritable = ["{work}"]\n')
        command = f"echo ran >> {count}; head -c 64M /dev/zero > {fill}; cat {gate}"
        async with gateway(state):
            agent = await connect(state, "agent", operator=False)
            operator = await connect(state, "op")
            try:
                asked = await agent.request("exec", {"command": command, "workdir": str(work)})
                aid = asked["details"]["approvalId"]
                await operator.request("approve", {"id": aid, "decision": "allow-once"})
                await wait_until(lambda: os.statvfs(fs).f_bavail == 0 and count.exists(), timeout=20)
                with contextlib.suppress(Exception):  # its answer does not matter, its journal line does
                    await agent.request("exec", {"command": "echo " + "x" * 6000, "workdir": str(work)})
                with open(gate, "w") as g:  # the approved run ends now
                    g.write("done\n")

                async def run_over() -> dict[str, Any] | None:
                    got = await operator.request("approvals.status", {"approvalId": aid})
                    run = got["details"].get("run") or {}
                    return run if run.get("status") not in (None, "starting", "running") else None

                run = await wait_until(run_over, timeout=20)
                await agent.request("process", {"action": "remove", "sessionId": run["sessionId"]})
            finally:
                await agent.close()
                await operator.close()
        fill.unlink()
        async with gateway(state):
            operator = await connect(state, "op")
            try:
                await wait_until(lambda: not stored_asks(state), timeout=20)
                got = await operator.request("approvals.status", {"approvalId": aid})
                assert (got["details"].get("run") or {}).get("status") not in ("starting", "running")
            finally:
                await operator.close()
        assert count.read_text() == "ran\n", "the approved command ran twice"


@needs_root
async def test_class7_a_foreground_approved_run_whose_end_was_not_saved_runs_again(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An allow-once run the caller waits for (an approver is attached): its `starting` note reaches the
    pending journal, then the command fills the filesystem the state dir is on (through a hostWritable
    dir there, as a home is). While it runs, the agent files another ask whose journal line is longer
    than the room left in the journal's last page: that append fills the page and fails. The run ends:
    its settled line finds no room and is not saved ("a write that fails counts as done"; the run's
    result was already returned). The disk is freed (the agent's own file); at the next start the
    journal says "starting" and the approved-once command runs a second time."""
    with small_tmpfs(state_dir.parent / "t", "6m") as fs:
        state, work = fs / "s", fs / "w"
        work.mkdir()
        fill, gate, runs = work / "fill", work / "gate", work / "runs"
        journal = state / "pending-approvals.json.journal"
        os.mkfifo(gate)
        runs.mkdir()  # one file per run of the approved command
        cwd = work / "cwd"  # where it runs: nothing it does changes what it was approved with
        cwd.mkdir()
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
        monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # as the daemon runs them: in the session host
        state.mkdir(mode=0o700)
        write_config(state, ALLOWLIST + f'hostWritable = ["{work}"]\n')
        command = (
            f"mktemp -p {runs} >/dev/null; head -c 64M /dev/zero > {fill} 2>/dev/null; echo end > {gate}"
        )
        async with gateway(state) as server:
            agent = await connect(state, "agent", operator=False)
            other = await connect(state, "agent2", operator=False)
            operator = await connect(state, "op")
            waiting: list[asyncio.Future[Any]] = []
            try:
                await operator.request("approvals.attach", {})
                run = asyncio.ensure_future(agent.request("exec", {"command": command, "workdir": str(cwd)}))
                waiting.append(run)
                pending = await wait_until(lambda: _pending(operator), timeout=20)
                aid = pending[0]["id"]
                await operator.request("approve", {"id": aid, "decision": "allow-once"})
                await wait_until(lambda: os.statvfs(fs).f_bavail == 0 and any(runs.iterdir()), timeout=20)
                before = journal.stat().st_size
                # a long ask: its journal line fills the journal's last page, and its append fails
                long = {"command": "echo " + "x" * 6000, "workdir": str(cwd)}
                waiting.append(asyncio.ensure_future(other.request("exec", long)))
                await wait_until(
                    lambda: journal.stat().st_size > before and journal.stat().st_size % 4096 == 0
                )
                await server.services.journal.flush()  # what B's ask queued is written (or failed)
                top_up(fill)  # whatever a failed write gave back meanwhile is the agent's file's again
                with open(gate) as g:  # the approved run ends now
                    g.read()
                assert (await run)["details"]["status"] == "completed"
            finally:
                for task in waiting:
                    task.cancel()
                for client in (agent, other, operator):
                    await client.close()
        fill.unlink()
        async with gateway(state):
            operator = await connect(state, "op")
            try:

                async def over() -> bool:
                    got = await operator.request("approvals.status", {"approvalId": aid})
                    final = (got["details"].get("run") or {}).get("status") not in (
                        None,
                        "starting",
                        "running",
                    )
                    return final or len(list(runs.iterdir())) > 1

                await wait_until(over, timeout=20)
                assert len(list(runs.iterdir())) == 1, "the approved-once command ran a second time"
            finally:
                await operator.close()
                with contextlib.suppress(OSError):  # a second run waits to write its end: let it
                    fd = os.open(gate, os.O_RDONLY | os.O_NONBLOCK)
                    os.close(fd)


def top_up(path: Path) -> None:
    """Append to `path` until its filesystem is full."""
    with contextlib.suppress(OSError), open(path, "ab", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)


async def _pending(operator: Any) -> list[dict[str, Any]]:
    got = await operator.request("approvals.pending", {})
    return list(got.get("approvals") or [])
