"""A tree program after (or piped beside) a command that may write its tree asks, this run only
(engine.commands.priorwrites; tests/attacks/test_fresh_round10_d.py's earlier-segment attacks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import priorwrites, treecode
from engine.config.loader import load_config_text
from engine.policy.decision import Decision, evaluate

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}


def _decide(command: str, cwd: Path) -> Decision:
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    store = ApprovalsStore()
    for exe in ("/usr/bin/npm", "/usr/bin/cp", "/usr/bin/git", "/usr/bin/sort", "/usr/bin/echo"):
        store.add_allowlist("main", exe)
    return evaluate(command, config=config, store=store, cwd=str(cwd), env=ENV)


def test_after_writes_order_and_pipes() -> None:
    assert priorwrites.after_writes([(("cp", "a", "b"), False), (("npm", "test"), False)]) == (False, True)
    assert priorwrites.after_writes([(("npm", "test"), False), (("cp", "a", "b"), False)]) == (False, True)
    assert priorwrites.after_writes([(("npm", "test"), True), (("cp", "a", "b"), True)]) == (True, True)
    assert priorwrites.after_writes([(("echo", "x"), False), (("npm", "test"), False)]) == (False, False)
    assert priorwrites.after_writes([(("sort", "-o", "p"), False), (("npm", "t"), False)]) == (False, True)


@pytest.mark.parametrize(
    "command",
    [
        "cp evil.json package.json; npm test",
        "git checkout other -- package.json && npm test",
        "sort -o package.json evil.json && npm test",
        "sh -c 'cp evil.json package.json' && npm test",
        "npm test | cp evil.json package.json",
    ],
)
def test_a_tree_program_after_a_write_asks_this_run_only(tmp_path: Path, command: str) -> None:
    if shutil.which("npm", path=ENV["PATH"]) is None:
        pytest.skip("npm is not installed")
    (tmp_path / "evil.json").write_text(json.dumps({"name": "p", "scripts": {"test": "echo x"}}))
    d = _decide(command, tmp_path)
    assert d.verdict == "ask", d.reason
    assert d.tree is not None and any(f.what == treecode.WRITTEN_FIRST for f in d.tree.found), d.tree.found
    assert "allow-always" not in d.allowed_decisions


def test_reading_first_or_writing_after_changes_nothing(tmp_path: Path) -> None:
    """Control: `echo` before and `cp` after (sequentially) leave npm's vet as it was: no finding."""
    if shutil.which("npm", path=ENV["PATH"]) is None:
        pytest.skip("npm is not installed")
    for command in ("echo hi && npm --version", "npm --version && cp a b"):
        d = _decide(command, tmp_path)
        assert d.tree is not None and not any(f.what == treecode.WRITTEN_FIRST for f in d.tree.found), command


def test_make_with_a_value_after_a_write_asks(tmp_path: Path) -> None:
    """Variant: `cp evil cc && make CC=./cc foo.o`: ./cc is absent at the vet (nothing names it), and the
    built-in rule runs it. make's makefiles are pinned (a plain `make` after a write is not a finding),
    a command-line value is not."""
    (tmp_path / "evil").write_text("#!/bin/sh\necho PWNED\n")
    (tmp_path / "foo.c").write_text("int x;\n")
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    store = ApprovalsStore()
    for exe in ("/usr/bin/make", "/usr/bin/cp"):
        store.add_allowlist("main", exe)
    d = evaluate("cp evil cc && make CC=./cc foo.o", config=config, store=store, cwd=str(tmp_path), env=ENV)
    assert d.verdict == "ask" and d.tree is not None, d.reason
    assert any(f.what == treecode.WRITTEN_FIRST for f in d.tree.found), d.tree.found
    plain = evaluate("cp evil x && make foo.o", config=config, store=store, cwd=str(tmp_path), env=ENV)
    assert plain.tree is not None and not any(f.what == treecode.WRITTEN_FIRST for f in plain.tree.found)
