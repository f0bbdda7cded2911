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
