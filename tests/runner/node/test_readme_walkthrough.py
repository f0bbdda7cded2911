"""Issue 30: the README's node walkthrough, pasted into fresh shells (a fresh HOME on each side, no state dir
yet) against a real sshd node; only the placeholders (host, port, user, key, exechost's path) are replaced."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.sshd import EXECHOST, SSHD, SshdNode, _free_port, _keygen

README = Path(__file__).resolve().parents[3] / "README.md"


def walkthrough() -> tuple[list[str], list[str]]:
    """The two shell blocks (on the node, on the gateway) of the README's node walkthrough."""
    text = README.read_text()
    start = text.index("**From `nodes add` to an approved command on the node**")
    node, gateway = re.findall(r"```sh\n(.*?)```", text[start:], re.S)[:2]
    return node.splitlines(), gateway.splitlines()


def commands(lines: list[str]) -> list[str]:
    return [line.split("  #")[0].strip() for line in lines if line.strip() and not line.startswith("#")]


def shell(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_node_walkthrough_works_in_fresh_shells(tmp_path: Path) -> None:
    if not os.path.exists(SSHD):
        pytest.fail("sshd missing: scripts/setup.sh installs openssh-server")
    root = Path(str(tmp_path)[:40].rstrip("/") + "-w") if len(str(tmp_path)) > 40 else tmp_path
    root.mkdir(exist_ok=True, mode=0o700)
    gw_home, node_root = root / "gw", root / "node"
    gw_home.mkdir(mode=0o700)
    node_root.mkdir(mode=0o700)
    key = root / "id_ed25519"
    _keygen(key)
    # The node's state dir is its ~/.openclaw, made by step 1 itself (sshd passes it to the node's exechost).
    node = SshdNode("build", "127.0.0.4", _free_port("127.0.0.4"), node_root, node_root / ".openclaw", key,
                    gw_home / ".ssh" / "known_hosts")  # fmt: skip
    _keygen(node.host_key)
    shutil.copy(f"{key}.pub", node_root / "authorized_keys")
    base = {
        "PATH": f"{Path(EXECHOST).parent}:/usr/bin:/bin",
        "EXECHOST_TEST_RUN": os.environ["EXECHOST_TEST_RUN"],
    }
    # No OPENCLAW_STATE_DIR: the default ~/.openclaw, as a user has it. exechost finds ~ in the passwd file
    # (HOME may lie), so OPENCLAW_HOME points it at this test's home: never the real user's.
    gw_env = {**base, "HOME": str(gw_home), "OPENCLAW_HOME": str(gw_home), "EXECHOST_HOST_HOME": str(gw_home)}
    on_node, on_gateway = walkthrough()
    node.start()
    try:
        # 1. On the node (pip install stands for this checkout's venv).
        step1 = [c for c in commands(on_node) if not c.startswith("pip install")]
        done = shell(
            "\n".join(step1),
            {
                **base,
                "HOME": str(node_root),
                "OPENCLAW_HOME": str(node_root),
                "EXECHOST_HOST_HOME": str(node_root),
            },
        )
        assert done.returncode == 0, done.stderr
        assert (node.state_dir / "config.toml").exists()

        # 2. On the gateway: everything up to the first exec, placeholders replaced.
        script = commands(on_gateway)
        first_exec = next(i for i, c in enumerate(script) if c.startswith("exechost exec"))

        def fill(cmd: str) -> str:
            cmd = cmd.replace("-p 22 build.example", f"-p {node.port} {node.addr}")
            cmd = cmd.replace("--host build.example", f"--host {node.addr} --port {node.port}")
            cmd = cmd.replace("--user ops", f"--user {getpass.getuser()} --exechost {EXECHOST}")
            return cmd

        for placeholder in ("-p 22 build.example", "--host build.example", "--user ops"):
            assert placeholder in "\n".join(script), placeholder  # the README moved on: update fill()
        (gw_home / ".ssh").mkdir(mode=0o700)
        shutil.copy(key, gw_home / ".ssh" / "id_ed25519")
        setup = shell("\n".join(fill(c) for c in script[:first_exec]), gw_env)
        assert setup.returncode == 0, setup.stdout + setup.stderr
        assert "Next: exechost exec --node build -- uname -a" in setup.stdout
        assert "build  connected" in setup.stdout

        # 3. The exec: no approver attached, so it answers approval-pending at once (exit 10).
        asked = shell(script[first_exec], gw_env)
        assert asked.returncode == 10, asked.stdout + asked.stderr
        assert "Host: node" in asked.stdout, asked.stdout

        # 4. The pending ask's id, then the approve line with it.
        listed = shell(script[first_exec + 1] + " --json", gw_env)
        pending = json.loads(listed.stdout)["details"]["approvals"]
        assert len(pending) == 1
        slug = pending[0]["slug"]
        approve = next(c for c in script if c.startswith("exechost approve"))
        approved = shell(approve.replace("1a2b3c4d", slug), gw_env)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert approved.stdout == f"Approval allow-once submitted for {slug}.\n"
        # The run's result arrives as a system event once the node has run it.
        events = next(c for c in script if c.startswith("exechost events"))
        for _ in range(200):
            shown = shell(events, gw_env)
            if "Exec finished (node=build" in shown.stdout:
                break
            time.sleep(0.1)
        assert "[agent:main] Exec finished (node=build gateway id=" in shown.stdout, (
            shown.stdout + shown.stderr
        )
        assert os.uname().release in shown.stdout  # `uname -a`, run on the node
    finally:
        shell("exechost gateway stop", gw_env)
        node.stop()
        shutil.rmtree(root, ignore_errors=True)
