"""Input to a program not known to read it as data is commands no allowlist entry described: a heredoc or a
pipe into one asks, and the agent's keys into a session started unasked are refused (the operator's are
not). The legitimate side: data readers (head, grep, less…) take heredocs, pipes and keys as before."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands.stdindata import input_refusal, reads_input_as_data
from engine.config.loader import load_config_text
from engine.policy.decision import Decision, evaluate
from engine.sessions import RunSpec, SessionManager

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}


def _decide(command: str, allowed: list[str], tmp_path: Path) -> Decision:
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    store = ApprovalsStore(tmp_path / "approvals.json")
    for name in allowed:
        path = shutil.which(name, path=ENV["PATH"])
        if path is None:
            pytest.skip(f"{name} is not installed")
        store.add_allowlist("main", path)
    return evaluate(command, config=config, store=store, cwd=str(tmp_path), env=ENV)


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("sqlite3 app.db <<'EOF'\n.shell touch pwned\nEOF", ["sqlite3"]),
        ("ed -s <<'EOF'\n!touch pwned\nq\nEOF", ["ed"]),
        ("echo '!touch pwned' | ed -s", ["echo", "ed"]),
    ],
    ids=["heredoc-sqlite3", "heredoc-ed", "pipe-ed"],
)
def test_input_to_a_command_reader_misses_its_entry(tmp_path: Path, command: str, allowed: list[str]) -> None:
    d = _decide(command, allowed, tmp_path)
    assert d.verdict != "allow"
    assert any("not known to read its input as data" in (s["reason"] or "") for s in d.segments), d.segments


@pytest.mark.parametrize(
    "command",
    [
        "head -n 1 <<'EOF'\nhello\nEOF",
        "echo hi | head -n 1",
        "echo hi | grep h | wc -l",
        "git commit -q --allow-empty -F - <<'EOF'\nmsg\nEOF",
    ],
)
def test_input_to_a_data_reader_runs_unasked(tmp_path: Path, command: str) -> None:
    d = _decide(command, ["echo", "head", "grep", "wc", "git"], tmp_path)
    assert d.verdict == "allow", (d.reason, d.segments)


def test_the_list_holds_data_readers_only() -> None:
    assert reads_input_as_data(["head"], "/usr/bin/head")
    assert reads_input_as_data(["less"], "/usr/bin/less")  # keys: LESSSECURE=1 on every host run
    assert not reads_input_as_data(["more"], "/usr/bin/more")
    assert not reads_input_as_data(["head"], "/usr/bin/sqlite3")  # the file that runs decides
    assert not reads_input_as_data(["xargs"], "/usr/bin/xargs")


def test_input_refusal_names_the_command_readers() -> None:
    seg = [{"argv": ["more", "big.txt"], "resolvedPath": "/usr/bin/more"}]
    assert "more" in input_refusal(seg)
    assert input_refusal([{"argv": ["less", "big.txt"], "resolvedPath": "/usr/bin/less"}]) == ""
    piped = [{"argv": ["cat", "x"], "resolvedPath": "/usr/bin/cat"}, {"argv": ["ed"], "resolvedPath": None}]
    assert "ed" in input_refusal(piped)


@pytest.fixture
async def mgr(state_dir: Path) -> AsyncIterator[SessionManager]:
    manager = SessionManager(state_dir, kill_grace_sec=1.0)
    yield manager
    await manager.close()


async def test_a_session_started_unasked_refuses_the_agents_keys_not_the_operators(
    mgr: SessionManager,
) -> None:
    spec = RunSpec(command="cat", scope_key="p", background=True, input_refused="more may read commands")
    sid = str((await mgr.run(spec)).details["sessionId"])
    refused = await mgr.process("write", {"sessionId": sid, "data": "hi\n"}, "p")
    assert refused.details["status"] == "failed" and "more may read commands" in refused.text
    for action in ("send-keys", "paste", "submit"):
        again = await mgr.process(action, {"sessionId": sid, "keys": ["enter"], "text": "x"}, "p")
        assert again.details["status"] == "failed", (action, again.text)
    typed = await mgr.process("write", {"sessionId": sid, "data": "hi\n", "eof": True}, None)
    assert typed.details["status"] == "running", typed.text
    await mgr.process("kill", {"sessionId": sid}, None)


async def test_a_session_that_takes_input_still_does(mgr: SessionManager) -> None:
    sid = str((await mgr.run(RunSpec(command="cat", scope_key="p", background=True))).details["sessionId"])
    wrote = await mgr.process("write", {"sessionId": sid, "data": "hi\n", "eof": True}, "p")
    assert wrote.details["status"] == "running", wrote.text
    await mgr.process("kill", {"sessionId": sid}, None)
