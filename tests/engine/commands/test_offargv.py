"""A command's text rides in the environment of a fixed `sh -c` stub (engine.commands.offargv): the argv
carries none of it, and the shell runs it as `sh -c TEXT` does, against the real shells."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.commands.offargv import COMMAND_VAR, STUB, carried
from engine.sandbox import supervisor as sv

ENV = {"PATH": "/usr/bin:/bin"}
# Parse, $0, positional parameters, exit codes, aliases, here-documents, traps, `return` and `exit` at the
# top, a syntax error past a first command, and the variable gone before the first command runs.
COMMANDS = [
    'echo $0 $# "$@"; echo $?',
    "exit 3",
    "false",
    "nosuch-command-offargv",
    "return 4; echo after",
    "echo a; echo ${x",
    "echo (",
    "set -e; false; echo no",
    "alias say=echo\nsay aliased",
    "cat <<EOF\nhere $0\nEOF",
    "trap 'echo bye' EXIT; echo x",
    "shift; echo $#",
    'echo "${EXECHOST_COMMAND-unset}"; env | grep -c EXECHOST_COMMAND',
    "f() { echo in f; return 5; }; f; echo $?",
    "echo one \\\n  two; x=1\necho $x",
]


def _shells() -> list[list[str]]:
    found = [["/bin/sh"]]
    busybox = shutil.which("busybox")
    if busybox is not None:
        found.append([busybox, "sh"])
    return found


@pytest.mark.parametrize(
    "shell", _shells(), ids=lambda s: s[-1] if s[-1] != "sh" or len(s) == 1 else "busybox"
)
@pytest.mark.parametrize("command", COMMANDS)
def test_the_stub_runs_the_text_as_sh_c_does(shell: list[str], command: str) -> None:
    plain = subprocess.run([*shell, "-c", command], env=ENV, capture_output=True, text=True)
    argv, env = carried([*shell, "-c", command], ENV)
    assert argv == [*shell, "-c", STUB] and env == {**ENV, COMMAND_VAR: command}
    stub = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert (stub.returncode, stub.stdout) == (plain.returncode, plain.stdout)
    # what differs: a message written while `eval` runs says so (dash: `sh: 1: eval: …`; busybox ash:
    # `sh: line 0: …`)
    assert _said(stub.stderr) == _said(plain.stderr)


def _said(text: str) -> str:
    return re.sub(r"eval: |line \d+: ", "", text)


def test_only_a_shells_text_at_the_end_is_carried() -> None:
    env = {"A": "1", COMMAND_VAR: "from the caller"}
    wrapped = ["/usr/bin/helper", "enter", "3", "--", "/bin/sh", "-c", "echo secret"]
    argv, out = carried(wrapped, env)
    assert argv == [*wrapped[:-1], STUB] and out == {"A": "1", COMMAND_VAR: "echo secret"}
    assert carried(["/bin/sh", "-lc", "echo x"], {})[0] == ["/bin/sh", "-lc", STUB]
    # a fixed script with arguments after it, or a program's own argv, stay; no stray COMMAND_VAR goes on
    for argv in (["/bin/sh", "-c", "script", "name", "arg"], ["/usr/bin/printf", "-c", "x"], ["true"]):
        assert carried(argv, env) == (argv, {"A": "1"})
    assert carried(["/bin/sh", "-c", STUB], {COMMAND_VAR: "kept"}) == (["/bin/sh", "-c", STUB], {})


def test_a_sandboxs_spec_script_has_the_text_only_in_its_private_file(tmp_path: Path) -> None:
    """The spec (a 0600 file, or a memfd) exports the text; the login shell it execs has the stub."""
    command = "echo offargv-spec-$((6*7)); exit 7"
    script = sv.spec_script(command, str(tmp_path), {"K": "v"}, "/opt/bin", "/bin/sh")
    last = script.splitlines()[-1]
    assert last == f"exec /bin/sh -lc '{STUB}'", script
    spec = tmp_path / "spec"
    spec.write_text(script)
    home = {**ENV, "HOME": str(tmp_path)}
    ran = subprocess.run(["/bin/sh", str(spec)], env=home, capture_output=True, text=True, cwd="/")
    assert (ran.returncode, ran.stdout) == (7, "offargv-spec-42\n"), ran.stderr
    if shutil.which("busybox") is not None:
        boxed = sv.spec_script(
            command, str(tmp_path), {}, None, "/nonexistent/sh", busybox=shutil.which("busybox") or ""
        )
        assert command not in boxed.splitlines()[-1] and COMMAND_VAR in boxed
        spec.write_text(boxed)
        ran = subprocess.run(["/bin/sh", str(spec)], env=home, capture_output=True, text=True, cwd="/")
        assert (ran.returncode, ran.stdout) == (7, "offargv-spec-42\n"), ran.stderr


def test_the_command_never_sees_the_variable(tmp_path: Path) -> None:
    out = tmp_path / "env"
    argv, env = carried(["/bin/sh", "-c", f"env > {out}; cat /proc/$$/cmdline >> {out}"], ENV)
    subprocess.run(argv, env=env, check=True)
    seen = out.read_bytes()
    assert COMMAND_VAR.encode() not in seen.split(b"\0")[0]  # its children's environment
    assert b"env >" not in seen  # its shell's argv
    assert os.environ.get(COMMAND_VAR) is None
