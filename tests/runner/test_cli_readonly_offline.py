"""Issue 30 item 5: the read-only approvals verbs read the state files when no gateway answers, and never
start a daemon (an operator looking at a node's state dir, or at a machine whose gateway is stopped)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from engine.protocol.frames import socket_path
from tests.helpers.gateway import ALLOWLIST, cli, write_config


def js(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout)["details"])


def test_grants_history_pending_and_get_read_the_files_without_a_gateway(state_dir: Path) -> None:
    write_config(state_dir, ALLOWLIST)
    try:
        asked = json.loads(cli(state_dir, "exec", "--json", "--", "id -u").stdout)["details"]
        assert asked["status"] == "approval-pending"
        approved = cli(state_dir, "approve", asked["approvalSlug"], "allow-always", "--for", "30m")
        assert approved.returncode == 0, approved.stderr
        waiting = json.loads(cli(state_dir, "exec", "--json", "--", "uname -n").stdout)["details"]
        assert waiting["status"] == "approval-pending"
        online = {
            verb: js(cli(state_dir, "approvals", verb, "--json")) for verb in ("grants", "history", "pending")
        }
    finally:
        assert cli(state_dir, "gateway", "stop").returncode == 0
    assert len(online["grants"]["grants"]) == 1 and len(online["pending"]["approvals"]) == 1

    offline = {}
    for verb in ("grants", "history", "pending", "get"):
        shown = cli(state_dir, "approvals", verb, "--json")
        offline[verb] = js(shown)
        assert "started a gateway" not in shown.stderr
        if verb != "get":  # get always reads the file
            assert shown.stderr.startswith("exechost: no gateway is running; "), shown.stderr
        assert not socket_path(state_dir).exists(), verb  # nothing was started to answer
    assert cli(state_dir, "gateway", "status").returncode == 1

    def ids(rows: list[dict]) -> list[tuple]:
        return [(r["id"], r.get("agentId"), r.get("command")) for r in rows]

    assert ids(offline["grants"]["grants"]) == ids(online["grants"]["grants"])
    assert offline["grants"]["grants"][0]["left"].endswith("left")
    assert [(r["id"], r["status"]) for r in offline["history"]["approvals"]] == [
        (r["id"], r["status"]) for r in online["history"]["approvals"]
    ]
    assert ids(offline["pending"]["approvals"]) == ids(online["pending"]["approvals"])
    assert offline["pending"]["approvals"][0]["slug"] == waiting["approvalSlug"]
    # The text forms too, as an operator reads them.
    text = cli(state_dir, "approvals", "grants").stdout
    assert online["grants"]["grants"][0]["id"] in text and "id -u" in text
    text = cli(state_dir, "approvals", "pending").stdout
    assert text.startswith(waiting["approvalSlug"]) and "uname -n" in text
    assert not socket_path(state_dir).exists()
