"""Issue 30's small things: JSON usage errors under --json, the CLI's own approve syntax, a missing `]`
named where it is, a heredoc's ask that does not say its data runs, a redirection refusal that says which."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from console.inbox import InboxItem
from console.widgets.approvals import render_detail
from engine.config.loader import load_config_text
from engine.config.model import ConfigError
from engine.protocol.frames import socket_path
from tests.helpers.gateway import cli, write_config


def test_usage_errors_are_json_when_json_was_asked(state_dir: Path) -> None:
    for args in (
        ["process", "--json", "bogus"],
        ["approvals", "grants", "--bogus", "--json"],
        ["exec", "--json"],
        ["approve", "abc", "nope", "--json"],
    ):
        out = cli(state_dir, *args)
        assert out.returncode == 2, args
        shown = json.loads(out.stdout)  # one object, as exec --json promises in every outcome
        assert shown["details"]["status"] == "error" and shown["text"] == shown["details"]["error"], args
        assert out.stderr.startswith("exechost: "), args
    # Without --json: argparse's own usage and complaint, no JSON.
    out = cli(state_dir, "process", "bogus")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("usage: exechost process")
    # `--json` inside the command after `--` is the command's, not ours.
    out = cli(state_dir, "exec", "--host", "bogus", "--", "echo", "--json")
    assert "invalid host 'bogus'" in out.stderr and not out.stdout.startswith("{")
    cli(state_dir, "gateway", "stop")
    # A failed verb under --json is JSON too (here: a restart refused for a broken config).
    write_config(state_dir, "[tools.exec\n")
    out = cli(state_dir, "gateway", "restart", "--json")
    assert out.returncode == 1 and "gateway restart refused" in json.loads(out.stdout)["details"]["error"]
    assert not socket_path(state_dir).exists()


def test_approve_usage_is_the_clis(state_dir: Path) -> None:
    out = cli(state_dir, "approve", "abc", "nope")
    assert out.returncode == 2
    assert out.stderr.startswith("exechost: usage: exechost approve ID DECISION [--reason TEXT]")
    assert "/approve" not in out.stderr  # was: `Usage: /approve <id> <decision>` (the chat syntax)


def test_a_missing_bracket_is_named_on_its_line(state_dir: Path) -> None:
    text = '[tools.exec]\nhost = "auto"\n\n[tools.exec\nsecurity = "full"\n'
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "/c/config.toml")
    message = str(caught.value)
    assert message.startswith(
        "/c/config.toml:4: invalid TOML: the table header '[tools.exec' has no closing ']'"
    )
    with pytest.raises(
        ConfigError, match=r":2: invalid TOML: the table header '\[\[agents.list\]' has no closing"
    ):
        load_config_text('host = 1\n[[agents.list]\nid = "x"\n', "/c/config.toml")
    # A multi-line array is not a header, and a good file is untouched.
    good = '[tools.exec]\npathPrepend = [\n  "/a",\n]\nhost = "auto"\n'
    assert load_config_text(good).exec.path_prepend == ["/a"]
    write_config(state_dir, text)
    out = cli(state_dir, "policy", "check", "--", "ls")
    assert (
        out.returncode == 2
        and ":4: invalid TOML: the table header '[tools.exec' has no closing ']'" in out.stderr
    )


def _detail(command: str, reason: str | None = None) -> str:
    view = {"command": command, "host": "gateway", "slug": "abcd1234", "allowedDecisions": ["allow-once"]}
    insight = {"analysisOk": False, "analysisReason": reason} if reason else {}
    shown = Console(width=200, record=True, file=io.StringIO())
    shown.print(render_detail(InboxItem(key="k", source="gateway", view=view, ids=["k"]), insight))
    return shown.export_text()


def test_a_heredoc_ask_does_not_say_its_data_runs_and_a_redirection_is_named(state_dir: Path) -> None:
    heredoc = _detail("cat > /tmp/notes <<'EOF'\nrm -rf / is only text here\nsecond line\nEOF")
    assert "EVERY LINE RUNS" not in heredoc and "stdin data until EOF (literal, not run)" in heredoc
    two = _detail("cat > /tmp/notes <<'EOF'\ndata\nEOF\necho done")
    assert "SPANS 2 COMMAND LINES" in two and "THE 1 HEREDOC LINE(S) BELOW ARE STDIN DATA, NOT RUN" in two
    assert "EVERY LINE RUNS" in _detail("ls\necho hi")  # no heredoc: every line is a command
    refused = _detail("ls -la > /tmp/out 2>&1", "redirection")
    assert "✗ not provably plain: redirection: > /tmp/out, 2>&1" in refused
    out = cli(state_dir, "policy", "check", "--", "ls -la > /tmp/out 2>&1")
    assert "Analysis: failed closed (redirection: > /tmp/out, 2>&1)" in out.stdout
