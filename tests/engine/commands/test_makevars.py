"""make's command-line variables are judged as the exec's env param is (engine.commands.makevars): make
exports them into every recipe and its built-in rules run them (fresh round 10 f)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
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
    args = parse_make(["make", "foo", "CC=sh -c x", "-k", "V=1", "--", "LANG=C"])
    assert args.assignments == [("CC", "sh -c x"), ("V", "1"), ("LANG", "C")]


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


def test_no_makefile_and_inert_variables_run_unasked(tmp_path: Path) -> None:
    """With no makefile make runs only its built-in rules with its built-in programs: nothing of the
    agent's runs, so an inert locale on its command line changes nothing."""
    (tmp_path / "foo.c").write_text("int main(void) { return 0; }\n")
    for command in ("make foo", "make foo LANG=C.UTF-8 TZ=UTC"):
        d = _decide(command, tmp_path)
        assert d.verdict == "allow", (command, d.reason, d.warnings)


def test_the_operators_inert_list_covers_make_variables(tmp_path: Path) -> None:
    (tmp_path / "foo.c").write_text("int main(void) { return 0; }\n")
    d = _decide("make foo V=1", tmp_path, 'inertEnv = ["V"]\n')
    assert d.verdict == "allow", (d.reason, d.warnings)
    assert _decide("make foo V=1 CC=x", tmp_path, 'inertEnv = ["V"]\n').verdict == "ask"
