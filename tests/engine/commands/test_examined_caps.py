"""A command past any cap of what is examined asks (issue 27 §4): the argv words treecode looks at for
the files a program runs, make's command-line values and the files a text names are read whole, or the
command asks and is never saved; a prefix is never examined silently (tests/attacks/test_fresh_round10_d)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import treecode
from engine.commands.textnames import FILE_WORDS_MAX as FILE_WORDS_BOUND
from engine.config.loader import load_config_text
from engine.policy.decision import Decision, evaluate

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
CAP = treecode.OPERANDS_LOOKED_AT


def _decide(command: str, cwd: Path, allow: str) -> Decision:
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', Path("/c.toml"))
    store = ApprovalsStore()
    store.add_allowlist("main", allow)
    return evaluate(command, config=config, store=store, cwd=str(cwd), env=ENV)


def _filler(n: int, spell: str) -> str:
    return " ".join(spell.format(i=i) for i in range(n))


@pytest.mark.parametrize("words", [CAP - 4, CAP + 6])
def test_make_value_file_is_named_wherever_it_is(tmp_path: Path, words: int) -> None:
    (tmp_path / "cc").write_text("#!/bin/sh\n")
    d = _decide(f"make {_filler(words, 'V{i}=1')} CC=./cc foo.o", tmp_path, "/usr/bin/make")
    assert d.tree is not None and d.verdict == "ask", d.warnings
    assert f"tree:{tmp_path}/./cc=" in d.tree.binding or words > CAP, d.tree.binding
    assert (words > CAP) == any(f.what == treecode.PAST_THE_CAP for f in d.tree.found), d.tree.found


def test_past_the_cap_asks_even_where_nothing_is_named(tmp_path: Path) -> None:
    """Nothing past the cap names a file: it asks still (the cap, not a file, is the reason), and the
    approval binds no bytes, so allow-always is not offered."""
    if shutil.which("cmake", path=ENV["PATH"]) is None:
        pytest.skip("cmake is not installed")
    d = _decide(f"cmake {_filler(CAP + 1, '-DV{i}=1')} --version", tmp_path, "/usr/bin/cmake")
    assert d.verdict == "ask", d.warnings
    assert "allow-always" not in d.allowed_decisions
    assert any("words" in w for w in d.warnings), d.warnings


def test_at_the_cap_nothing_changes(tmp_path: Path) -> None:
    """The cap is on what is read: a command within it decides as before (no files, no finding)."""
    sys_dir = Path("/usr/share")
    found = treecode.findings_for(
        ["make", *[f"V{i}=1" for i in range(CAP)]], ["/usr/bin/make"], str(sys_dir), [str(tmp_path)]
    )
    assert found == []


def test_an_unmodelled_program_past_the_cap_asks_outside_any_writable_tree(tmp_path: Path) -> None:
    """An unmodelled program's path operands name the trees it may load code from (pytest ../other): the
    71st word pointing into the agent's tree is not left unread."""
    cwd = "/usr/share"
    argv = ["mypy", *["-v"] * (CAP + 5), str(tmp_path / "x.py")]
    found = treecode.findings_for(argv, ["/usr/local/bin/mypy"], cwd, [str(tmp_path)])
    assert found and found[0].what == treecode.PAST_THE_CAP, found
    assert treecode.unbound_findings(treecode.binding(found)), treecode.binding(found)


def test_a_text_naming_more_files_than_are_bound_is_refused(tmp_path: Path) -> None:
    """`sh < x.sh` binds every file the text names; past the cap it is refused rather than bound by a
    prefix (what follows would run unbound)."""
    n = FILE_WORDS_BOUND + 1
    for i in range(n):
        (tmp_path / f"f{i}").write_text("x\n")
    (tmp_path / "x.sh").write_text("echo hi\n")
    names = " ".join(f"f{i}" for i in range(n))
    command = f"cat {names} >/dev/null; sh < x.sh"
    d = _decide(command, tmp_path, "/usr/bin/cat")
    assert d.content is not None and d.content.refuse, d.warnings
    some = " ".join(f"f{i}" for i in range(FILE_WORDS_BOUND - 4))
    fewer = _decide(f"cat {some} >/dev/null; sh < x.sh", tmp_path, "/usr/bin/cat")
    assert fewer.content is not None and not fewer.content.refuse, fewer.warnings
