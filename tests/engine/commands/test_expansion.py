"""Glob and $PWD words expanded by the host shell itself, and everything else left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands.expansion import expand


def test_globs_and_pwd_expand_as_the_shell_expands_them(tmp_path: Path) -> None:
    (tmp_path / "x.sh").write_text("")
    (tmp_path / "y.sh").write_text("")
    cwd = str(tmp_path)
    assert expand("sh x.s?", cwd).text == "sh x.sh"  # type: ignore[union-attr]
    assert expand("sh *.sh -v", cwd).text == "sh x.sh y.sh -v"  # type: ignore[union-attr]
    assert expand("sh ${PWD}/x.s[h]", cwd).text == f"sh {cwd}/x.sh"  # type: ignore[union-attr]
    assert expand("sh nomatch.?", cwd).text == "sh 'nomatch.?'"  # type: ignore[union-attr]  # left as is


def test_a_pwd_with_a_blank_splits_as_the_shell_splits_it(tmp_path: Path) -> None:
    where = tmp_path / "a b"
    where.mkdir()
    out = expand("ls $PWD", str(where))
    assert out is not None and out.expanded[0][1] == (str(tmp_path / "a"), "b")


@pytest.mark.parametrize(
    "command",
    [
        "sh x.sh",  # nothing to expand
        "sh $HOME/x.s?",  # another parameter
        "sh ~/x.s?",
        "sh 'x.s?'",
        "X=1 sh x.s?",  # an assignment prefix
        "sh x.s? ; id",
        "sh x.s? > out",
        "sh {a,b}.sh",
        "sh $(id)*",
        "sh `id`*",
        "sh x.s? && sh y.s?",
    ],
)
def test_anything_else_is_left_alone(tmp_path: Path, command: str) -> None:
    assert expand(command, str(tmp_path)) is None


def test_the_state_dir_is_hidden_from_the_expansion_as_from_the_run(state_dir: Path, tmp_path: Path) -> None:
    """The ask shows what matched; a glob into the state dir (which host runs see as an empty tmpfs) must
    not list it to the agent."""
    (state_dir / "secret-name").write_text("")
    out = expand(f"ls {state_dir}/*", str(tmp_path))
    assert out is not None and out.expanded[0][1] == (f"{state_dir}/*",), out
