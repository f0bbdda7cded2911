"""`exechost policy check` end to end, as a subprocess with a temp config and state dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from engine.approvals.store import ApprovalsStore
from tests.conftest import venv_bin

LS = os.path.realpath(shutil.which("ls") or "/bin/ls")
CONFIG = """
[tools.exec]
host = "gateway"
security = "allowlist"

[[agents.list]]
id = "ops"
tools.exec.ask = "off"
"""


def run(
    *args: str, env: dict[str, str] | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv_bin("exechost"), "policy", "check", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
    )


def check_json(*args: str, **kw: Any) -> dict[str, Any]:
    proc = run("--json", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data


def config_file(tmp_path: Path, text: str = CONFIG) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_json_decisions(tmp_path: Path) -> None:
    conf = config_file(tmp_path)
    data = check_json("--config", conf, "--", "ls -la | wc -l")
    for key in (
        "host",
        "security",
        "ask",
        "askFallback",
        "analysisOk",
        "allowlistSatisfied",
        "requiresApproval",
        "decision",
        "reason",
        "segments",
        "enforcedCommand",
    ):
        assert key in data, key
    assert (data["host"], data["security"], data["ask"], data["askFallback"]) == (
        "gateway",
        "allowlist",
        "on-miss",
        "deny",
    )
    assert data["decision"] == "ask" and data["requiresApproval"] is True
    assert data["analysisOk"] is True and data["allowlistSatisfied"] is False
    assert data["segments"][0]["argv"] == ["ls", "-la"] and data["segments"][0]["resolvedPath"] == LS
    assert data["segments"][1]["satisfiedBy"] == "safeBins"
    assert data["decidedBy"] == {"layer": "built-in", "key": "tools.exec.ask", "value": "on-miss"}

    ApprovalsStore().add_allowlist("main", LS)
    data = check_json("--config", conf, "--", "ls -la | wc -l")
    assert data["decision"] == "allow" and data["allowlistSatisfied"] is True
    assert data["segments"][0]["matchedPattern"] == LS
    assert data["enforcedCommand"].startswith(f"'{LS}' '-la' | ")


def test_agent_and_per_call_flags(tmp_path: Path) -> None:
    conf = config_file(tmp_path)
    data = check_json("--config", conf, "--agent", "ops", "--", "id")
    assert data["decision"] == "deny" and data["reason"] == "exec denied: allowlist miss"
    assert data["agentId"] == "ops"
    data = check_json("--config", conf, "--agent", "ops", "--ask", "always", "--", "id")
    assert data["decision"] == "ask" and data["ask"] == "always"
    data = check_json("--config", conf, "--security", "deny", "--", "id")
    assert data["decision"] == "deny" and data["reason"] == "exec denied: host=gateway security=deny"
    # A per-call security cannot broaden.
    data = check_json("--config", conf, "--security", "full", "--", "id")
    assert data["security"] == "allowlist"
    data = check_json("--config", conf, "--host", "node", "--", "id")
    assert data["decision"] == "deny"
    assert data["reason"] == (
        "exec host not allowed (requested node; configured host is gateway; "
        "set tools.exec.host=node or auto to allow this override)."
    )


def test_several_words_are_quoted_and_joined(tmp_path: Path) -> None:
    data = check_json("--config", config_file(tmp_path), "--", "ls", "a b", "|", "wc")
    assert data["command"] == "ls 'a b' '|' wc"
    assert data["segments"][0]["argv"] == ["ls", "a b", "|", "wc"]


def test_cwd_resolves_relative_executables(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    script = work / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    data = check_json("--config", config_file(tmp_path), "--cwd", str(work), "--", "./run.sh")
    assert data["segments"][0]["resolvedPath"] == str(script)


def test_env_config_and_default_builtins(tmp_path: Path) -> None:
    data = check_json("--", "ls")
    assert (data["host"], data["security"], data["ask"]) == ("sandbox", "allowlist", "on-miss")
    assert data["reason"].startswith("runs direct on the gateway")
    data = check_json("--", "ls", env={"EXECHOST_CONFIG": config_file(tmp_path)})
    assert data["host"] == "gateway"


def test_readable_output(tmp_path: Path) -> None:
    proc = run("--config", config_file(tmp_path), "--", "ls /tmp | wc -l")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Decision: ASK — allowlist miss: ")
    assert "Decided by: built-in: tools.exec.ask = on-miss" in out
    assert f"1. ls /tmp  →  {LS}  [MISS" in out and "2. wc -l" in out and "[safeBins]" in out
    assert "Allowed decisions: allow-once|allow-always|deny" in out
    assert "config tools.exec: tools.exec.security = allowlist" in out


def test_terminal_escapes_in_commands_are_neutralised(tmp_path: Path) -> None:
    proc = run("--config", config_file(tmp_path), "--", "echo \x1b]0;pwned\x07 \x1b[2J")
    assert proc.returncode == 0
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b" in proc.stdout


def test_usage_and_config_errors_exit_2(tmp_path: Path) -> None:
    bad = config_file(
        tmp_path, '[tools.exec]\nhost = "gateway"\n\n[[agents.list]]\nid = "x"\ntools.exec.ask = "never"\n'
    )
    proc = run("--config", bad, "--", "ls")
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{bad}:6: agents.list[0].tools.exec.ask: invalid value 'never'" in proc.stderr
    proc = run("--config", str(tmp_path / "missing.toml"), "--", "ls")
    assert proc.returncode == 2 and "config file not found" in proc.stderr
    proc = run("--config", config_file(tmp_path), "--host", "ssh", "--", "ls")
    assert proc.returncode == 2 and "invalid --host 'ssh'" in proc.stderr
    proc = run("--config", config_file(tmp_path))
    assert proc.returncode == 2 and "missing COMMAND" in proc.stderr
    proc = run("--config", config_file(tmp_path), "--cwd", str(tmp_path / "nope"), "--", "ls")
    assert proc.returncode == 2 and "not a directory" in proc.stderr
    proc = run("--config", config_file(tmp_path), "--agent", "a\x01b", "--", "ls")
    assert proc.returncode == 2 and "invalid --agent" in proc.stderr
    proc = run("--config", config_file(tmp_path), "--", "  ")
    assert proc.returncode == 2 and "Provide a command to start." in proc.stderr


def test_broken_approvals_file_exit_2_and_untouched(tmp_path: Path, state_dir: Path) -> None:
    approvals = state_dir / "exec-approvals.json"
    approvals.write_text("{not json")
    approvals.chmod(0o600)
    proc = run("--config", config_file(tmp_path), "--", "ls")
    assert proc.returncode == 2 and str(approvals) in proc.stderr
    assert approvals.read_text() == "{not json"


def test_escape_controls_keeps_lines_only_when_asked() -> None:
    from runner.cli.common import escape_controls

    hostile = "a\tb\nc\x1b[2J\x07\u202egnp\x9b"
    assert escape_controls(hostile) == "a\\tb ⏎ c\\x1b[2J\\x07\\u202egnp\\x9b"
    assert escape_controls(hostile, keep_lines=True) == "a\tb\nc\\x1b[2J\\x07\\u202egnp\\x9b"


def test_policy_check_agrees_with_exec_on_a_refused_sandbox(state_dir: Path, tmp_path: Path) -> None:
    """Issue 10: network="host" is refused at container create; `policy check` says so too."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nnetwork = "host"\n'
    )
    config.chmod(0o600)
    proc = run("--config", str(config), "--json", "--", "ls")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["decision"] == "deny" and "host" in data["reason"].lower()
