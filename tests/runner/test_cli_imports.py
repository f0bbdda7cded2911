"""Agent-facing CLI verbs stay light: they must not import the node (asyncssh, cryptography), sandbox
(docker), console (textual, rich) or browser (playwright) stacks: ~100 ms on every agent command (issue 19).

Each verb runs as the real CLI in a subprocess against a real gateway; `-X importtime` lists every module the
process imported, including the ones a verb imports lazily while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gateway import FULL, REPO, cli, write_config

HEAVY = ("asyncssh", "cryptography", "docker", "textual", "rich", "playwright", "tomlkit")


def imported(state: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(REPO),
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "runner.cli" in names, proc.stderr[-2000:]  # the importtime listing really was read
    return proc, names


def heavy(names: set[str]) -> list[str]:
    return sorted(name for name in names if name.split(".")[0] in HEAVY)


@pytest.fixture
def running(state_dir: Path) -> Iterator[Path]:
    write_config(state_dir, FULL)
    assert cli(state_dir, "gateway", "start").returncode == 0
    try:
        yield state_dir
    finally:
        cli(state_dir, "gateway", "stop")


@pytest.mark.parametrize(
    "verb",
    [
        ("exec", "--", "true"),
        ("process", "list"),
        ("gateway", "status"),
        ("policy", "check", "--", "true"),
    ],
    ids=" ".join,
)
def test_agent_verbs_import_no_heavy_stack(running: Path, verb: tuple[str, ...]) -> None:
    proc, names = imported(running, *verb)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert heavy(names) == []


def test_the_check_sees_a_heavy_import(running: Path) -> None:
    """The same probe on a verb that does import a heavy stack (`nodes list` edits config.toml with
    tomlkit) finds it: the check above can fail. (asyncssh itself is now loaded only when a node is
    dialled, engine.lazymod, so `nodes list` with no node configured no longer pays for it.)"""
    proc, names = imported(running, "nodes", "list")
    assert "tomlkit" in heavy(names), proc.stdout + proc.stderr[-2000:]
    assert "asyncssh" not in heavy(names), proc.stdout + proc.stderr[-2000:]


def test_help_still_lists_every_verb(state_dir: Path) -> None:
    proc = cli(state_dir, "--help")
    assert proc.returncode == 0
    for verb in ("approvals", "approve", "console", "events", "exec", "gateway", "mcp", "node", "nodes"):
        assert verb in proc.stdout
    for verb in ("policy", "process", "sandbox"):
        assert verb in proc.stdout
    version = cli(state_dir, "--version")
    assert version.returncode == 0 and version.stdout.startswith("exechost ")


def test_version_imports_no_verb_module(state_dir: Path) -> None:
    """`--version` named no verb, so it imported every verb module (asyncssh, docker…): ~330 ms."""
    proc, names = imported(state_dir, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("exechost "), proc.stdout + proc.stderr[-2000:]
    assert heavy(names) == [] and not {n for n in names if n.startswith("runner.cli.")}


@pytest.mark.parametrize("verb", [("exec", "--", "true"), ("gateway", "status")], ids=" ".join)
def test_one_shot_verbs_run_without_asyncio(running: Path, verb: tuple[str, ...]) -> None:
    """A one-shot verb talks to a running gateway over a blocking socket: asyncio alone is ~40 ms of
    imports (issue 19: `exechost exec -- true` as a whole process)."""
    proc, names = imported(running, *verb)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "asyncio" not in names


def test_exec_starts_a_gateway_when_none_runs(state_dir: Path) -> None:
    """Nothing listening: the blocking client steps aside for the one that starts a gateway."""
    write_config(state_dir, FULL)
    try:
        proc, names = imported(state_dir, "exec", "--", "echo", "hi")
        assert proc.returncode == 0 and "hi" in proc.stdout, proc.stdout + proc.stderr[-2000:]
        assert "started a gateway" in proc.stderr and "asyncio" in names
    finally:
        cli(state_dir, "gateway", "stop")
