"""A tree program's argv is read by its own grammar (engine.commands.toolargv): what it does not
understand asks, and the places it does understand are looked up the way the program looks them up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands.argvsafe import takes_no_code
from engine.commands.toolargv import GRAMMARS, argv_problem
from engine.commands.treecode import findings_for

UNDERSTOOD = [
    "npm test",
    "npm --prefix sub test",
    "npm -C sub run build:prod",
    "npm install lodash @scope/pkg@^1.2 left-pad@1.0.0",
    "npm ci --ignore-scripts --no-audit",
    "npm --version",
    "npx --version",
    "ninja -C sub -f o.ninja -j4 all",
    "ninja --version",
    "cmake -S . -B build -G 'Unix Makefiles'",
    "cmake --build build --parallel 4 --target all",
    "cargo +stable build --release -p foo --features a,b",
    "cargo -C sub test --offline",
    "mvn -q -B test package",
    "mvn --version",
    "yarn --version",
    "gradle",
]
ASKS = [
    "npm --prefi sub test",  # nopt expands unambiguous abbreviations
    "npm --pref=sub test",
    "npm -C=sub test",  # nopt splits it at `=` (the dir `sub`), getopt would not (`=sub`)
    "npm --prefix --silent test",
    "npm --prefix= test",
    "ninja -C=sub",
    "npm run build -- --config evil.js",  # handed on to the script's program
    "npm run a b",
    "npm install ./pkg",
    "npm install ../x.tgz",
    "npm install file:pkg",
    "npm install user/repo",  # a GitHub shorthand
    "npm install git+https://example.invalid/x.git",
    "npm exec -c 'touch x'",
    "npm x foo",
    "npm explore lodash -- sh",
    "npm --script-shell ./s.sh test",
    "npx ./pkg",
    "npx -c 'touch x'",
    "npx --call='touch x'",
    "npx eslint --config x.js",  # the program's own argv
    "npx --yes some-package",  # the operand is the code npx runs
    "npx eslint",
    "npx -p ./pkg x",
    "ninja -t browse",
    "ninja -d explain",
    "ninja sub/out",
    "cmake ..",
    "cmake -Hsub -Bb",
    "cmake --install b",
    "cmake -P x.cmake",
    "cmake -E env touch x",
    "cmake -C cache.cmake .",
    "cmake -DCMAKE_TOOLCHAIN_FILE=t.cmake -S . -B b",
    "cmake --preset p",
    "cmake --build b -- -j4",
    "cmake -G ../x -S . -B b",
    "cargo +./tc build",
    "cargo --config build.rustc='./x' build",
    "cargo install --path sub",
    "cargo run -- --evil",
    "cargo build --target-dir /tmp/x",
    "mvn -f sub --version",
    "mvn exec:exec",
    "mvn -Dexec.executable=./x test",
    "mvn -s settings.xml test",
    "yarn test",
    "bundle exec touch x",
    "uv run x",
    "poetry run touch x",
    "go test ./...",
    "go test -exec ./x",
    "rustup run stable touch x",
    "direnv exec . sh",
    "gradle -I init.gradle build",
]


def _program(command: str) -> str:
    return command.split()[0]


@pytest.mark.parametrize("command", UNDERSTOOD)
def test_an_argv_the_grammar_reads_whole_is_understood(command: str) -> None:
    import shlex

    assert argv_problem(_program(command), shlex.split(command)) is None


@pytest.mark.parametrize("command", ASKS)
def test_anything_the_grammar_does_not_read_asks(command: str) -> None:
    import shlex

    assert argv_problem(_program(command), shlex.split(command)) is not None


def test_every_grammar_takes_its_version_query() -> None:
    for program in GRAMMARS:
        assert argv_problem(program, [program, "--version"]) is None, program


def test_a_command_line_finding_asks_in_a_tree_nobody_can_write() -> None:
    """The argv is the agent's wherever it runs: a root-owned tree does not make `npx -c` inert."""
    found = findings_for(["npx", "-c", "touch x"], ("/usr/bin/npx",), "/", [])
    assert [f.path for f in found] == ["the command line"]
    assert findings_for(["cmake", "--version"], ("/usr/bin/cmake",), "/", []) == []


def test_ninja_reads_its_file_option_in_its_dir_option(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "o.ninja").write_text("rule t\n  command = true\n")
    for argv in (["ninja", "-C", "sub", "-f", "o.ninja"], ["ninja", "-fo.ninja", "-Csub"]):
        found = findings_for(argv, ("/usr/bin/ninja",), str(tmp_path), [])
        manifests = [f.path for f in found if f.what.startswith("build commands")]
        assert manifests == [str(tmp_path / "sub" / "o.ninja")], argv


def test_npx_prefix_names_the_node_modules_bin_it_runs_from(tmp_path: Path) -> None:
    (tmp_path / "sub" / "node_modules" / ".bin").mkdir(parents=True)
    found = findings_for(["npx", "--prefix", "sub", "evil"], ("/usr/bin/npx",), str(tmp_path), [])
    assert str(tmp_path / "sub" / "node_modules" / ".bin") in {f.path for f in found}


def test_mvn_names_the_jvm_config_and_extensions_of_an_ancestor(tmp_path: Path) -> None:
    (tmp_path / ".mvn").mkdir()
    (tmp_path / ".mvn" / "jvm.config").write_text("-Xmx1g\n")
    (tmp_path / ".mvn" / "extensions.xml").write_text("<extensions/>\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    found = findings_for(["mvn", "--version"], ("/usr/bin/mvn",), str(tmp_path / "a" / "b"), [])
    paths = {f.path for f in found}
    assert {str(tmp_path / ".mvn" / "jvm.config"), str(tmp_path / ".mvn" / "extensions.xml")} <= paths


def test_cmake_names_the_user_presets(tmp_path: Path) -> None:
    (tmp_path / "CMakeUserPresets.json").write_text("{}\n")
    found = findings_for(["cmake", "-S", ".", "-B", "b"], ("/usr/bin/cmake",), str(tmp_path), [])
    assert str(tmp_path / "CMakeUserPresets.json") in {f.path for f in found}


@pytest.mark.parametrize("spelling", ["file://{pkg}", "pkg @ file://{pkg}", "file:{pkg}", "./pkg"])
def test_pip_names_a_local_project_in_every_spelling(tmp_path: Path, spelling: str) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "setup.py").write_text("\n")
    argv = ["pip3", "install", spelling.format(pkg=tmp_path / "pkg")]
    found = findings_for(argv, ("/usr/bin/pip3",), str(tmp_path), [])
    assert str(tmp_path / "pkg") in {f.path for f in found}


def test_pip_vcs_url_operand_asks(tmp_path: Path) -> None:
    argv = ["pip3", "install", "git+https://example.invalid/x.git"]
    assert [f.path for f in findings_for(argv, ("/usr/bin/pip3",), str(tmp_path), [])] == ["the command line"]


@pytest.mark.parametrize(
    "program", ["mvn", "corepack", "uv", "poetry", "gradle", "bun", "tox", "ninja", "show", "/opt/x/mytool"]
)
def test_allow_always_saves_no_bare_path_of_a_program_nobody_vetted(program: str) -> None:
    assert not takes_no_code(program)


@pytest.mark.parametrize("program", ["ls", "/usr/bin/cat", "wc", "sha256sum", "grep"])
def test_allow_always_may_save_the_path_of_a_program_known_to_take_no_code(program: str) -> None:
    assert takes_no_code(program)


def test_a_program_on_the_list_by_name_but_a_runner_by_path_is_not(tmp_path: Path) -> None:
    """`ls` that is a link to busybox is known by every name it resolves to (durable._runs_others)."""
    link = tmp_path / "ls"
    os.symlink("/bin/busybox", link)
    assert takes_no_code(str(link)) and not takes_no_code("/bin/busybox")
