"""A bwrap rootfs is refused when another account may change a PATH dir in it (engine.sandbox.rootfstrust)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.sandbox import rootfstrust


def _tree(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    tree = tmp_path / "rootfs"
    (tree / "usr" / "bin").mkdir(parents=True, mode=0o755)
    os.symlink("usr/bin", tree / "bin")
    return tree


def test_a_tree_of_ours_alone_is_taken(tmp_path: Path) -> None:
    assert rootfstrust.refusal(str(_tree(tmp_path)), os.geteuid()) == ""


def test_a_group_writable_path_dir_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    os.chmod(tree / "usr" / "bin", 0o775)
    assert "usr/bin is writable" in rootfstrust.refusal(str(tree), os.geteuid())


def test_a_link_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    os.symlink("../../../../etc", tree / "sbin")
    assert "out of the tree" in rootfstrust.refusal(str(tree), os.geteuid())
