"""No text an agent sent goes on an argv exechost makes: /proc/<pid>/cmdline is every account's to read (a
/proc without hidepid), /proc/<pid>/environ only the process's own uid's (a ptrace check), so a command's
text rides in the environment of a fixed `sh -c` stub that takes it out before any of it runs (fresh
round 12 a).

`sh -c STUB` with COMMAND_VAR=TEXT in its environment runs TEXT as `sh -c TEXT` does: same $0 and
positional parameters, the same parser (dash's `eval` and `-c` both parse with evalstring, one complete
command at a time, aliases and all; busybox ash's likewise), the same exit codes (a syntax error still
ends the shell with 2). The `unset` is the first command of TEXT's first line, parsed with it and run
before it, so nothing TEXT runs inherits the variable. What differs: a message the shell writes while
`eval` runs says so (dash: `/bin/sh: 1: eval: foo: not found`, not `/bin/sh: 1: foo: not found`; busybox
ash: `sh: line 0: foo: not found`), and bash's $_ starts as the variable's name.
"""

from __future__ import annotations

from collections.abc import Mapping

COMMAND_VAR = "EXECHOST_COMMAND"
# Fixed: the only text of the run on the shell's argv. `"$VAR"` is expanded once, before eval parses it,
# and quoted (no splitting, no globbing): eval sees exactly `unset VAR; TEXT`.
STUB = f'eval "unset {COMMAND_VAR}; ${COMMAND_VAR}"'
SHELL_FLAGS = ("-c", "-lc")


def shell_words(shell: str, command: str, flag: str = "-c") -> tuple[list[str], dict[str, str]]:
    """The argv tail that runs `command` as `shell flag command` does, and the environment entry it needs."""
    return [shell, flag, STUB], {COMMAND_VAR: command}


def carried(argv: list[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """`argv` ending in `<shell> -c TEXT` made to end in `<shell> -c STUB`, TEXT put in the environment;
    any other argv as it is (and any COMMAND_VAR of the caller's dropped: no stub is there to take it).
    Applied where every run is spawned (engine.sessions), whatever built its argv."""
    out = {k: v for k, v in env.items() if k != COMMAND_VAR}
    if len(argv) >= 3 and argv[-2] in SHELL_FLAGS and argv[-1] != STUB and _is_shell(argv[-3]):
        words, extra = shell_words(argv[-3], argv[-1], argv[-2])
        return [*argv[:-3], *words], {**out, **extra}
    return list(argv), out


def _is_shell(word: str) -> bool:
    return word.rsplit("/", 1)[-1] in ("sh", "dash", "bash", "ash")
