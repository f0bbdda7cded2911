"""Host runs' pids cgroup (engine.sandbox.bwraplimits.host_pids_group, exechost-hostenter `join`,
hostview.joined): an agent's gateway-host runs count against its own share of the host's processes, beside
its bwrap sandboxes, from their first fork; a run that cannot join runs nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from engine import principals
from engine.commands import hostkeeper, hostoutside, hostview
from engine.sandbox import bwraplimits, bwrapmemory, rambudget
from engine.sandbox.settings import slugify, state_id
from tests.helpers.gateway import connect, gateway, listed, write_config

PIDS = Path("/sys/fs/cgroup/pids")
MEMORY = Path("/sys/fs/cgroup/memory")
needs_memory = pytest.mark.skipif(
    not bwrapmemory.usable(), reason="needs a writable cgroup v1 memory hierarchy"
)
needs_pids = pytest.mark.skipif(
    not (PIDS / "cgroup.procs").exists() or not os.access(PIDS, os.W_OK),
    reason="needs a writable cgroup v1 pids hierarchy",
)
needs_helper = pytest.mark.skipif(
    hostkeeper.helper_path() is None, reason="exechost-hostenter is not built (setup.sh)"
)


def _pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


@needs_pids
def test_an_agents_host_group_sits_in_its_owner_group_with_the_sandboxes_caps(state_dir: Path) -> None:
    group = bwraplimits.host_pids_group("ops")
    try:
        assert group is not None
        install = PIDS / f"exechost-{state_id()}"
        # the owner group a bwrap sandbox of the same agent counts against (engine.sandbox.bwrap.start)
        assert group == install / f"agent-{slugify('ops')}" / bwraplimits.HOST_GROUP
        assert (group / "tasks").is_file()
        assert int((group.parent / "pids.max").read_text()) == _pid_max() // bwraplimits.AGENT_PIDS_SHARE
        assert int((install / "pids.max").read_text()) == _pid_max() // bwraplimits.INSTALL_PIDS_SHARE
        # another agent's runs are another group, under another cap of their own
        other = bwraplimits.host_pids_group("main")
        assert other is not None and other.parent != group.parent
    finally:
        bwraplimits.drop_host_groups()
    assert not (PIDS / f"exechost-{state_id()}").exists(), "an emptied install group was left behind"


@needs_pids
def test_the_sandbox_sweep_keeps_the_host_group_and_a_stop_keeps_it_while_a_run_is_in_it(
    state_dir: Path,
) -> None:
    group = bwraplimits.host_pids_group("ops")
    assert group is not None
    held = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE)
    try:
        (group / "cgroup.procs").write_text(str(held.pid))
        bwraplimits.sweep_cgroups()  # a sandbox start's sweep: the group is no sandbox's, and stays
        assert group.is_dir()
        bwraplimits.drop_host_groups()  # the gateway stops while a held session runs: kept for the next
        assert group.is_dir()
    finally:
        assert held.stdin is not None
        held.stdin.close()
        held.wait()
    bwraplimits.sweep_cgroups()
    assert group.is_dir(), "the sweep removed an (empty) host group a run may be joining"
    bwraplimits.drop_host_groups()
    assert not group.exists()


@needs_pids
@needs_helper
def test_join_moves_the_run_before_it_execs_and_refuses_to_run_uncapped(state_dir: Path) -> None:
    helper = str(hostkeeper.helper_path())
    group = bwraplimits.host_pids_group("ops")
    assert group is not None
    marker = state_dir / "ran"
    try:
        ran = subprocess.run(
            [helper, "join", str(group / "tasks"), "--", "/bin/cat", "/proc/self/cgroup"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        line = next(x for x in ran.stdout.splitlines() if x.split(":")[1:2] == ["pids"])
        assert line.split(":", 2)[2] == "/" + str(group.relative_to(PIDS))
        # a group that is gone: the helper says so and runs nothing
        gone = subprocess.run(
            [helper, "join", str(group.parent / "gone" / "tasks"), "--", "/bin/touch", str(marker)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert gone.returncode == 126 and "cannot join the pids cgroup" in gone.stderr, gone
        assert not marker.exists()
    finally:
        bwraplimits.drop_host_groups()


def test_joined_goes_first_in_the_kept_view_and_after_the_signal_words_of_a_runs_own_bwrap() -> None:
    helper = hostkeeper.helper_path()
    outside = hostoutside.Outside(join_tasks="/sys/fs/cgroup/pids/x/tasks")
    kept = ["/h/exechost-hostenter", "enter", "3", "-", "-", "-", "--"]
    own = [*hostview.head("/usr/bin/bwrap"), "--dev-bind", "/", "/", "--", *hostview.tail()]
    assert hostview.joined(kept, hostoutside.NOTHING_OUTSIDE) == kept  # no group: unchanged
    if helper is None:
        assert hostview.joined(kept, outside) == kept
        return
    join = [helper, "join", "/sys/fs/cgroup/pids/x/tasks", "--"]
    assert hostview.joined(kept, outside) == [*join, *kept]
    wrapped = hostview.joined(own, outside)
    assert wrapped == [*own[:2], *join, *own[2:]]
    assert hostview.is_wrapped(wrapped)  # exit_status still reads bwrap's signals through it


def _pids_line(text: str, controller: str = "pids") -> str:
    found = re.search(rf"\d+:{controller}:(\S+)", text)
    assert found is not None, text
    return found.group(1)


@needs_pids
@needs_helper
@pytest.mark.parametrize(
    "view, params",
    [
        ("bwrap", {}),  # the kept view
        ("bwrap", {"pty": True}),  # a terminal session, made in the run's own /dev/pts
        ("bwrap", {"background": True}),  # held by the session host
        ("none", {}),  # no view: the operator's to drop, the agent's process share is not
    ],
)
async def test_every_host_run_starts_in_its_agents_group(
    state_dir: Path, view: str, params: dict[str, object]
) -> None:
    config = f'[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\nhostView = "{view}"\n'
    write_config(state_dir, config + listed("ops"))
    async with gateway(state_dir):
        principals.mint(state_dir, "ops")  # ops's own connection: the operator's runs are no agent's
        client = await connect(state_dir, operator=False, agent="ops")
        try:
            res = await client.request("exec", {"command": "cat /proc/self/cgroup; echo END", **params})
            text = res["text"]
            if params.get("background"):
                sid = res["details"]["sessionId"]
                for _ in range(30):
                    got = await client.request(
                        "process", {"action": "poll", "sessionId": sid, "timeout": 2000}
                    )
                    text += got["text"]
                    if got["details"]["status"] != "running":
                        break
            expected = bwraplimits.host_pids_group("ops")
            memory = bwraplimits.host_memory_group("ops")
        finally:
            await client.close()
    assert expected is not None
    assert _pids_line(text) == "/" + str(expected.relative_to(PIDS)), text
    if bwrapmemory.usable():  # its share of the RAM too, as its sandboxes' (fresh round 17 a)
        assert memory is not None
        assert _pids_line(text, "memory") == "/" + str(memory.relative_to(MEMORY)), text


@needs_pids
@needs_helper
@pytest.mark.parametrize("view", ["bwrap", "none"])
async def test_the_operators_runs_join_its_own_group_whichever_agent_they_name(
    state_dir: Path, view: str
) -> None:
    """The operator is a principal of its own: its exec names an agent for policy only, and its processes
    count in exechost-operator-<install> (outside the install's group), never in that agent's share."""
    config = f'[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\nhostView = "{view}"\n'
    write_config(state_dir, config)
    async with gateway(state_dir):
        client = await connect(state_dir)
        try:
            res = await client.request(
                "exec", {"command": "cat /proc/self/cgroup; echo END", "agentId": "ops"}
            )
            group = bwraplimits.operator_pids_group()
            assert group is not None
            cap = int((group / "pids.max").read_text())
        finally:
            await client.close()
    assert group == PIDS / f"exechost-operator-{state_id()}"
    assert cap == _pid_max() // bwraplimits.AGENT_PIDS_SHARE
    assert _pids_line(res["text"]) == f"/exechost-operator-{state_id()}", res["text"]
    assert not group.exists()  # removed with the gateway's other emptied host groups
    if bwrapmemory.usable():  # its RAM in a group of its own too, no agent's
        assert _pids_line(res["text"], "memory") == f"/exechost-operator-{state_id()}", res["text"]
        assert not (MEMORY / f"exechost-operator-{state_id()}").exists()


def test_sandbox_explain_says_how_host_runs_are_capped(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    (state_dir / "config.toml").write_text('[tools.exec]\nhost = "gateway"\n')
    assert main(["sandbox", "explain", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["hostView"]["pidsCap"]
    assert shown == bwraplimits.host_pids_cap(hostkeeper.helper_path())
    assert main(["sandbox", "explain"]) == 0
    assert f"processes of an agent's gateway-host commands: {shown}" in capsys.readouterr().out
    # where nothing caps them, it says so, and why
    assert bwraplimits.host_pids_cap(None).startswith("none: exechost-hostenter is not built") or not (
        any(os.access(b, os.W_OK) for b in bwraplimits._cgroup_bases())
    )
    monkeypatch.setattr(bwraplimits, "_cgroup_bases", lambda: ())
    assert bwraplimits.host_pids_cap("/x").startswith("none: no writable cgroup v1 pids hierarchy")


def test_sandbox_explain_says_how_host_runs_ram_is_capped(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    (state_dir / "config.toml").write_text('[tools.exec]\nhost = "gateway"\n')
    assert main(["sandbox", "explain", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["hostView"]["memoryCap"]
    assert shown == bwraplimits.host_memory_cap(hostkeeper.helper_path())
    assert main(["sandbox", "explain"]) == 0
    assert f"RAM of an agent's gateway-host commands: {shown}" in capsys.readouterr().out
    assert bwraplimits.host_memory_cap(None).startswith("none: exechost-hostenter is not built") or not (
        bwrapmemory.usable()
    )
    monkeypatch.setattr(bwrapmemory, "usable", lambda: False)
    assert bwraplimits.host_memory_cap("/x").startswith("none: no writable cgroup v1 memory hierarchy")


@needs_memory
def test_an_agents_host_memory_group_sits_in_its_owner_group_under_its_share(state_dir: Path) -> None:
    """The memory group an agent's host runs join: in the owner group its bwrap sandboxes' memory groups
    are in (bwrapmemory), that and the run's own capped at the agent's share, the install's at its own;
    another agent's is another; the operator's is outside the install's; a stop removes the emptied ones."""
    group = bwraplimits.host_memory_group("ops")
    operator = bwraplimits.operator_memory_group()
    try:
        assert group is not None and operator is not None
        install = MEMORY / f"exechost-{state_id()}"
        assert group == install / f"agent-{slugify('ops')}" / bwraplimits.HOST_GROUP
        assert (group / "tasks").is_file()
        share = rambudget.mem_total() // rambudget.AGENT_MEMORY_SHARE
        for capped, cap in (
            (group, share),
            (group.parent, share),
            (install, rambudget.mem_total() // rambudget.INSTALL_MEMORY_SHARE),
            (operator, share),
        ):
            # (the kernel rounds a limit down to whole pages)
            assert cap - 4096 < int((capped / "memory.limit_in_bytes").read_text()) <= cap, capped
        other = bwraplimits.host_memory_group("main")
        assert other is not None and other.parent != group.parent
        assert operator.parent == MEMORY and install not in operator.parents
    finally:
        bwraplimits.drop_host_groups()
    assert not (MEMORY / f"exechost-{state_id()}").exists(), "an emptied install group was left behind"
    assert not operator.exists()


def test_joined_joins_the_memory_group_right_after_the_pids_one() -> None:
    helper = hostkeeper.helper_path()
    outside = hostoutside.Outside(
        join_tasks="/sys/fs/cgroup/pids/x/tasks", join_memory="/sys/fs/cgroup/memory/x/tasks"
    )
    kept = ["/h/exechost-hostenter", "enter", "3", "-", "-", "-", "--"]
    if helper is None:
        assert hostview.joined(kept, outside) == kept
        return
    pids = [helper, "join", "/sys/fs/cgroup/pids/x/tasks", "--"]
    memory = [helper, "join", "/sys/fs/cgroup/memory/x/tasks", "--"]
    assert hostview.joined(kept, outside) == [*pids, *memory, *kept]


@needs_pids
@needs_helper
def test_a_revoke_kills_every_process_of_the_agents_host_runs_and_no_other(state_dir: Path) -> None:
    """kill_host_group (agents.revoke): a run's double-forked child is in the group as its parent was,
    so it dies too; another agent's run is untouched, and the group's cap is what it was."""
    helper = hostkeeper.helper_path()
    assert helper is not None
    groups = {a: bwraplimits.host_pids_group(a) for a in ("ops", "main")}
    assert all(groups.values())
    daemon = "sleep 300 </dev/null >/dev/null 2>&1 & exec sleep 300"  # a child left behind, and the run
    runs = {
        a: subprocess.Popen([helper, "join", str(g / "tasks"), "--", "/bin/sh", "-c", daemon])
        for a, g in groups.items()
        if g is not None
    }
    try:
        ops = groups["ops"]
        assert ops is not None
        cap = (ops / "pids.max").read_text()
        procs = ops / "cgroup.procs"
        deadline = time.monotonic() + 30
        while len(procs.read_text().split()) < 2:  # the run and its child have joined
            assert time.monotonic() < deadline, procs.read_text()
            os.sched_yield()
        assert bwraplimits.kill_host_group("ops") >= 2
        assert runs["ops"].wait(timeout=30) == -9
        assert procs.read_text().split() == [] and (ops / "pids.max").read_text() == cap
        assert runs["main"].poll() is None, "another agent's run was killed"
    finally:
        for proc in runs.values():
            proc.kill()
            proc.wait()
        bwraplimits.kill_host_group("main")
        bwraplimits.drop_host_groups()
