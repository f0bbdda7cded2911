"""`exechost nodes …` against real sshd nodes: list, status, ping, add (checked), remove."""

from __future__ import annotations

import getpass
import json
import subprocess
from pathlib import Path

from engine.config.loader import load_config
from tests.helpers.sshd import EXECHOST, SshdNode


def cli(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([EXECHOST, "nodes", *args, "--json"], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}


def test_list_status_ping(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    code, out = cli("list")
    assert code == 0 and [n["name"] for n in out["details"]["nodes"]] == ["alpha", "beta"]
    code, out = cli("status")
    assert code == 0
    rows = out["details"]["nodes"]
    assert [r["state"] for r in rows] == ["connected", "connected"]
    assert all(r["rttMs"] > 0 and r["nodeId"] for r in rows)
    code, out = cli("ping", "alpha")
    assert code == 0 and out["details"]["state"] == "connected"
    code, out = cli("ping", "gamma")
    assert code != 0


def test_add_checks_the_link_and_remove(sshd_nodes: list[SshdNode], state_dir: Path) -> None:
    beta = sshd_nodes[1]
    code, out = cli("remove", "beta")
    assert code == 0 and "beta" not in load_config(state_dir / "config.toml").nodes
    args = [
        "--host",
        beta.addr,
        "--port",
        str(beta.port),
        "--user",
        getpass.getuser(),
        "--identity-file",
        str(beta.client_key),
        "--known-hosts",
        str(beta.known_hosts),
        "--exechost",
        EXECHOST,
    ]
    code, out = cli("add", "beta", *args, "--display-name", "Beta Box")
    assert code == 0, out
    assert out["details"]["state"] == "connected" and out["details"]["version"]
    cfg = load_config(state_dir / "config.toml").nodes["beta"]
    assert (cfg.host, cfg.port, cfg.display_name) == (beta.addr, beta.port, "Beta Box")
    # A node whose host key is not trusted is written, but reported unusable with what to run.
    empty = state_dir.parent / "empty_known_hosts"
    empty.write_text("")
    args[args.index("--known-hosts") + 1] = str(empty)
    code, out = cli("add", "beta2", *args)
    assert code == 1 and "ssh-keyscan" in out["details"]["lastError"]
    code, out = cli("add", "bad.name", "--host", "x")
    assert code == 2


def test_add_prints_a_table_and_sets_the_nodes_state_dir_and_env(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """Issue 22: `nodes add` prints aligned columns (it printed literal \\t and \\n escapes), and a node's
    own state dir and environment are keys of its table, passed quoted to `exechost node serve`."""
    beta = sshd_nodes[1]
    cli("remove", "beta")
    other = beta.root / "other state"  # a space: must stay one word on the remote command line
    other.mkdir(mode=0o700)
    # its host runs see the service's env only as its operator lists it (tools.exec.inheritEnv)
    (other / "config.toml").write_text(
        '[tools.exec]\nsecurity = "full"\nask = "off"\ninheritEnv = ["OPENCLAW_STATE_DIR", "GREETING"]\n'
    )
    args = [
        "nodes", "add", "beta", "--host", beta.addr, "--port", str(beta.port), "--user", getpass.getuser(),
        "--identity-file", str(beta.client_key), "--known-hosts", str(beta.known_hosts),
        "--exechost", EXECHOST, "--state-dir", str(other), "--env", "GREETING=hello there",
    ]  # fmt: skip
    proc = subprocess.run([EXECHOST, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\\t" not in proc.stdout and "\\n" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["NAME", "STATE", "RTT", "NODE", "ID", "EXECHOST", "ERROR"]
    assert lines[2].split()[:2] == ["beta", "connected"]
    cfg = load_config(state_dir / "config.toml").nodes["beta"]
    assert cfg.state_dir == str(other) and cfg.env == {"GREETING": "hello there"}
    listed = subprocess.run([EXECHOST, "nodes", "list"], capture_output=True, text=True, timeout=60)
    assert "\\t" not in listed.stdout and str(other) in listed.stdout
    (state_dir / "config.toml").write_text(
        '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
        + (state_dir / "config.toml").read_text()
    )
    try:
        ran = subprocess.run(
            [EXECHOST, "exec", "--json", "--node", "beta", "--", 'echo "$OPENCLAW_STATE_DIR|$GREETING"'],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert json.loads(ran.stdout)["text"].splitlines()[0] == f"{other}|hello there"
        assert (other / "node.json").exists() and not (beta.state_dir / "node.json").exists()
    finally:
        subprocess.run([EXECHOST, "gateway", "stop"], capture_output=True, timeout=60)


def test_node_env_names_are_validated(state_dir: Path) -> None:
    for bad, why in (
        ('env = {"-u" = "x"}', "environment names"),
        ('env = {A = "x\\ny"}', "line breaks"),
        ('stateDir = "/s"\nenv = {OPENCLAW_STATE_DIR = "/t"}', "not both"),
    ):
        (state_dir / "config.toml").write_text(f'[nodes.n]\nhost = "h"\n{bad}\n')
        try:
            load_config(state_dir / "config.toml")
        except Exception as exc:
            assert why in str(exc), exc
        else:
            raise AssertionError(f"accepted {bad}")
