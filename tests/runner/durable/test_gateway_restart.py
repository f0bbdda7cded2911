"""Issue 20: `exechost gateway restart` replaces the daemon (an upgrade) with no session or ask lost, and
`gateway stop` says what it does to running sessions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from engine.principals import mint
from tests.helpers.gateway import ALLOWLIST, cli, write_config

CONFIG = ALLOWLIST + (
    '\n[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nsecurity = "full"\nask = "off"\n'
)


def _js(out: subprocess.CompletedProcess[str], code: int = 0) -> dict:
    assert out.returncode == code, out.stderr
    return json.loads(out.stdout)


def test_restart_keeps_sessions_and_asks(state_dir: Path) -> None:
    write_config(state_dir, CONFIG)
    mint(state_dir, "ops")  # an agent other than main is its credential (issue 18)
    try:
        first = _js(cli(state_dir, "gateway", "start", "--json"))["details"]
        bg = _js(cli(state_dir, "exec", "--agent", "ops", "--json", "--background", "--", "sleep 300"))
        sid, pid = bg["details"]["sessionId"], bg["details"]["pid"]
        asked = _js(cli(state_dir, "exec", "--json", "--", "echo", "asked-before-restart"), 10)
        assert asked["details"]["status"] == "approval-pending"
        out = cli(state_dir, "gateway", "restart")
        assert out.returncode == 0, out.stderr
        assert f"pid {first['pid']} → pid" in out.stdout
        assert "1 session(s) adopted, 1 pending approval(s)" in out.stdout
        os.kill(pid, 0)  # the same process, never restarted
        listed = _js(cli(state_dir, "process", "--agent", "ops", "--json", "list"))["details"]["sessions"]
        assert [(r["sessionId"], r["status"]) for r in listed] == [(sid, "running")]
        pending = _js(cli(state_dir, "approvals", "pending", "--json"))["details"]["approvals"]
        assert [a["id"] for a in pending] == [asked["details"]["approvalId"]]
        stop = cli(state_dir, "gateway", "stop")
        assert "1 running session(s) keep running in the session host" in stop.stdout
        assert "--kill-sessions" in stop.stdout and "1 pending approval(s) are kept" in stop.stdout
        os.kill(pid, 0)
    finally:
        cli(state_dir, "gateway", "stop", "--kill-sessions")
