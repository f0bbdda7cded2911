"""Issue 30 item 1: `exec --node NAME` runs on that node or is refused naming the node and the setting —
never silently on the gateway; an unknown node names the known ones whatever the host setting. Through the
real CLI, the daemon it starts, and real sshd nodes."""

from __future__ import annotations

import getpass
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.sshd import EXECHOST, SshdNode

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


def exechost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXECHOST, *args], capture_output=True, text=True, timeout=90)


def set_exec_table(state_dir: Path, nodes: list[SshdNode], table: str) -> None:
    """The gateway's config: this [tools.exec] table, then the nodes (the running gateway follows it)."""
    (state_dir / "config.toml").write_text(table + "".join(n.config_toml() for n in nodes))


@pytest.fixture
def stop_gateway(state_dir: Path) -> Iterator[None]:
    yield
    exechost("gateway", "stop")


def pending(state_dir: Path) -> list[dict]:
    out = exechost("approvals", "pending", "--json")
    assert out.returncode == 0, out.stderr
    return list(json.loads(out.stdout)["details"]["approvals"])


def test_a_named_node_runs_there_or_is_refused_naming_the_setting(
    sshd_nodes: list[SshdNode], state_dir: Path, stop_gateway: None
) -> None:
    alpha, beta = sshd_nodes
    for node in sshd_nodes:
        (node.state_dir / "config.toml").write_text(NODE_FULL)

    # The built-in host (sandbox, with no sandbox runtime: direct on the gateway) runs nothing on a node.
    set_exec_table(state_dir, sshd_nodes, "")
    refused = exechost("exec", "--node", "alpha", "--", "uname -n")
    assert refused.returncode == 1 and refused.stdout == ""
    assert (
        'exec host not allowed for node=alpha: tools.exec.host is "sandbox" (built-in default), which runs '
        'nothing on a node; set tools.exec.host = "auto" or "node" to run a call that names a node there. '
        "Nothing ran."
    ) in refused.stderr
    assert pending(state_dir) == []  # no ask labelled with the node was raised for a gateway run

    # An unknown node is named as such, with the known ones, whatever the host setting.
    for table in (
        "",
        '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n',
        '[tools.exec]\nhost = "node"\n',
    ):
        set_exec_table(state_dir, sshd_nodes, table)
        unknown = exechost("exec", "--node", "nosuch", "--", "uname -n")
        assert unknown.returncode == 1 and "unknown node: nosuch (known: alpha, beta)" in unknown.stderr, (
            table
        )
    as_json = exechost("exec", "--json", "--node", "nosuch", "--", "uname -n")
    assert json.loads(as_json.stdout)["details"] == {
        "status": "error",
        "error": "unknown node: nosuch (known: alpha, beta)",
        "exitCode": None,
    }

    # host=gateway: the same refusal, naming the key that set it.
    set_exec_table(state_dir, sshd_nodes, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    refused = exechost("exec", "--node", "alpha", "--", "uname -n")
    assert refused.returncode == 1
    assert (
        'tools.exec.host is "gateway" (config tools.exec)' in refused.stderr
        and "Nothing ran." in refused.stderr
    )

    # host=auto: a call that names a node runs there; a call that names none runs on the gateway.
    set_exec_table(state_dir, sshd_nodes, '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n')
    for node in (alpha, beta):
        ran = exechost("exec", "--json", "--node", node.name, "--", 'printf %s "$HOME"')
        assert ran.returncode == 0, ran.stdout + ran.stderr
        result = json.loads(ran.stdout)
        assert result["details"]["ranOn"] == f"node {node.name}"
        assert result["text"] == f"{node.root}\n(ran on: node {node.name})"  # the node login's HOME
    here = exechost("exec", "--json", "--", 'printf %s "$HOME"')
    assert json.loads(here.stdout)["details"]["ranOn"] == "gateway"
    # A call that asks for the gateway and names a node is a contradiction, not a choice.
    both = exechost("exec", "--host", "gateway", "--node", "alpha", "--", "uname -n")
    assert both.returncode == 1
    assert "exec host=gateway cannot run on node=alpha: ask for host=node" in both.stderr

    # `policy check` explains the same outcome before anything runs.
    check = exechost("policy", "check", "--json", "--node", "alpha", "--", "uname -n")
    assert (json.loads(check.stdout)["host"], json.loads(check.stdout)["node"]) == ("node", "alpha")
    check = exechost("policy", "check", "--node", "nosuch", "--", "uname -n")
    assert check.returncode == 2 and "unknown node: nosuch (known: alpha, beta)" in check.stderr
    set_exec_table(state_dir, sshd_nodes, "")
    check = exechost("policy", "check", "--node", "alpha", "--", "uname -n")
    assert check.stdout.startswith("Decision: DENY — exec host not allowed for node=alpha: tools.exec.host")


def test_nodes_add_names_the_settings_a_node_run_still_needs(
    sshd_nodes: list[SshdNode], state_dir: Path, stop_gateway: None
) -> None:
    beta = sshd_nodes[1]
    add = [
        "nodes", "add", "beta", "--host", beta.addr, "--port", str(beta.port), "--user", getpass.getuser(),
        "--identity-file", str(beta.client_key), "--known-hosts", str(beta.known_hosts),
        "--exechost", EXECHOST,
    ]  # fmt: skip
    config = state_dir / "config.toml"
    security = 'tools.exec.security = "allowlist" (host=node is denied; the node\'s own policy decides)'
    then = "then: exechost exec --node beta -- uname -a"
    for table, hint in (
        (
            "",
            f'Next: set tools.exec.host = "auto" (it is "sandbox") and {security} in {config}, {then}',
        ),
        (
            '[tools.exec]\nhost = "node"\n',
            f"Next: set {security} in {config}, {then}",
        ),
        (
            '[tools.exec]\nhost = "auto"\nsecurity = "allowlist"\n',
            "Next: exechost exec --node beta -- uname -a",
        ),
    ):
        set_exec_table(state_dir, sshd_nodes[:1], table)
        added = exechost(*add)
        assert added.returncode == 0, added.stdout + added.stderr
        assert added.stdout.splitlines()[-1] == hint
