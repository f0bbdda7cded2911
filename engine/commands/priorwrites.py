"""Which commands of a chain may have written the tree before a tree program reads it (issue 27 §4).

The tree vet reads a tree program's files once, before the command runs: a file an earlier segment writes
(`git checkout other -- package.json && npm test`, `cp evil.json package.json; npm test`) is not what was
vetted. Rather than model what every program writes, a tree program that runs after (or piped beside) any
segment not known to be read-only is a finding of its own: a human decides it, for this run only."""

from __future__ import annotations

from collections.abc import Sequence

from engine.commands.interpreters import name_of

# Programs that write no file of the tree by any option (redirections fail the analysis before this):
# kept short on purpose. Not sort (-o), uniq (its output operand), tee, file (-C), git (--output, index).
READ_ONLY = frozenset(
    {
        "echo", "printf", "true", "false", "test", "[", "pwd", "ls", "cat", "head", "tail", "wc", "grep",
        "which", "id", "whoami", "basename", "dirname", "realpath", "readlink", "stat", "uname", "sleep",
        "nproc",
    }
)  # fmt: skip


def may_write(argv: Sequence[str]) -> bool:
    """Whether running `argv` may leave a file of the tree other than it found it."""
    return not argv or name_of(argv[0]) not in READ_ONLY


def after_writes(commands: Sequence[tuple[Sequence[str], bool]]) -> tuple[bool, ...]:
    """For each (argv, piped) in the order the text runs them: whether another command that may write
    runs before it or, in a pipeline (all its commands run at once), beside it."""
    writes = [may_write(argv) for argv, _ in commands]
    out = []
    for i, (_, piped) in enumerate(commands):
        before = any(writes[:i])
        beside = piped and any(w for j, w in enumerate(writes) if j != i)
        out.append(before or beside)
    return tuple(out)
