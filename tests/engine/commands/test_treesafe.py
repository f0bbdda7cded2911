"""The programs known to take no code from their tree, read with the options that make them run one."""

from __future__ import annotations

import pytest

from engine.commands.treesafe import is_tree_safe


@pytest.mark.parametrize(
    "argv",
    [
        ["tree", "-R", "-H", ".", "-L", "1", "-o", "index.html"],
        ["tree", "-aR", "-H", ".", "-L", "1"],  # in a cluster
        ["tree", "-H", ".", "-L", "1", "-dRf"],
        ["tree", "-P", "-R"],  # an option's value that reads as the option asks too
    ],
)
def test_tree_rerunning_itself_runs_a_program(argv: list[str]) -> None:
    """tree's -R re-runs tree through system() with a directory's name (tree <= 1.8.0): it asks."""
    assert not is_tree_safe(argv, "/usr/bin/tree")


@pytest.mark.parametrize(
    "argv",
    [["tree"], ["tree", "-L", "2", "-a"], ["tree", "README"], ["tree", "-I", "Rakefile"], ["tree", "--du"]],
)
def test_tree_without_rerunning_is_safe(argv: list[str]) -> None:
    assert is_tree_safe(argv, "/usr/bin/tree")


def test_the_letter_is_trees_alone() -> None:
    """`-R` is a program-running letter of tree's, not of ls's (recursion) or grep's."""
    assert is_tree_safe(["ls", "-laR"], "/usr/bin/ls")
    assert is_tree_safe(["grep", "-R", "x", "."], "/usr/bin/grep")
