"""Variants of fresh round 10 e's findings, written before their defences (branch fixE10): each spelling
must either bind what runs or lose allow-always (or be refused)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.commands.interpoptions import perl_line_switches
from tests.attacks.test_fresh_round10_e import ASK, workdir
from tests.helpers.gateway import connect, gateway, wait_until, write_config


async def _ask(state: Path, command: str, work: Path) -> dict[str, Any] | str:
    """The ask `command` raises (then denied), or the run's text when it raised none."""
    write_config(state, ASK)
    async with gateway(state):
        operator = await connect(state, "op")
        agent = await connect(state, "ag")
        try:
            await operator.request("approvals.attach", {})
            params = {"command": command, "agentId": "main", "workdir": str(work)}
            run = asyncio.ensure_future(agent.request("exec", params))
            done, _ = await asyncio.wait([run], timeout=0)
            if done:
                return str(run.result()["text"])
            rows = await wait_until(operator.pending_approvals, 30)
            await operator.request("approve", {"id": rows[0]["id"], "decision": "deny"})
            await asyncio.wait_for(run, 60)
            return dict(rows[0])
        finally:
            await agent.close()
            await operator.close()


def ask_of(state: Path, command: str, work: Path) -> dict[str, Any] | str:
    return asyncio.run(_ask(state, command, work))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"#!/usr/bin/perl -d\nprint 1;\n", [["-d"]]),
        (b"#!/usr/bin/env perl -w -MFoo x\n", [["-w", "-MFoo"]]),
        (b"#!/bin/sh\n#! perl -d:Trace\n", [["-d:Trace"]]),  # the line `perl -x` starts from
        (b"#!/usr/bin/perl\n", []),
        (b"print 1;\n", []),
    ],
)
def test_perl_line_switches_reads_each_perl_hash_bang_line(text: bytes, expected: list[list[str]]) -> None:
    assert perl_line_switches(text) == expected


@pytest.mark.parametrize(
    ("script", "command"),
    [
        ('#!/usr/bin/perl -w -d\nprint "hi\\n";\n', "perl d.pl"),
        ('#!/usr/bin/perl -MO=Deparse\nprint "hi\\n";\n', "perl d.pl"),
        ('garbage\n#!perl -d\nprint "hi\\n";\n', "perl -x d.pl"),
    ],
)
def test_a_perl_hash_bang_switch_that_reads_more_code_loses_allow_always(
    state_dir: Path, script: str, command: str
) -> None:
    if shutil.which("perl") is None:
        pytest.skip("perl is not installed")
    work = workdir(state_dir, {"d.pl": script})
    ask = ask_of(state_dir, command, work)
    assert isinstance(ask, dict), ask
    assert "allow-always" not in ask["allowedDecisions"], ask


@pytest.mark.parametrize(
    ("program", "command"),
    [
        ("node", "node --import h.js app.js"),
        ("node", "node --require=h.js app.js"),
        ("node", "node -r . app.js"),
        ("ruby", "ruby -r h app.rb"),
    ],
)
def test_a_preload_by_a_bare_name_is_a_search_and_loses_allow_always(
    state_dir: Path, program: str, command: str
) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    files = {"app.js": "1\n", "app.rb": "1\n", "h.js": "1\n", "h.rb": "1\n", "h": "1\n", "index.js": "1\n"}
    ask = ask_of(state_dir, command, workdir(state_dir, files))
    assert isinstance(ask, dict), ask
    assert "allow-always" not in ask["allowedDecisions"], ask


def test_file_words_drops_no_file_past_the_cap(tmp_path: Path) -> None:
    from engine.commands.analysis import analyze_command
    from engine.commands.textnames import FILE_WORDS_MAX, file_words

    names = [f"f{i:03d}" for i in range(FILE_WORDS_MAX + 5)]
    for name in names:
        (tmp_path / name).write_text("")
    command = f"cat {' '.join(names)} | sh"
    words, _absent = file_words(command, analyze_command(command), [str(tmp_path)])
    assert len(words) == len(names)  # every one: the binder refuses past the cap, it never drops


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["env", "-Ssh s.sh"], True),
        (["env", "-i", "-S", "sh s.sh"], True),
        (["env", "-vS", "sh s.sh"], True),
        (["env", "--sp=sh s.sh"], True),  # getopt_long: an unambiguous prefix is the option
        (["env", "--chdir", "d", "-S", "sh s.sh"], True),
        (["nohup", "env", "-S", "sh s.sh"], True),  # wherever env stands
        (["env", "-u", "S", "sh", "s.sh"], False),  # S is -u's value
        (["env", "A=B", "sh", "s.sh"], False),
        (["xargs", "-a", "list", "sh"], True),
        (["xargs", "-0a", "list", "sh"], True),
        (["xargs", "--max-args", "1", "--arg-file=list", "sh"], True),
        (["xargs", "--ar", "list", "sh"], True),
        (["xargs", "-n1", "sh"], False),
        (["xargs", "-I", "a", "echo", "a"], False),
    ],
)
def test_a_command_built_from_a_string_or_a_file_is_refused(argv: list[str], refused: bool) -> None:
    from engine.commands.builtcmd import built_command

    assert bool(built_command([argv])) is refused


@pytest.mark.parametrize(
    ("command", "refused"),
    [
        ("cat s.s? | sh", True),
        ("for f in s.sh; do cat $f; done | bash", True),
        ("git show HEAD:s.sh | nice sh", True),  # through a wrapper
        ("curl -s file:///w/s.sh | timeout 5 bash -s", True),
        ("cat s.sh | tee log | sh", True),  # tee is no pure reader of named files
        ("( cat s.sh ) | sh", True),
        ("cat <(git show HEAD:s.sh) | sh", True),
        ("sh -c 'git show HEAD:s.sh | sh'", True),  # a quoted command line is read too
        ("sh < $f", True),
        ("ls | python3 -", True),
        ("cat s.sh | sh", False),
        ("cat a.sh b.sh | bash -s x", False),
        ("sh < s.sh", False),
        ("sh 3<s.sh <&3", False),
        ("cd d && cat s.sh | sh 2>&1", False),
        ("git log | grep x", False),  # no interpreter reads it
        ("cat x | python3 y.py", False),  # python's program is y.py: stdin is data
    ],
)
def test_a_program_on_an_interpreters_stdin_comes_only_from_literal_files_cat_reads(
    command: str, refused: bool
) -> None:
    from engine.commands.stdinprogram import stdin_program_refusal

    assert bool(stdin_program_refusal(command)) is refused


def _pyenv_root(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "pyenv"
    for version in ("3.11.7", "3.12.1"):
        (root / "versions" / version).mkdir(parents=True)
    (root / "version").write_text("3.11.7\n")
    shim = root / "shims" / "python3"
    shim.parent.mkdir()
    shim.write_text(
        '#!/usr/bin/env bash\nset -e\nprogram="${0##*/}"\n'
        f'exec "{root}/libexec/pyenv" exec "$program" "$@"\n'
    )
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    return shim, work


def test_a_pyenv_shims_version_is_read_as_pyenv_reads_it(tmp_path: Path) -> None:
    from engine.commands.pyenvpin import pyenv_version

    shim, work = _pyenv_root(tmp_path)
    assert pyenv_version(str(shim), str(work), {}) == "3.11.7"  # the root's version file
    (tmp_path / "a" / ".python-version").write_text("# pinned\n3.12.1\n")  # a parent's, comments skipped
    assert pyenv_version(str(shim), str(work), {}) == "3.12.1"
    assert pyenv_version(str(shim), str(work), {"PYENV_VERSION": "3.11.7"}) == "3.11.7"  # the env first
    assert pyenv_version(str(tmp_path / "pyenv" / "version"), str(work), {}) is None  # no shim


@pytest.mark.parametrize("value", ["../../../tmp/evil", "3.99", "3.12.1/../../x"])
def test_a_pyenv_version_pyenv_has_not_installed_is_refused(tmp_path: Path, value: str) -> None:
    from engine.commands.pyenvpin import PyenvError, pyenv_version

    shim, work = _pyenv_root(tmp_path)
    (work / ".python-version").write_text(value + "\n")
    with pytest.raises(PyenvError):
        pyenv_version(str(shim), str(work), {})
