"""make's command-line variables are judged as the exec's env param is (engine.commands.makevars): make
exports them into every recipe and its built-in rules run them (fresh round 10 f)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import treecode
from engine.commands.makefiles import parse_make
from engine.config.loader import load_config_text
from engine.policy.decision import Decision, evaluate

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n'


def _decide(command: str, cwd: Path, extra: str = "") -> Decision:
    config = load_config_text(CONFIG + extra, Path("/c.toml"))
    store = ApprovalsStore()
    store.add_allowlist("main", "/usr/bin/make")
    return evaluate(command, config=config, store=store, cwd=str(cwd), env=ENV)


def test_parse_make_keeps_every_assignment_in_order() -> None:
    args = parse_make(["make", "foo", "CC=sh -c x", "-k", "V=1", "--", "LANG=C", "-x"])
    assert args.assignments == [("CC", "sh -c x"), ("V", "1"), ("LANG", "C")]
    assert args.goals == ["foo", "-x"]


@pytest.mark.parametrize(
    "command",
    [
        "make foo CC='sh -c \"echo ran > r\"'",  # a built-in rule's program, with no makefile at all
        "make foo COMPILER_PATH=/nonexistent:./bin",  # exported into cc's environment
        "make foo V=1",  # harmless to most makefiles, but not known inert: the operator lists it
        "make foo LANG=../../tmp/x",  # an inert key with a value not of its kind
        "sh -c 'make foo CFLAGS=-O2'",  # a make inside an `sh -c` payload too
    ],
)
def test_a_make_variable_not_known_inert_asks(tmp_path: Path, command: str) -> None:
    (tmp_path / "foo.c").write_text("int main(void) { return 0; }\n")
    d = _decide(command, tmp_path)
    assert d.verdict == "ask", (d.reason, d.warnings)
    assert any("make's command line sets" in w for w in d.warnings), d.warnings


def test_no_makefile_and_no_goal_runs_unasked_with_inert_variables(tmp_path: Path) -> None:
    """With no makefile and no goal (or no built-in rules: -r, -R) make runs nothing, so an inert locale
    on its command line changes nothing; a goal runs a built-in rule's cc over the tree (below)."""
    (tmp_path / "foo.c").write_text("int main(void) { return 0; }\n")
    for command in ("make", "make LANG=C.UTF-8 TZ=UTC", "make --version", "make -r foo", "make -sR foo"):
        d = _decide(command, tmp_path)
        assert d.verdict == "allow", (command, d.reason, d.warnings)


def test_no_makefile_and_a_goal_in_a_writable_tree_asks_for_its_built_in_rules(tmp_path: Path) -> None:
    (tmp_path / "foo.c").write_text("int main(void) { return 0; }\n")
    d = _decide("make foo", tmp_path)
    assert d.verdict == "ask" and d.tree is not None, (d.reason, d.warnings)
    assert [(f.path, f.what) for f in d.tree.found] == [(str(tmp_path), treecode.BUILTIN_RULES)]
    assert treecode.unbound_findings(d.tree.binding) == [str(tmp_path)]  # never saved


def test_the_operators_inert_list_covers_make_variables(tmp_path: Path) -> None:
    d = _decide("make V=1", tmp_path, 'inertEnv = ["V"]\n')
    assert d.verdict == "allow", (d.reason, d.warnings)
    d = _decide("make V=1 CC=x", tmp_path, 'inertEnv = ["V"]\n')
    assert d.verdict == "ask" and any("sets CC" in w for w in d.warnings), d.warnings
