"""A command whose words the shell expands from the file system (a glob, `$PWD`) is decided on what the
shell expands them to now, and what runs is those words: bound whole, like any spelled-out command, never
the pattern again (issue 27 §5: `sh x.s?` named no file, so nothing was bound and a rewrite ran).

Not an emulation: the expansion is done by the shell that runs host commands, on words made only of
characters that expand by globbing and field splitting (nothing else can run or read anything); any other
text is left alone, and the command stays unanalysed (it asks, unbound, as before)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass

from engine.commands import hostoutside, hostview, offargv
from engine.statefs import state_dir

__all__ = ["HOST_SHELL", "Expansion", "expand"]

HOST_SHELL = "/bin/sh"  # what host commands run under (engine.sessions.launcher.DEFAULT_SHELL)
# A word the shell takes literally but for pathname expansion: no quotes, `$` (but `$PWD`), `~`, `{`, `!`,
# `=` (an assignment prefix), `#`, redirections or separators. Such a word expands the same in any
# position, and a word with none of `*?[` and no `$PWD` is literal: it is kept as typed (a keyword stays
# a keyword).
_PLAIN = re.compile(r"[A-Za-z0-9._/+,:@%*?\[\]-]*")
_PWD = re.compile(r"\$\{PWD\}|\$PWD(?![A-Za-z0-9_])")
_EXPANDS = re.compile(r"[*?\[]|\$")
_WORDS = re.compile(r"[ \t]+")
_MAX_OUTPUT = 64 * 1024  # more names than an ask can show: the command stays unanalysed
_TIMEOUT = 5.0  # a glob over a huge tree: the command stays unanalysed rather than hang the decision


@dataclass(frozen=True)
class Expansion:
    """The command as the shell would run it now, and what each expanded word became (for the ask)."""

    text: str
    expanded: tuple[tuple[str, tuple[str, ...]], ...]

    def warning(self) -> str:
        shown = "; ".join(f"`{w}` → {' '.join(shlex.quote(x) for x in out)}" for w, out in self.expanded)
        return (
            f"Note: the shell expands {shown} in this directory now; that is what runs (bound like any "
            "file named outright), not the pattern again. allow-always is not offered, allow-once only: "
            "the files were matched now, not granted."
        )


def expand(
    command: str,
    cwd: str,
    shell: str = HOST_SHELL,
    outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE,
) -> Expansion | None:
    """`command` with its glob and `$PWD` words expanded by `shell` in `cwd`, in the host view `outside`
    describes (the run's own); None when the text holds anything else (it is then not this module's to
    decide) or the shell cannot say."""
    words = _WORDS.split(command.strip())
    if not words or not any(_EXPANDS.search(w) for w in words):
        return None
    if not all(_PLAIN.fullmatch(_PWD.sub("", w)) for w in words):
        return None
    out: list[str] = []
    expanded: list[tuple[str, tuple[str, ...]]] = []
    for word in words:
        if not _EXPANDS.search(word):
            out.append(word)
            continue
        fields = _shell_expand(word, cwd, shell, outside)
        if fields is None:
            return None
        out += [shlex.quote(f) for f in fields]
        expanded.append((word, fields))
    return Expansion(" ".join(out), tuple(expanded))


def _shell_expand(word: str, cwd: str, shell: str, outside: hostoutside.Outside) -> tuple[str, ...] | None:
    """The fields `shell` makes of `word` unquoted (field splitting of `$PWD`, then pathname expansion;
    no match leaves the pattern), as a `for` list sees it: the same expansions a command's words get."""
    script = f'for w in {word}; do printf "%s\\0" "$w"; done'
    bwrap = hostview.bwrap_path()
    # In the run's own host view (the state dir an empty tmpfs, every sandbox workspace root covered, node
    # keys hidden): the ask shows what matched, and it must never list what the run itself cannot see.
    try:
        ops = hostview.view_args(str(state_dir()), None, outside) if bwrap else []
    except (hostoutside.HostViewError, OSError):
        return None
    # a workdir in a private dir: its path in the view (engine.commands.hostprivate), as the run has it
    hidden = [bwrap, *ops, "--chdir", outside.chdir or cwd, "--"] if bwrap else []
    # the agent's word in the environment, never on an argv (engine.commands.offargv)
    argv, env = offargv.carried([*hidden, shell, "-c", script], {"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or len(done.stdout) > _MAX_OUTPUT:
        return None
    try:
        fields = done.stdout.decode("utf-8").split("\0")[:-1]
    except UnicodeDecodeError:
        return None  # a name that is not text: not shown faithfully, so not decided on
    return tuple(fields) if fields else None
