"""Issue 30: a node run reads like a local one. A command that exits 3 on a node makes `exechost exec` exit
3 and says `(Command exited with code 3)` after its output, as the same command run on the gateway does;
a timeout stays a failure. Through the real CLI, the daemon it starts and a real sshd node."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.sshd import EXECHOST, SshdNode

NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
AUTO = '[tools.exec]\nhost = "auto"\nsecurity = "full"\nask = "off"\n'


def exechost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXECHOST, *args], capture_output=True, text=True, timeout=90)


@pytest.fixture
def stop_gateway(state_dir: Path) -> Iterator[None]:
    yield
    exechost("gateway", "stop")


def test_a_node_command_exiting_3_reports_like_a_local_one(
    sshd_nodes: list[SshdNode], state_dir: Path, stop_gateway: None
) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    (state_dir / "config.toml").write_text(AUTO + "".join(n.config_toml() for n in sshd_nodes))
    command = "echo out; echo err >&2; exit 3"

    local = exechost("exec", "--", command)
    remote = exechost("exec", "--node", "alpha", "--", command)
    assert local.returncode == 3, local.stdout + local.stderr
    assert remote.returncode == 3, remote.stdout + remote.stderr
    assert local.stdout.rstrip("\n").endswith("\n\n(Command exited with code 3)"), local.stdout
    assert remote.stdout.rstrip("\n").endswith("\n\n(Command exited with code 3)\n(ran on: node alpha)"), (
        remote.stdout
    )
    # out, err (the local run may open with the note on a workdir in a read-only tree: the repo's here)
    shown = local.stdout.split("\n\n(Command")[0]
    if shown.startswith("The workdir "):
        shown = shown.split("\n\n", 1)[1]
    assert remote.stdout.split("\n\n(Command")[0] == shown

    as_json = json.loads(exechost("exec", "--json", "--node", "alpha", "--", "exit 4").stdout)["details"]
    assert (as_json["status"], as_json["exitCode"]) == ("completed", 4)
    assert as_json["aggregated"] == "(Command exited with code 4)"

    fine = exechost("exec", "--node", "alpha", "--", "echo fine")
    assert fine.returncode == 0 and "exited with code" not in fine.stdout

    late = exechost("exec", "--json", "--node", "alpha", "--timeout", "1", "--", "sleep 30")
    details = json.loads(late.stdout)["details"]
    assert late.returncode == 1 and details["status"] == "failed" and details["timedOut"] is True
    assert "exited with code" not in late.stdout
