"""A view's mirrors stay under bwrap's 9,000 arguments however crowded the directories above the scripts
(engine.commands.pinned.MIRROR_BUDGET): the levels nearest each script are linked first."""

from __future__ import annotations

import os
from pathlib import Path

from engine.commands import pinned
from engine.commands.verified import Mirror


def test_mirrors_of_scripts_in_a_crowded_tree_fit_bwraps_argument_limit(tmp_path: Path) -> None:
    crowded = tmp_path / "tmp"
    crowded.mkdir()
    for i in range(1500):  # a machine's /tmp after a while
        (crowded / f"e{i:04}").touch()
    work = crowded / "w"
    work.mkdir()
    for name in ("a.sh", "b.sh", "c.sh", "lib.sh"):
        (work / name).write_text("true\n")
    builder = pinned._Builder(root=str(tmp_path / "root"))
    for i, name in enumerate(("a.sh", "b.sh", "c.sh")):
        builder.mirror(Mirror(f"/m/{i}", str(work), name, b"true\n", False))
    try:
        assert len(builder.args) < 9000, len(builder.args)
        # each script's own directory is whole in its mirror: its siblings (lib.sh) are reached by name
        for i in range(3):
            assert f"/m/{i}{work}/lib.sh" in builder.args
    finally:
        for fd in builder.fds:
            os.close(fd)
