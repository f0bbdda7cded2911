"""Code a host program takes from files its argv names (engine.commands.treefiles.argv_code) is bound by
its bytes, and a tree no bytes hold (an unmodelled program's cwd, a toolchain dir, node_modules/.bin)
asks with allow-once only: the legitimate side of each closed hole in tests/attacks/test_fresh_round4_g.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands.treecode import MANIFEST_TREE, Finding, binding, unbound_findings
from engine.config.loader import load_config_text
from engine.policy.decision import Decision, evaluate

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}


def _decide(command: str, cwd: Path) -> Decision:
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    return evaluate(command, config=config, store=ApprovalsStore(), cwd=str(cwd), env=ENV)


def _needs(program: str) -> None:
    if shutil.which(program, path=ENV["PATH"]) is None:
        pytest.skip(f"{program} is not installed")


def test_a_cmake_script_is_bound_but_not_saveable_in_a_writable_tree(tmp_path: Path) -> None:
    _needs("cmake")
    script = tmp_path / "x.cmake"
    script.write_text('message("hi")\n')
    first = _decide("cmake -P x.cmake", tmp_path)
    # What it include()s is not bound (treecode.MANIFEST_TREE): this run only, its own bytes still bound.
    assert "allow-always" not in first.allowed_decisions, first.warnings
    assert first.tree is not None and f"tree:{script}=" in first.tree.binding
    script.write_text('message("other")\n')
    again = _decide("cmake -P x.cmake", tmp_path)
    assert again.tree is not None and again.tree.binding != first.tree.binding
    assert first.tree.problem() is not None  # the spawn's re-vet refuses the old approval


@pytest.mark.parametrize("spelling", ["-C init.cmake", "-Cinit.cmake", "-DCMAKE_PROJECT_INCLUDE=init.cmake"])
def test_every_spelling_of_a_file_a_build_tool_reads_is_bound(tmp_path: Path, spelling: str) -> None:
    _needs("cmake")
    (tmp_path / "init.cmake").write_text("set(X 1)\n")
    d = _decide(f"cmake {spelling} -S .", tmp_path)
    assert d.tree is not None and f"tree:{tmp_path / 'init.cmake'}=" in d.tree.binding, d.tree


def test_a_pip_archive_operand_is_bound(tmp_path: Path) -> None:
    _needs("pip3")
    archive = tmp_path / "sub-1.tar.gz"
    archive.write_bytes(b"not really an archive")
    d = _decide("pip3 install sub-1.tar.gz", tmp_path)
    assert "allow-always" in d.allowed_decisions, d.warnings
    assert d.tree is not None and f"tree:{archive}=" in d.tree.binding


def test_an_interpreter_running_a_script_file_stays_saveable(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("print('x')\n")
    assert "allow-always" in _decide("python3 x.py", tmp_path).allowed_decisions
    # The same interpreter taking its code inline imports from the cwd, which no bytes hold.
    assert "allow-always" not in _decide("python3 -c 'import x'", tmp_path).allowed_decisions


def test_an_unmodelled_program_in_a_writable_tree_is_allow_once_only(tmp_path: Path) -> None:
    _needs("ctest")
    (tmp_path / "CTestTestfile.cmake").write_text("add_test(t true)\n")
    d = _decide("ctest", tmp_path)
    assert d.verdict == "ask" and d.allowed_decisions == ("allow-once", "deny"), d.allowed_decisions
    assert any("cannot bind to its bytes" in w for w in d.warnings), d.warnings


def test_a_response_file_outside_the_cwd_is_a_tree_the_program_reads(tmp_path: Path) -> None:
    from engine.commands.treefiles import unmodelled_trees

    (tmp_path / "b.rsp").write_text("-O2\n")
    trees = list(unmodelled_trees(["gcc", f"@{tmp_path}/b.rsp", "-c", "m.c"], "/"))
    assert str(tmp_path) in trees, trees  # judged like the cwd: asks, allow-once only, when writable


def test_a_rustup_toolchain_name_is_no_finding_but_a_path_is(tmp_path: Path) -> None:
    (tmp_path / "tc" / "bin").mkdir(parents=True)
    (tmp_path / "stable").mkdir()  # a directory named like a toolchain: rustup reads `+stable` as a name
    from engine.commands.treecode import findings_for

    named = findings_for(["cargo", "+stable", "--version"], ["/usr/bin/cargo"], str(tmp_path), [])
    assert all(f.path != str(tmp_path / "stable") for f in named), named
    path = findings_for(["cargo", "+./tc", "--version"], ["/usr/bin/cargo"], str(tmp_path), [])
    unbound = [os.path.realpath(p) for p in unbound_findings(binding(path))]
    assert str(tmp_path / "tc") in unbound, path


def test_npx_binds_the_project_unless_it_has_local_programs(tmp_path: Path) -> None:
    from engine.commands.treecode import findings_for

    (tmp_path / "package.json").write_text("{}\n")
    found = findings_for(["npx", "hello"], ["/usr/bin/npx"], str(tmp_path), [])
    # (`hello` is the code npx runs: its operand asks wherever it runs, toolargv.)
    assert [f.path for f in found if f.what != MANIFEST_TREE] == [
        str(tmp_path / "package.json"),
        "the command line",
    ]
    # What package.json names to run is not bound: the writable tree itself is the unbound finding.
    assert unbound_findings(binding(found)) == [str(tmp_path)]
    (tmp_path / "node_modules" / ".bin").mkdir(parents=True)
    found = findings_for(["npx", "hello"], ["/usr/bin/npx"], str(tmp_path), [])
    assert str(tmp_path / "node_modules" / ".bin") in unbound_findings(binding(found))


def test_a_tree_file_past_the_cap_is_unbound_not_bound_by_its_prefix(tmp_path: Path) -> None:
    big = tmp_path / "Makefile"
    with open(big, "wb") as f:
        f.truncate((1 << 20) + 1)
    text = binding([Finding("make", str(big), "recipes")])
    assert unbound_findings(text) == [str(big)]
    os.truncate(big, 10)
    assert unbound_findings(binding([Finding("make", str(big), "recipes")])) == []
