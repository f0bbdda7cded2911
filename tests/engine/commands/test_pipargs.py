"""pip's argv read by pip's own grammar (optparse), against an allowlist of its options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands.pipargs import parse_pip, read_requirements
from engine.commands.treecode import PIP_LINE, PIP_PROJECT, binding, findings_for, unbound_findings

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
    # the file, bound by its bytes, and the project its line names, which nothing binds (issue 27 §4)
    assert [(os.path.basename(f.path), f.what == PIP_PROJECT) for f in found] == [
        ("r.txt", False),
        ("pkg", True),
    ]
    assert unbound_findings(binding(found)) == [str(tmp_path / "pkg")]
    found = findings_for(["pip3", "install", "-f", "dists", "x"], PIP, str(tmp_path), [])
    assert [os.path.basename(f.path) for f in found] == ["dists"]
    remote = findings_for(["pip3", "install", "-f", "https://example.org/x", "x"], PIP, str(tmp_path), [])
    assert remote == []


def test_requirements_files_are_read_with_pips_grammar_nested_and_all(tmp_path: Path) -> None:
    """Every line of every requirements file pip reads: names are data; a path, an editable, a `file:`
    URL or `name @ file:` is a project pip builds; nested `-r`/`-c` files (relative to the file naming
    them) are read and named; a VCS URL, `${VAR}` and an unknown option are lines exechost does not model."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "r.txt").write_text(
        "# comment\nrequests[socks]>=2,<3 ; python_version >= '3' --hash=sha256:00\n"
        "-r sub/more.txt\n-c c.txt\nfoo==1 \\\n  --hash=sha256:11\n-r r.txt\n"
    )
    (tmp_path / "c.txt").write_text("bar<2\n")
    (tmp_path / "sub" / "more.txt").write_text(
        "-e ./edit[dev]\n./pkg\nq @ file:///opt/q\nfile:zz\n--find-links dists\n-r ../c.txt\n"
    )
    reads = read_requirements(["r.txt"], str(tmp_path))
    assert reads.files == [
        str(tmp_path / "r.txt"),
        str(tmp_path / "sub" / "more.txt"),
        str(tmp_path / "c.txt"),
    ]
    assert reads.projects == [str(tmp_path / "edit"), str(tmp_path / "pkg"), "/opt/q", str(tmp_path / "zz")]
    assert reads.sources == [("dists", str(tmp_path / "sub"))]
    assert reads.problems == []
    (tmp_path / "c.txt").write_text("git+https://example.org/x.git#egg=x\n${HOME}/p\n--global-option=x\n")
    problems = [why for _path, why in read_requirements(["r.txt"], str(tmp_path)).problems]
    assert len(problems) == 3 and "VCS" in problems[0] and "environment" in problems[1], problems


def test_a_nested_requirements_file_is_bound_and_an_unmodelled_line_is_never_saved(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("-r more.txt\n")
    (tmp_path / "more.txt").write_text("requests\n")
    found = findings_for(["pip3", "download", "-r", "r.txt"], PIP, str(tmp_path), [])
    assert sorted(os.path.basename(f.path) for f in found) == ["more.txt", "r.txt"]
    assert unbound_findings(binding(found)) == []
    (tmp_path / "more.txt").write_text("git+file:///srv/x.git#egg=x\n")
    found = findings_for(["pip3", "download", "-r", "r.txt"], PIP, str(tmp_path), [])
    assert any(f.what.startswith(PIP_LINE) for f in found), found
    assert unbound_findings(binding(found)) == [str(tmp_path / "more.txt")]
