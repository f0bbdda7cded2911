"""Issue 27 §1 variants of fresh round 10 a's: a program the operator's configs run, named as an argument
of an interpreter (not the first word), rewritten by a host run and run later outside every view."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.protocol.frames import OPERATOR_TOKEN_NAME, read_token
from tests.helpers.gateway import connect, gateway, write_config

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
FULL_HOST = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


async def _exec(state: Path, command: str) -> dict[str, object]:
    client = await connect(state)
    try:
        result = await client.request(
            "exec", {"command": command, "agentId": "ops", "yieldMs": 60000, "timeout": 60}
        )
    finally:
        await client.close()
    details: dict[str, object] = result["details"]
    return details


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
async def test_a_script_an_interpreter_in_diff_external_runs_is_kept(state_dir: Path) -> None:
    """`diff.external = sh /opt/team/differ`: the program is `sh`, the script its argument. Every path
    the command line names is kept, so the run cannot rewrite the script the operator's `git diff` runs."""
    home = Path(os.environ["HOME"])
    team = state_dir.parent / "opt-team"
    team.mkdir()
    differ = team / "differ"
    differ.write_text("exit 0\n")
    (home / ".gitconfig").write_text(f"[diff]\n\texternal = sh {differ}\n")
    marker = state_dir.parent / "differ-ran"
    write_config(state_dir, FULL_HOST)
    async with gateway(state_dir):
        made = await _exec(state_dir, f"echo 'cat {state_dir}/operator.json > {marker}' > {differ}")
        assert made["status"] == "completed", made
    a, b = state_dir.parent / "a", state_dir.parent / "b"
    a.write_text("1\n")
    b.write_text("2\n")
    subprocess.run(
        ["git", "diff", "--no-index", str(a), str(b)], capture_output=True, timeout=30, check=False
    )
    leaked = marker.read_text() if marker.exists() else ""
    token = read_token(state_dir, OPERATOR_TOKEN_NAME)
    assert not (token and token in leaked), "the operator's git diff ran a script a host run wrote"
    assert differ.read_text() == "exit 0\n"
