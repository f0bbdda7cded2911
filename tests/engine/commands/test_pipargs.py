"""pip's argv read by pip's own grammar (optparse), against an allowlist of its options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands.pipargs import parse_pip
from engine.commands.treecode import findings_for

PIP = ("/usr/bin/pip3",)


@pytest.mark.parametrize(
    ("argv", "files", "editables", "operands"),
    [
        ("pip3 install -qr r.txt", ["r.txt"], [], []),
        ("pip3 install -qrr.txt x", ["r.txt"], [], ["x"]),
        ("pip3 install --constr=c.txt --edit=pkg", ["c.txt"], ["pkg"], []),
        ("pip3 install --requirement r.txt -c c.txt", ["r.txt", "c.txt"], [], []),
        ("pip3 -q install -Ue pkg .", [], ["pkg"], ["."]),
        ("pip3 install . -r r.txt", ["r.txt"], [], ["."]),  # options after operands
        ("pip3 install -- -r", [], [], ["-r"]),  # after `--`: operands
        ("pip3 --log install install ./x", [], [], ["./x"]),  # the command word pip takes out
        ("pip3 install --group sub/pyproject.toml:dev", ["sub/pyproject.toml"], [], []),
        ("pip3 wheel --no-deps -w out -r r.txt", ["r.txt"], [], []),
    ],
)
def test_pip_options_as_optparse_reads_them(
    argv: str, files: list[str], editables: list[str], operands: list[str]
) -> None:
    args = parse_pip(argv.split())
    assert args.problem is None, args.problem
    assert (args.files, args.editables, args.operands) == (files, editables, operands)


@pytest.mark.parametrize(
    "argv",
    [
        "pip3 --python ./py list",  # pip runs itself with that interpreter
        "pip3 list --pyth=./py",
        "pip3 install --global-option=x y",  # not on the allowlist (pip 23 passed it to setup.py)
        "pip3 install -qZ x",
        "pip3 install --req=r.txt",  # ambiguous: pip fails, and exechost does not guess
        "pip3 config edit",
        "pip3 frobnicate",
        "pip3 --bogus install x",
    ],
)
def test_what_pip_reads_that_is_not_modelled_is_a_problem(argv: str) -> None:
    assert parse_pip(argv.split()).problem is not None


@pytest.mark.parametrize(
    "argv",
    [
        "pip3 install -q requests",
        "pip3 install --upgrade --user -i https://pypi.org/simple requests==2.0",
        "pip3 list --outdated --format=json",
        "pip3 show -f requests",
        "pip3 --version",
        "pip3 config list",
    ],
)
def test_plain_pip_commands_find_nothing_in_an_empty_tree(tmp_path: Path, argv: str) -> None:
    assert findings_for(argv.split(), PIP, str(tmp_path), []) == []


def test_a_cluster_names_the_requirements_file_and_a_local_source_is_named(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("./pkg\n")
    (tmp_path / "dists").mkdir()
    found = findings_for(["pip3", "install", "-qr", "r.txt"], PIP, str(tmp_path), [])
    assert [os.path.basename(f.path) for f in found] == ["r.txt"]
    found = findings_for(["pip3", "install", "-f", "dists", "x"], PIP, str(tmp_path), [])
    assert [os.path.basename(f.path) for f in found] == ["dists"]
    remote = findings_for(["pip3", "install", "-f", "https://example.org/x", "x"], PIP, str(tmp_path), [])
    assert remote == []
