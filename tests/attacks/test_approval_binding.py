"""Issue 9 items 1, 5–7, 17: what runs is exactly what was matched or approved, and no more."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.errors import ExecHostError
from engine.protocol.client import ControlClient
from tests.attacks.harness import ALLOWLIST, attempt, refused, tool
from tests.helpers.gateway import cli, connect, gateway, wait_until, write_config


async def _event(client: ControlClient, key: str, prefix: str) -> str:
    async def hit() -> str | None:
        events = (await client.request("events", {"sessionKey": key}))["events"]
        return next((e["text"] for e in events if e["text"].startswith(prefix)), None)

    text: str = await wait_until(hit)
    return text


@pytest.mark.skipif(not os.path.exists("/usr/bin/xzcat"), reason="needs xz-utils")
async def test_pinning_keeps_the_name_a_multicall_binary_dispatches_on(
    state_dir: Path, tmp_path: Path
) -> None:
    """Item 1: allowlisting /usr/bin/xzcat ran `/usr/bin/xz FILE`, which compressed and deleted FILE."""
    data = tmp_path / "data.txt"
    data.write_text("keep me\n")
    details = await attempt(state_dir, f"xzcat {data}", allow=[("/usr/bin/xzcat", None)])
    # xzcat refuses a file that is not .xz; xz would have compressed it to data.txt.xz and deleted it.
    assert data.read_text() == "keep me\n" and not (tmp_path / "data.txt.xz").exists(), details


@pytest.mark.skipif(not os.path.exists("/usr/bin/xz"), reason="needs xz-utils")
async def test_a_literal_pattern_does_not_allow_the_other_names_of_its_file(
    state_dir: Path, tmp_path: Path
) -> None:
    """Item 1: a literal pattern matched every alias of the same inode (`xzcat` let `xz`, `unxz` through)."""
    data = tmp_path / "data.txt"
    data.write_text("keep me\n")
    for command in (f"xz {data}", f"unxz {data}", f"/usr/bin/xz {data}"):
        details = await attempt(state_dir, command, allow=[("/usr/bin/xzcat", None)])
        assert refused(details), (command, details)
    assert data.read_text() == "keep me\n"


@pytest.mark.skipif(not os.path.exists("/usr/bin/rview"), reason="needs vim")
async def test_rview_is_not_run_as_vim(state_dir: Path, tmp_path: Path) -> None:
    """Item 1: allowlisting /usr/bin/rview ran `vim.basic -es '+!…'` (rview forbids shell escapes)."""
    marker = tmp_path / "pwned"
    await attempt(
        state_dir, f"rview -es '+!touch {marker}' '+q!'", allow=[("/usr/bin/rview", None)], timeout=20
    )
    assert not marker.exists()


async def test_approval_runs_what_was_shown_not_a_repointed_link(state_dir: Path, tmp_path: Path) -> None:
    """Item 5: `exec -- ./tool` (tool → /usr/bin/date) showed /usr/bin/date; after re-pointing the link and
    `approve … allow-always`, the new target ran."""
    marker = tmp_path / "pwned"
    evil = tool(tmp_path / "evil", f"#!/bin/sh\ntouch {marker}\n")
    link = tmp_path / "tool"
    link.symlink_to("/usr/bin/date")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request("exec", {"command": "./tool", "workdir": str(tmp_path), "sessionKey": "a"})
        d = res["details"]
        assert d["status"] == "approval-pending"
        shown = (await agent.request("approvals.pending"))["approvals"][0]["segments"][0]["resolvedPath"]
        assert shown == "/usr/bin/date"
        link.unlink()
        link.symlink_to(evil)
        operator = await connect(state_dir, "operator")
        await operator.request("approve", {"id": d["approvalId"], "decision": "allow-always"})
        text = await _event(agent, "a", "Exec denied")
        assert "changed since it was approved" in text
        await agent.close()
        await operator.close()
    assert not marker.exists()


async def test_allowlisted_link_repointed_after_decision_is_refused(state_dir: Path, tmp_path: Path) -> None:
    """Item 5: the pinned path is re-resolved just before spawning and refused if it changed."""
    from engine.commands.allowlist import identity, identity_problem
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate

    target = tool(tmp_path / "real")
    link = tmp_path / "bin" / "t"
    link.parent.mkdir()
    link.symlink_to(target)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", str(link))
    # `real` vouched for as taking no code from its (writable) tree, or the allowlist would not suffice.
    config = load_config_text(ALLOWLIST + 'treeSafe = ["real"]\n')
    d = evaluate(str(link), config=config, store=store, cwd=str(tmp_path))
    assert d.verdict == "allow" and identity_problem(d.identity) is None
    link.unlink()
    link.symlink_to(tool(tmp_path / "other"))
    assert "changed since it was approved" in (identity_problem(d.identity) or "")
    assert identity is not None


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
async def test_allow_always_for_git_saves_the_command_not_git(state_dir: Path, tmp_path: Path) -> None:
    """Item 6: always-approving `git status -s` saved /usr/bin/git; `git -c alias.x='!…' x` then ran."""
    marker = tmp_path / "pwned"
    os.system(f"git init -q {tmp_path}")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request(
            "exec", {"command": "git status -s", "workdir": str(tmp_path), "sessionKey": "g"}
        )
        d = res["details"]
        patterns = (await agent.request("approvals.pending"))["approvals"][0]["allowAlwaysPatterns"]
        assert patterns and all(p.startswith("=command:") for p in patterns), patterns
        await agent.request("approve", {"id": d["approvalId"], "decision": "allow-always"})
        await _event(agent, "g", "Exec finished")
        again = await agent.request(
            "exec",
            {"command": f"git -c 'alias.x=!touch {marker}' x", "workdir": str(tmp_path), "sessionKey": "g"},
        )
        assert again["details"]["status"] == "approval-pending"
        same = await agent.request(
            "exec", {"command": "git status -s", "workdir": str(tmp_path), "sessionKey": "g"}
        )
        assert same["details"]["status"] == "completed"  # the approved command itself stays approved
        await agent.close()
    assert not marker.exists()
    # Every block's entries (the operator's own allow-always is filed under its own key, not main's).
    blocks = ApprovalsStore(state_dir / "exec-approvals.json").load().agents.values()
    saved = [e.pattern for block in blocks for e in block.allowlist]
    assert saved  # the allow-always saved something: what it saved is checked below
    assert "/usr/bin/git" not in saved


async def test_wildcard_agent_is_refused(state_dir: Path, tmp_path: Path) -> None:
    """Item 6: `exec --agent '*'` then allow-always wrote to `agents.*`, i.e. for every agent."""
    for agent in ("*", "a*", "main\n", "../x", "a b"):
        with pytest.raises(ExecHostError, match="invalid agent id"):
            await attempt(state_dir, "true", agent=agent)
    assert "*" not in ApprovalsStore(state_dir / "exec-approvals.json").load().agents


async def test_durable_approval_is_bound_to_cwd_env_and_script(state_dir: Path, tmp_path: Path) -> None:
    """Item 7: always-approving `sh run.sh` in dirA let `sh run.sh` in dirB with FOO=x run."""
    a, b = tmp_path / "a", tmp_path / "b"
    marker = tmp_path / "pwned"
    for d in (a, b):
        d.mkdir()
    (a / "run.sh").write_text("echo fine\n")
    (b / "run.sh").write_text(f"touch {marker}\n")
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        res = await agent.request("exec", {"command": "sh run.sh", "workdir": str(a), "sessionKey": "s"})
        await agent.request("approve", {"id": res["details"]["approvalId"], "decision": "allow-always"})
        await _event(agent, "s", "Exec finished")
        ok = await agent.request("exec", {"command": "sh run.sh", "workdir": str(a), "sessionKey": "s"})
        # The run's text leads with the decision's warnings: sh may read more code from this tree.
        assert ok["details"]["status"] == "completed" and ok["text"].endswith("\n\nfine"), ok["text"]
        for params in (
            {"workdir": str(b)},
            {"workdir": str(a), "env": {"FOO": "x"}},
        ):
            other = await agent.request("exec", {"command": "sh run.sh", "sessionKey": "s", **params})
            assert other["details"]["status"] == "approval-pending", params
        (a / "run.sh").write_text(f"touch {marker}\n")  # the script changed: the approval does not carry over
        changed = await agent.request("exec", {"command": "sh run.sh", "workdir": str(a), "sessionKey": "s"})
        assert changed["details"]["status"] == "approval-pending"
        await agent.close()
    assert not marker.exists()


async def test_bare_name_patterns_never_match_and_are_resolved_when_added(
    state_dir: Path, tmp_path: Path
) -> None:
    """Item 17: a bare-name pattern (`show`) satisfied whatever `show` the run's PATH found."""
    marker = tmp_path / "pwned"
    tool(tmp_path / "bin" / "true", f"#!/bin/sh\ntouch {marker}\n")
    (state_dir / "exec-approvals.json").write_text(
        '{"version": 1, "agents": {"main": {"allowlist": [{"id": "x", "pattern": "true"}]}}}'
    )
    (state_dir / "exec-approvals.json").chmod(0o600)
    details = await attempt(state_dir, f"{tmp_path}/bin/true")
    assert refused(details) and not marker.exists()
    # Added from the CLI, a bare name is resolved once, to the path it names now, and stored as that.
    added = cli(state_dir, "approvals", "allowlist", "add", "true", "--agent", "main")
    assert added.returncode == 0, added.stderr
    saved = [
        e.pattern for e in ApprovalsStore(state_dir / "exec-approvals.json").load().agents["main"].allowlist
    ]
    assert shutil.which("true") in saved or os.path.realpath(shutil.which("true") or "") in saved


async def test_the_approver_sees_every_env_override(state_dir: Path, tmp_path: Path) -> None:
    """The console shows every env key and value the command gets beyond the sanitised base."""
    from tests.attacks.test_terminal_escapes import _screen_text
    from tests.console.test_console import running_console, submit, until

    async with running_console(state_dir) as (app, pilot, agent):
        task = submit(agent, "sh run.sh", workdir=str(tmp_path), env={"FOO": "x\x1b[2Jy", "BAR_MODE": "fast"})
        await until(pilot, lambda: len(app.inbox) == 1)
        await pilot.pause(0.3)
        detail = _screen_text(app.query_one("#approval-detail"))
        assert "FOO=x\\x1b[2Jy" in detail and "BAR_MODE=fast" in detail
        await pilot.press("d")
        await task
