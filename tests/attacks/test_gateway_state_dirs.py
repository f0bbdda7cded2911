"""Every gateway's state dir is covered in every other gateway's host views of the same account (fresh
round 14 c, engine.commands.gatewaydirs): variants of the second gateway's place beside round 14 c's
outside the home."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.commands import gatewaydirs
from engine.protocol.frames import RemoteError
from tests.attacks.harness import ALLOWLIST, attempt
from tests.helpers.gateway import FULL, gateway, write_config


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
async def test_another_gateways_state_dir_inside_a_host_writable_dir_is_covered(state_dir: Path) -> None:
    """A hostWritable dir is shown as it is (no mode judged in it): gateway B's state dir made there (0700)
    was agent main's to read. Now B's recorded state dir is covered, and a hostWritable dir holding a
    covered one is refused with what to change, as one holding a protected path is: nothing runs."""
    home = Path(os.environ["HOME"])
    work = home / "work"
    work.mkdir()
    other = work / ".exechost-b"
    other.mkdir(mode=0o700)
    gatewaydirs.claim(
        str(home), str(other)
    )  # the operator's CLI claims a new dir before writing its config (fresh round 17 c)
    write_config(other, FULL)
    async with gateway(other):
        pass
    token = json.loads((other / "operator.json").read_text())["token"]
    cat = shutil.which("cat") or "/usr/bin/cat"
    config = ALLOWLIST + 'hostWritable = ["~/work"]\n'
    refusal = r"hostWritable names ~/work, which holds .*\.exechost-b"
    with pytest.raises(RemoteError, match=refusal) as refused:
        await attempt(state_dir, f"cat {other}/operator.json", allow=[(cat, None)], config=config)
    assert token not in str(refused.value)
