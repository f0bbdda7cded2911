"""Issue 30 items 6 and 7, through the real CLI, its daemon and real sshd nodes: a node is shown by its name
(its id in the detail) in asks and events; `process list` has a NODE column and `--node NAME`; the gateway's
`approvals grants` lists a node's grants, marked with the node, and revokes them there."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.approvals.grants import GrantStore
from tests.helpers.sshd import EXECHOST, SshdNode

GATEWAY_ASKS = '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\nask = "on-miss"\n'
FULL = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n'


def exechost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXECHOST, *args], capture_output=True, text=True, timeout=90)


def details(*args: str) -> dict:
    at = args.index("--") if "--" in args else len(args)
    out = exechost(*args[:at], "--json", *args[at:])
    assert out.stdout, out.stderr
    return dict(json.loads(out.stdout)["details"])


@pytest.fixture
def stop_gateway(state_dir: Path) -> Iterator[None]:
    yield
    exechost("gateway", "stop", "--kill-sessions")


def configure(state_dir: Path, nodes: list[SshdNode], gateway: str, node: str) -> None:
    (state_dir / "config.toml").write_text(gateway + "".join(n.config_toml() for n in nodes))
    for n in nodes:
        (n.state_dir / "config.toml").write_text(node)


def test_a_nodes_ask_and_grant_by_its_name(
    sshd_nodes: list[SshdNode], state_dir: Path, stop_gateway: None
) -> None:
    alpha = sshd_nodes[0]
    configure(state_dir, sshd_nodes, GATEWAY_ASKS, '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    asked = exechost("exec", "--session", "s1", "--node", "alpha", "--", "uname -n")
    assert asked.returncode == 10, asked.stdout + asked.stderr
    node_id = json.loads((alpha.state_dir / "node.json").read_text())["nodeId"]
    assert f"\nNode: alpha ({node_id})\n" in asked.stdout  # was: `Node: <uuid>` alone
    [pending] = details("approvals", "pending")["approvals"]
    assert (pending["nodeName"], pending["nodeId"]) == ("alpha", node_id)
    assert pending["requesters"][0]["nodeName"] == "alpha"

    # A limited yes on a node's ask is a grant on that node; the gateway lists it, marked with the node.
    approved = exechost("approve", pending["slug"], "allow-always", "--uses", "3")
    assert approved.returncode == 0, approved.stderr
    [grant] = details("approvals", "grants")["grants"]
    on_node = GrantStore(alpha.state_dir / "exec-grants.json").active()
    assert len(on_node) == 1 and grant["id"] == f"node:alpha:{on_node[0].id}" and grant["node"] == "alpha"
    assert grant["left"] == "3 uses left"
    listed = exechost("approvals", "grants").stdout.splitlines()
    assert listed[0].split() == ["ID", "NODE", "AGENT", "LEFT", "PATTERNS", "COMMAND"]
    assert listed[1].split()[:2] == [grant["id"], "alpha"]
    revoked = exechost("approvals", "grants", "revoke", grant["id"])
    assert revoked.stdout == f"Revoked grant {grant['id']} on node alpha.\n", revoked.stderr
    assert GrantStore(alpha.state_dir / "exec-grants.json").active() == []
    assert details("approvals", "grants")["grants"] == []


def test_process_list_names_each_sessions_node(
    sshd_nodes: list[SshdNode], state_dir: Path, stop_gateway: None
) -> None:
    configure(state_dir, sshd_nodes, FULL, FULL.replace('host = "auto"\n', ""))
    on_node = details("exec", "--background", "--session", "p", "--node", "alpha", "--", "sleep 60")
    here = details("exec", "--background", "--session", "p", "--", "for i in 1 2 3; do sleep 20; done")
    rows = details("process", "list", "--session-key", "p")["sessions"]
    assert {(r["sessionId"], r["node"]) for r in rows} == {
        (on_node["sessionId"], "alpha"),
        (here["sessionId"], None),
    }
    text = exechost("process", "list", "--session-key", "p").stdout.splitlines()
    assert text[0].split() == ["SESSION", "NODE", "STATUS", "RUNTIME", "COMMAND"]
    cells = {line.split()[0]: line.split()[1:] for line in text[1:]}
    assert cells[on_node["sessionId"]][0] == "alpha" and cells[here["sessionId"]][0] == "gateway"
    assert " ".join(cells[here["sessionId"]][3:]) == "for i in 1 2 3; do sleep 20; done"  # not `for i`
    only = details("process", "list", "--session-key", "p", "--node", "alpha")["sessions"]
    assert [r["sessionId"] for r in only] == [on_node["sessionId"]]
    # A node's lifecycle events name the node, never by its id alone.
    node_id = json.loads((sshd_nodes[0].state_dir / "node.json").read_text())["nodeId"]
    details("exec", "--background", "--session", "ev", "--node", "alpha", "--", "echo from-alpha")
    for _ in range(200):
        shown = exechost("events", "--session", "ev").stdout
        if "from-alpha" in shown:
            break
        time.sleep(0.1)
    assert "[agent:main:ev] [node alpha] Exec completed (" in shown and node_id not in shown, shown
