"""The host view at the gateway: `security = "full"` runs see no state dir either, a cwd inside it is
refused with a clear error, and `hostView = "none"` is the documented opt-out (the state dir visible)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


def _token(state: Path) -> str:
    return str(json.loads((state / "operator.json").read_text())["token"])


@needs_bwrap
async def test_a_full_security_run_sees_an_empty_state_dir(state_dir: Path, tmp_path: Path) -> None:
    command = (
        f"ls -A {state_dir}; cat {state_dir}/operator.json; echo > {state_dir}/exec-approvals.json; echo ok"
    )
    details = await attempt(state_dir, command, config=FULL, workdir=str(tmp_path))
    # stdout and stderr are two pipes: cat's complaint may be read after the `ok` written later
    assert details["status"] == "completed" and "ok" in details["_text"].splitlines()
    assert _token(state_dir) not in details["_text"]
    assert "operator.json" not in details["_text"].split("cat:")[0]  # `ls -A` listed nothing


@needs_bwrap
async def test_a_cwd_inside_the_state_dir_is_refused_naming_why(state_dir: Path) -> None:
    (state_dir / "w").mkdir()
    with pytest.raises(RemoteError, match="inside the state dir"):
        await attempt(state_dir, "true", config=FULL, workdir=str(state_dir / "w"))


async def test_host_view_none_is_the_opt_out_and_gives_the_state_dir_away(
    state_dir: Path, tmp_path: Path
) -> None:
    config = FULL + 'hostView = "none"\n'
    details = await attempt(state_dir, f"cat {state_dir}/operator.json", config=config, workdir=str(tmp_path))
    assert _token(state_dir) in details["_text"]


@needs_bwrap
async def test_a_command_exiting_130_is_not_reported_as_interrupted(state_dir: Path, tmp_path: Path) -> None:
    """The view tells the command's exit as it was: its own `exit 130` is exit code 130, a death by SIGINT
    is SIGINT (a bwrap per run said 128+n for both)."""
    own = await attempt(state_dir, "exit 130", config=FULL, workdir=str(tmp_path))
    killed = await attempt(state_dir, "kill -INT $$", config=FULL, workdir=str(tmp_path))
    assert own["exitCode"] == 130 and "exitSignal" not in own and "SIGINT" not in own["_text"]
    assert killed["exitCode"] is None and killed["exitSignal"] == "SIGINT"
