"""A program a shell or an interpreter reads from its stdin (`cat s.sh | sh`, `sh < s.sh`): allowed only
when it comes from files named literally and read by a pure reader, since the binder binds the files
the text names and nothing else. Any other producer (`git show HEAD:s.sh`, `curl file://…`, `dd if=…`,
a loop, a glob, `$f`) feeds bytes no digest holds: the run is refused."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from engine.commands.interpoptions import STDIN, UNKNOWN, family, program_source
from engine.commands.interpreters import name_of
from engine.commands.scriptfiles import FAMILY_OF, SHELLS
from engine.commands.shelltext import read_shell_text

# Producers whose output is their named files' bytes (options only number or mark lines): the files are
# bound whole, so what the interpreter reads is what was approved.
PURE_READERS = frozenset({"cat"})
# What a shell expands or reads its own way: a word holding one names no file the binder read.
_SHELL_READS = frozenset("$`*?[{~\\")
_OPERATOR = frozenset(";&|()<>")


def _is_redirect(token: str) -> bool:
    return set(token) <= set("<>&") and ("<" in token or ">" in token)


def _stages(tokens: Sequence[str]) -> list[list[list[str]]]:
    """Pipelines (split at list operators and parentheses), each a list of stages (split at `|`, `|&`)."""
    pipelines: list[list[list[str]]] = [[[]]]
    for token in tokens:
        if token in ("|", "|&"):
            pipelines[-1].append([])
        elif set(token) <= _OPERATOR and not _is_redirect(token):  # `;`, `&&`, `(`, `<(`: a list of its own
            pipelines.append([[]])
        else:
            pipelines[-1][-1].append(token)
    return pipelines


def _split(stage: Sequence[str]) -> tuple[list[str], bool]:
    """A stage's words without its redirections (an fd number, the operator, its target), and whether one
    of them feeds its stdin."""
    words: list[str] = []
    reads_in = False
    skip = False
    for k, token in enumerate(stage):
        if skip:
            skip = False
            continue
        if token.isdigit() and k + 1 < len(stage) and _is_redirect(stage[k + 1]):
            continue
        if _is_redirect(token):
            reads_in = reads_in or "<" in token
            skip = True
            continue
        words.append(token)
    return words, reads_in


def _reads_program_from_stdin(words: Sequence[str]) -> bool:
    for k, word in enumerate(words):
        name = name_of(word.strip("'\""))
        if family(name) is not None:
            source = program_source([name, *words[k + 1 :]])
            return source is None or source.kind in (STDIN, UNKNOWN)
        if name in SHELLS or name in FAMILY_OF:
            return True  # an interpreter no grammar reads: its stdin may be its program
    return False


def stdin_program_refusal(command: str, depth: int = 0) -> str:
    """Why the run must be refused ("" when it need not): an interpreter takes its program from a pipe or
    an input redirection, and something other than literal files read by a pure reader feeds it. A quoted
    word that is itself a command line (`sh -c 'git show HEAD:s.sh | sh'`) is read the same way."""
    if "|" not in command and "<" not in command:
        return ""
    reading = read_shell_text(command)
    text = command if reading.reason else reading.text  # heredoc bodies are shown text, not producers
    try:
        lexer = shlex.shlex(text.replace("\n", " ; "), posix=False, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        tokens = []
    for token in tokens if depth < 2 else ():
        if len(token) > 1 and token[0] == token[-1] and token[0] in "'\"":
            inner = stdin_program_refusal(token[1:-1], depth + 1)
            if inner:
                return inner
    pipelines = _stages(tokens)
    fed = False
    for pipeline in pipelines:
        for index, stage in enumerate(pipeline):
            words, reads_in = _split(stage)
            if (index > 0 or reads_in) and _reads_program_from_stdin(words):
                fed = True
    if not fed:
        return ""
    if not tokens:
        return (
            "an interpreter reads its program from stdin, and the text cannot be split to see what feeds it"
        )
    why = (
        "an interpreter reads its program from stdin, fed by {}: only files named literally and read by cat "
        "are bound"
    )
    shown = next((t for t in tokens if any(c in t for c in _SHELL_READS)), None)
    if shown is not None:
        return why.format(f"{shown!r}, a word the shell expands")
    for pipeline in pipelines:
        for stage in pipeline[:-1]:
            words, _reads_in = _split(stage)
            program = next((w for w in words if not _assignment(w)), "")
            if name_of(program) not in PURE_READERS:
                return why.format(repr(program) if program else "a compound command")
    return ""


def _assignment(word: str) -> bool:
    name, eq, _value = word.partition("=")
    return bool(eq) and name.isidentifier()
