"""`pathPrepend` as a new operator configures it: a linked dir runs its programs, a dir a host command
could plant in is left out of PATH with a warning that says so (both ran or failed silently before)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.attacks.harness import attempt


def _bin(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "hello-pp").write_text("#!/bin/sh\necho hello from pathPrepend\n")
    os.chmod(where / "hello-pp", 0o755)
    return where


def _config(entry: Path) -> str:
    return f'[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\npathPrepend = ["{entry}"]\n'


async def test_a_linked_path_prepend_dir_runs_its_programs(state_dir: Path) -> None:
    """A link to the dir (an operator's `~/bin -> ~/tools/bin`) made the view's read-only bind of it fail
    with bwrap's "Can't bind mount …: No such file or directory"; PATH now names the dir it resolves to."""
    home = Path(os.environ["HOME"])  # a PATH dir in the home stays (the home is read-only in the view)
    real = _bin(home / "tools" / "bin")
    (home / "bin").symlink_to(real)
    details = await attempt(state_dir, "hello-pp; echo $PATH", config=_config(home / "bin"))
    assert details["status"] == "completed", details["_text"]
    out = details["_text"]
    assert "hello from pathPrepend" in out and out.split("\n")[1].startswith(f"{real}:"), out


@pytest.mark.parametrize("linked", [False, True], ids=["dir", "link"])
async def test_a_path_prepend_dir_left_out_of_path_says_so(state_dir: Path, linked: bool) -> None:
    """A dir in /tmp (another account may exchange what is in it) is not searched: the run says why,
    instead of a bare "not found" (or, for a link to it, bwrap's "Can't bind mount")."""
    planted = _bin(state_dir.parent / "pp" / "bin")
    if linked:
        (state_dir.parent / "pp" / "link").symlink_to(planted)
        planted = state_dir.parent / "pp" / "link"
    details = await attempt(state_dir, "hello-pp", config=_config(planted))
    assert details["status"] == "failed", details["_text"]
    assert f"pathPrepend dir {planted} is not on PATH" in details["_text"], details["_text"]
