"""`exechost approvals get|allowlist add|remove`, run as the real console script."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from engine.approvals.store import ApprovalsStore
from tests.conftest import venv_bin


def run(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [venv_bin("exechost"), "approvals", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def run_json(*args: str) -> dict[str, Any]:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert set(payload) == {"text", "details"}
    return dict(payload["details"])


def test_get_without_a_file_shows_defaults_and_creates_nothing(state_dir: Path) -> None:
    proc = run("get")
    assert proc.returncode == 0, proc.stderr
    assert f"Approvals file: {state_dir / 'exec-approvals.json'}  (not created yet)" in proc.stdout
    assert "Agent main: host policy in this file" in proc.stdout
    assert "Allowlist: 0 entries" in proc.stdout
    assert list(state_dir.iterdir()) == []


def test_add_get_remove_round_trip(state_dir: Path) -> None:
    proc = run("allowlist", "add", "/usr/bin/rg")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Added /usr/bin/rg for agent *")
    assert run("allowlist", "add", "git", "--agent", "main", "--arg-pattern", "^status$").returncode == 0
    again = run("allowlist", "add", "/usr/bin/rg")
    assert again.returncode == 0 and again.stdout.startswith("Already allowed: /usr/bin/rg")

    store = ApprovalsStore()
    rg = store.load().agents["*"].allowlist[0]
    store.record_use("main", rg.id, "rg -n TODO", "/usr/bin/rg")

    text = run("get").stdout
    assert "Socket:" in text and "(token set)" in text
    assert store.load().socket_token not in text  # the token is never printed
    lines = text.splitlines()
    header = next(line for line in lines if "PATTERN" in line)
    assert header.split() == ["AGENT", "PATTERN", "ARG", "PATTERN", "SOURCE", "LAST", "USED"]
    rg_line = next(line for line in lines if "/usr/bin/rg" in line and "UTC" in line)
    assert rg_line.split()[:4] == ["*", "/usr/bin/rg", "-", "manual"]
    assert rg_line.endswith("rg -n TODO  -> /usr/bin/rg")
    git_line = next(line for line in lines if "/usr/bin/git " in line)  # the bare name was resolved
    assert git_line.split() == ["main", "/usr/bin/git", "^status$", "manual", "never"]

    details = run_json("get")
    assert details["path"] == str(store.path) and details["exists"] is True
    assert details["socket"] == {"path": str(state_dir / "exec-approvals.sock"), "tokenSet": True}
    assert [(e["agent"], e["pattern"], e["argPattern"]) for e in details["allowlist"]] == [
        ("*", "/usr/bin/rg", None),
        ("main", "/usr/bin/git", "^status$"),
    ]
    assert details["allowlist"][0]["lastUsedCommand"] == "rg -n TODO"
    assert isinstance(details["allowlist"][0]["lastUsedAt"], int)

    only_wildcard = run_json("get", "--agent", "ops")
    assert [e["pattern"] for e in only_wildcard["allowlist"]] == ["/usr/bin/rg"]

    removed = run("allowlist", "remove", "/usr/bin/rg")
    assert removed.returncode == 0 and removed.stdout.startswith("Removed /usr/bin/rg from agent *")
    assert [e["pattern"] for e in run_json("get")["allowlist"]] == ["/usr/bin/git"]
    assert state_dir.stat().st_mode & 0o777 == 0o700
    assert store.path.stat().st_mode & 0o777 == 0o600


def test_get_shows_effective_policy_and_sources(state_dir: Path) -> None:
    path = state_dir / "exec-approvals.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "defaults": {"security": "deny", "askFallback": "deny"},
                "agents": {
                    "*": {"ask": "always"},
                    "main": {"security": "allowlist", "ask": "never"},
                    "default": {"autoAllowSkills": True},
                },
            }
        )
    )
    path.chmod(0o600)
    details = run_json("get", "--agent", "default")  # legacy id resolves to main
    assert details["agentId"] == "main"
    assert details["agent"] == {
        "security": "allowlist",
        "ask": None,
        "askFallback": "deny",
        "autoAllowSkills": True,
    }
    assert details["sources"]["security"] == "agents.main.security"
    assert details["sources"]["ask"] is None  # main's invalid ask masks the wildcard
    assert details["warnings"] == ['agents.main.ask: invalid value "never" ignored']
    text = run("get").stdout
    assert "  security         allowlist  agents.main.security" in text
    assert 'Warnings:\n  agents.main.ask: invalid value "never" ignored' in text


def test_json_for_add_and_remove(state_dir: Path) -> None:
    added = run_json("allowlist", "add", "/bin/ls", "--agent", "ops")
    assert added["added"] is True and added["agentId"] == "ops"
    assert added["entry"]["pattern"] == "/bin/ls" and added["entry"]["id"]
    removed = run_json("allowlist", "remove", added["entry"]["id"], "--agent", "ops")
    assert removed["removed"] is True


def test_usage_errors_exit_2(state_dir: Path) -> None:
    bad_re = run("allowlist", "add", "/bin/ls", "--arg-pattern", "([")
    assert bad_re.returncode == 2
    assert "invalid argPattern '([': not a valid regular expression" in bad_re.stderr
    missing = run("allowlist", "remove", "/bin/nothing")
    assert missing.returncode == 2 and "no allowlist entry '/bin/nothing' for agent '*'" in missing.stderr
    assert run("allowlist", "add", " ").returncode == 2
    assert run().returncode == 2  # no action
    assert run("allowlist").returncode == 2
    assert not (state_dir / "exec-approvals.json").exists()


def test_command_hash_entries_cannot_be_added_by_hand(state_dir: Path) -> None:
    # Reference §3.3: `=command:<sha16>` is durable only when an allow-always decision wrote it, and
    # hash entries never match as patterns: a hand-added one would approve nothing, silently.
    proc = run("allowlist", "add", "=command:0123456789abcdef")
    assert proc.returncode == 2
    assert "=command: entries are written only by an allow-always approval" in proc.stderr
    assert not (state_dir / "exec-approvals.json").exists()


def test_get_flags_a_hand_written_command_hash_entry(state_dir: Path) -> None:
    path = state_dir / "exec-approvals.json"
    entries = [{"pattern": "=command:0123456789abcdef"}, {"pattern": "=command:fedcba9876543210"}]
    entries[1]["source"] = "allow-always"
    path.write_text(json.dumps({"version": 1, "agents": {"main": {"allowlist": entries}}}))
    path.chmod(0o600)
    warnings = run_json("get")["warnings"]
    assert warnings == [
        "agents.main.allowlist =command:0123456789abcdef: not written by an allow-always approval; "
        "entry never matches"
    ]


def test_corrupt_file_is_reported_and_left_alone(state_dir: Path) -> None:
    path = state_dir / "exec-approvals.json"
    content = b'{"version": 1,\n "agents": {"main": {"allowlist": ["/bin/ls",]}}}\n'
    path.write_bytes(content)
    path.chmod(0o600)
    for args in (("get",), ("allowlist", "add", "/bin/sh"), ("allowlist", "remove", "/bin/ls")):
        proc = run(*args)
        assert proc.returncode == 2
        assert f"exechost: {path}: invalid JSON at line 2 column" in proc.stderr
        assert proc.stdout == ""
    assert path.read_bytes() == content


def test_stored_control_characters_cannot_drive_the_terminal(state_dir: Path) -> None:
    store = ApprovalsStore()
    entry = store.add_allowlist("main", "/bin/echo")
    store.record_use("main", entry.id, "echo \x1b[2J\x1b]0;pwned\x07 \u202egnp.exe", "/bin/echo")
    text = run("get").stdout
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "echo \\x1b[2J\\x1b]0;pwned\\x07 \\u202egnp.exe" in text


def test_get_shows_config_clamped_by_the_file(state_dir: Path) -> None:
    config = state_dir / "config.toml"
    config.write_text('[tools.exec]\nsecurity = "full"\nask = "off"\n')
    path = state_dir / "exec-approvals.json"
    path.write_text(json.dumps({"version": 1, "agents": {"*": {"security": "allowlist"}}}))
    path.chmod(0o600)
    effective = run_json("get", "--config", str(config))["effective"]
    assert effective["security"]["value"] == "allowlist"  # the host file only tightens
    assert "exec-approvals.json security" in effective["security"]["decidedBy"]
    assert effective["ask"]["value"] == "off"
    assert "tools.exec.ask" in effective["ask"]["decidedBy"]
    text = run("get", "--config", str(config)).stdout
    assert "Effective (config.toml clamped by this file" in text
    broken = run("get", "--config", str(state_dir / "missing.toml"))
    assert broken.returncode == 0 and "unavailable: " in broken.stdout  # the file view still shows


def test_an_egress_ask_is_shown_whole_or_cut_in_its_middle() -> None:
    """`approvals pending`: any egress ask fits whole; past that, its middle goes, never the right end
    (the labels that say who owns the name, the port and the kind)."""
    from runner.cli.approve import EGRESS_WIDTH, _cut_middle

    name = ".".join(["a" * 63] * 3) + ".example.net"  # 253 characters, the longest name there is
    ask = f"connect {name}:443 [tunnel: CONNECT/SOCKS5]"
    assert _cut_middle(ask, EGRESS_WIDTH) == ask
    longer = f"connect {'b' * 400}.example.net:443 [tunnel: CONNECT/SOCKS5]"
    cut = _cut_middle(longer, EGRESS_WIDTH)
    assert len(cut) == EGRESS_WIDTH and "…" in cut
    assert cut.startswith("connect bbb") and cut.endswith(".example.net:443 [tunnel: CONNECT/SOCKS5]")
