"""Issue 9 items 2–4: env, pagers, editors and repository config that make an allowed program run code."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.errors import ExecHostError
from tests.attacks.harness import ALLOWLIST, attempt
from tests.helpers.gateway import connect, gateway, wait_until, write_config

GIT = ("/usr/bin/git", r"^(status|log|show|diff|help|commit)\b.*")  # the README's example, widened


def repo(path: Path, commits: int = 60) -> Path:
    """A real repository with enough history that `git log` would fill a terminal and page."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    for i in range(commits):
        (path / "f.txt").write_text(f"line {i}\n")
        subprocess.run(["git", "-C", str(path), "add", "f.txt"], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "commit", "-qm", f"commit {i}"], check=True, env=env)
    return path


@pytest.mark.parametrize(
    "key",
    [
        "GIT_TEST_FSMONITOR",
        "LESS",
        "GIT_TRACE",
        "GIT_TRACE_PACKET",
        "PAGER",
        "GIT_PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "GIT_SSH_COMMAND",
        "PYTHONSTARTUP",
        "PYTHONWARNINGS",
        "PERL5OPT",
        "RUBYOPT",
        "NODE_OPTIONS",
        "LESSOPEN",
        "SYSTEMD_PAGER",
        "TAR_OPTIONS",
        "HISTFILE",
        "PSQL_HISTORY",
        "RSYNC_RSH",
        "MANOPT",
        "GIT_CONFIG_COUNT",
        "BASH_ENV",
        "PROMPT_COMMAND",
    ],
)
async def test_code_env_keys_are_refused(state_dir: Path, tmp_path: Path, key: str) -> None:
    """Item 2: `--env GIT_TEST_FSMONITOR='touch …'`, `LESS='+!touch …'`, `GIT_TRACE=/path` ran or wrote."""
    marker = tmp_path / "pwned"
    repo(tmp_path / "r", commits=1)
    with pytest.raises(ExecHostError, match="Security Violation"):
        await attempt(
            state_dir,
            "git status",
            allow=[GIT],
            env={key: f"+!touch {marker}" if key.startswith("LESS") else f"touch {marker}"},
            workdir=str(tmp_path / "r"),
        )
    assert not marker.exists()


async def test_harmless_git_identity_is_still_allowed(state_dir: Path, tmp_path: Path) -> None:
    work = str(repo(tmp_path / "r", 1))
    env = {"GIT_AUTHOR_NAME": "agent"}
    details = await attempt(state_dir, "git status", allow=[GIT], env=env, workdir=work)
    assert details["status"] == "completed", details


async def _pty_escape(
    state: Path, command: str, cwd: Path, keys: list[str], allow: list[tuple[str, str | None]]
) -> None:
    """Start `command` in a PTY (allowlisted), type shell escapes into whatever it started, wait."""
    write_config(state, ALLOWLIST)
    store = ApprovalsStore(state / "exec-approvals.json")
    for pattern, arg_pattern in allow:
        store.add_allowlist("main", pattern, arg_pattern=arg_pattern)
    async with gateway(state):
        client = await connect(state)
        try:
            res = await client.request(
                "exec", {"command": command, "pty": True, "background": True, "workdir": str(cwd)}
            )
            assert res["details"]["status"] == "running", res
            sid = res["details"]["sessionId"]

            async def started() -> bool:  # keys typed before the program reads its terminal are lost
                polled = await client.request("process", {"action": "poll", "sessionId": sid})
                return bool(polled["text"].strip()) or polled["details"].get("status") != "running"

            await wait_until(started, 10)
            await asyncio.sleep(0.5)
            for data in keys:
                try:
                    await client.request("process", {"action": "write", "sessionId": sid, "data": data})
                except ExecHostError:
                    break  # the program already ended: nothing to type into
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.5)
            await client.request("process", {"action": "kill", "sessionId": sid})
            await wait_until(
                lambda: client.request("process", {"action": "poll", "sessionId": sid, "timeout": 0}), 10
            )
        finally:
            await client.close()


ESCAPES = ["!touch {m}\n", ":!touch {m}\n", "|touch {m}\n", "q", ":q!\n", "\x1b:!touch {m}\n"]


@pytest.mark.parametrize(
    "command",
    ["git log", "git show", "git diff 'HEAD~1'", "git help log", "git commit --allow-empty", "git log -p"],
)
async def test_no_pager_or_editor_escape_from_allowed_git(
    state_dir: Path, tmp_path: Path, command: str
) -> None:
    """Item 3: a PTY `git log` started less; `process write '!touch …'` ran the command."""
    marker = tmp_path / "pwned"
    work = repo(tmp_path / "r")
    await _pty_escape(state_dir, command, work, [e.format(m=marker) for e in ESCAPES], [GIT])
    assert not marker.exists()


async def test_allowlisted_pager_has_no_shell_escape(state_dir: Path, tmp_path: Path) -> None:
    """Item 3: `less` itself allowlisted: LESSSECURE=1 turns its `!`, `|` and `v` commands off."""
    marker = tmp_path / "pwned"
    text = tmp_path / "long.txt"
    text.write_text("".join(f"line {i}\n" for i in range(500)))
    await _pty_escape(
        state_dir, f"less {text}", tmp_path, [e.format(m=marker) for e in ESCAPES], [("/usr/bin/less", None)]
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("key", "value", "command"),
    [
        ("core.fsmonitor", "touch {m}; false", "git status"),
        ("core.pager", "touch {m}; cat", "git log"),
        ("core.hooksPath", "{hooks}", "git commit --allow-empty -m x"),
        ("core.editor", "touch {m}; true", "git commit --allow-empty"),
        ("core.sshCommand", "touch {m}; false", "git log"),
    ],
)
async def test_repository_config_written_by_a_sandbox_is_not_code_on_the_host(
    state_dir: Path, tmp_path: Path, key: str, value: str, command: str
) -> None:
    """Item 4: a sandbox with workspaceAccess="rw" appended an fsmonitor hook to /workspace/.git/config;
    the host's allowlisted `git status` ran it."""
    marker = tmp_path / "pwned"
    work = repo(tmp_path / "r", commits=2)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-commit", "commit-msg", "prepare-commit-msg"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
        (work / ".git" / "hooks" / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (work / ".git" / "hooks" / name).chmod(0o755)
    with (work / ".git" / "config").open("a") as f:
        f.write(f'[{key.split(".")[0]}]\n\t{key.split(".")[1]} = "{value.format(m=marker, hooks=hooks)}"\n')
    await attempt(
        state_dir,
        command,
        allow=[GIT],
        workdir=str(work),
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
        },
    )
    assert not marker.exists()
