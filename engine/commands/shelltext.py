"""Bash's reading of multi-line text: heredoc bodies cut out as stdin data, continuations spliced.

The analysis proves a command plain on the *residual* text this module leaves: every heredoc operator
and delimiter word replaced by one blank, every body removed, every backslash-newline outside single
quotes spliced away, exactly as bash's reader does before it tokenises. What bash would read differently
from this simple model fails closed here (a reason), never silently: command substitution and `$'…'`
(their bodies have their own quoting), comments (a quote in a comment means nothing), `(`/`)`, `\\r`,
heredocs on a file descriptor, unusual delimiters, a continuation on a heredoc line or in an unquoted
body (bash joins the lines before it looks for the delimiter), expansions in an unquoted body, and a
body without its delimiter line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Heredoc", "Reading", "read_shell_text"]

# Delimiter words we model: letters, digits and `_.-`, bare or quoted in pieces (`EOF`, `'EOF'`,
# `"EOF"`, `E"OF"`, `\EOF`). Anything else (`$X`, spaces, globs) asks.
_DELIM_CHAR = re.compile(r"[A-Za-z0-9_.\-]")
_WORD_END = frozenset(" \t\n;&|()<>")


@dataclass(frozen=True)
class Heredoc:
    """One `<<DELIM` / `<<-DELIM` redirect: what the program reads on stdin, as bash feeds it."""

    delimiter: str  # after quote removal
    quoted: bool  # any part of the delimiter quoted: the body is literal
    strip_tabs: bool  # `<<-`: leading tabs removed from body lines and the delimiter line
    data: str  # the stdin bytes (as text), every line newline-terminated
    at: int  # offset in the residual text where the operator stood (one blank)
    span: tuple[int, int] = (0, 0)  # the body and its delimiter line in the original text (for display)


@dataclass(frozen=True)
class Reading:
    text: str  # the residual command: no heredoc operators or bodies, no continuations
    heredocs: tuple[Heredoc, ...]
    reason: str | None  # set = fail closed


class _Refuse(Exception):
    pass


@dataclass
class _Pending:
    delimiter: str
    quoted: bool
    strip_tabs: bool
    at: int


def read_shell_text(command: str) -> Reading:
    """The residual text and heredoc bodies of `command`, or a reason it cannot be read simply."""
    try:
        text, heredocs = _Reader(command).run()
    except _Refuse as exc:
        return Reading("", (), str(exc))
    return Reading(text, tuple(heredocs), None)


class _Reader:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0
        self.out: list[str] = []
        self.pending: list[_Pending] = []
        self.heredocs: list[Heredoc] = []

    def run(self) -> tuple[str, list[Heredoc]]:
        if "\r" in self.src:
            # bash reads `\r` as an ordinary character: `ls\r\n` runs `ls\r`, and `EOF\r` never ends a
            # heredoc. CRLF text is not what it looks like, so it asks.
            raise _Refuse("carriage return (CRLF): bash reads \\r as part of the word")
        src = self.src
        while self.i < len(src):
            char = src[self.i]
            if char == "\\":
                self._backslash()
            elif char == "'":
                self._single()
            elif char == '"':
                self._double()
            elif char == "\n":
                self.out.append("\n")
                self.i += 1
                if self.pending:
                    self._bodies()
            elif char == "`" or (char == "$" and src[self.i + 1 : self.i + 2] == "("):
                raise _Refuse("command substitution")
            elif char == "$" and src[self.i + 1 : self.i + 2] in ("'", '"'):
                raise _Refuse("ANSI-C or locale quoting")
            elif char in "()":
                raise _Refuse("subshell")
            elif char == "#" and self._word_start():
                self._comment()
            elif src.startswith("<<<", self.i):
                self.out.append("<<<")
                self.i += 3
            elif src.startswith("<<", self.i):
                self._operator()
            else:
                self.out.append(char)
                self.i += 1
        if self.pending:
            raise _Refuse("unterminated heredoc")
        return "".join(self.out), self.heredocs

    def _comment(self) -> None:
        """Dropped to the end of its line, as bash drops it, when what precedes the `#` is plainly a word
        boundary (a bare blank, newline or operator, or nothing); an escaped blank or anything less plain
        is refused: guessing wrong would leave a command bash runs out of the analysed text."""
        if self.out and self.out[-1] not in (" ", "\t", "\n", ";", "&", "|"):
            raise _Refuse("comment")
        end = self.src.find("\n", self.i)
        self.i = len(self.src) if end < 0 else end

    def _word_start(self) -> bool:
        return not self.out or self.out[-1][-1:] in (" ", "\t", "\n", ";", "&", "|")

    def _backslash(self) -> None:
        nxt = self.src[self.i + 1 : self.i + 2]
        if nxt == "\n":
            if self.pending:
                raise _Refuse("line continuation on a heredoc line")
            self.i += 2  # spliced: bash removes backslash-newline before it reads words
            return
        self.out.append("\\" + nxt)
        self.i += 1 + len(nxt)

    def _single(self) -> None:
        end = self.src.find("'", self.i + 1)
        if end < 0:
            self.out.append(self.src[self.i :])  # the analysis refuses the unterminated quote
            self.i = len(self.src)
            return
        self.out.append(self.src[self.i : end + 1])  # a newline inside is data
        self.i = end + 1

    def _double(self) -> None:
        src = self.src
        j = self.i + 1
        self.out.append('"')
        while j < len(src):
            char = src[j]
            if char == "\\":
                nxt = src[j + 1 : j + 2]
                if nxt == "\n":
                    if self.pending:
                        raise _Refuse("line continuation on a heredoc line")
                    j += 2  # bash splices inside double quotes too
                    continue
                self.out.append("\\" + nxt)
                j += 1 + len(nxt)
                continue
            if char == "`" or (char == "$" and src[j + 1 : j + 2] == "("):
                raise _Refuse("command substitution")
            self.out.append(char)
            j += 1
            if char == '"':
                break
        self.i = j

    def _operator(self) -> None:
        src = self.src
        # `3<<EOF` redirects another descriptor; `x3<<EOF` is the word x3 then a heredoc, but keep it simple.
        chunk = re.search(r"[^ \t\n;&|]*$", "".join(self.out[-64:]))
        if chunk is not None and chunk.group() and chunk.group()[-1:].isdigit():
            raise _Refuse("heredoc on a file descriptor")
        j = self.i + 2
        strip = src[j : j + 1] == "-"
        if strip:
            j += 1
        while j < len(src) and src[j] in " \t":
            j += 1
        delimiter: list[str] = []
        quoted = False
        while j < len(src) and src[j] not in _WORD_END:
            char = src[j]
            if char in ("'", '"'):
                end = src.find(char, j + 1)
                if end < 0:
                    raise _Refuse("unterminated quote in heredoc delimiter")
                piece = src[j + 1 : end]
                if not all(_DELIM_CHAR.fullmatch(c) for c in piece):
                    raise _Refuse("unusual heredoc delimiter")
                delimiter.append(piece)
                quoted = True
                j = end + 1
            elif char == "\\":
                nxt = src[j + 1 : j + 2]
                if not _DELIM_CHAR.fullmatch(nxt or " "):
                    raise _Refuse("unusual heredoc delimiter")
                delimiter.append(nxt)
                quoted = True
                j += 2
            elif _DELIM_CHAR.fullmatch(char):
                delimiter.append(char)
                j += 1
            else:
                raise _Refuse("unusual heredoc delimiter")
        word = "".join(delimiter)
        if not word:
            raise _Refuse("heredoc without a delimiter")
        self.out.append(" ")
        self.pending.append(_Pending(word, quoted, strip, len("".join(self.out)) - 1))
        self.i = j

    def _bodies(self) -> None:
        """Read every pending body, in order, starting just after the newline that ended their line."""
        src = self.src
        for doc in self.pending:
            start = self.i
            lines: list[str] = []
            while True:
                if self.i >= len(src):
                    raise _Refuse("unterminated heredoc")
                end = src.find("\n", self.i)
                line = src[self.i : end if end >= 0 else len(src)]
                self.i = end + 1 if end >= 0 else len(src)
                if doc.strip_tabs:
                    line = line.lstrip("\t")
                if line == doc.delimiter:
                    break
                if end < 0:
                    raise _Refuse("unterminated heredoc")  # last line without newline, not the delimiter
                lines.append(line if doc.quoted else _unquoted_line(line))
            data = "".join(line + "\n" for line in lines)
            span = (start, self.i)
            self.heredocs.append(Heredoc(doc.delimiter, doc.quoted, doc.strip_tabs, data, doc.at, span))
        self.pending = []


def _unquoted_line(line: str) -> str:
    """An unquoted body line as bash feeds it: `\\$ \\` \\\\` lose the backslash; any expansion asks."""
    out: list[str] = []
    j = 0
    while j < len(line):
        char = line[j]
        if char == "\\":
            nxt = line[j + 1 : j + 2]
            if nxt == "":
                # bash joins this line with the next before comparing it to the delimiter
                raise _Refuse("line continuation in unquoted heredoc")
            if nxt in "$`\\":
                out.append(nxt)
                j += 2
                continue
            out.append("\\")
            j += 1
            continue
        if char == "`" or (char == "$" and line[j + 1 : j + 2] in ("(", "{")):
            raise _Refuse("command substitution in unquoted heredoc")
        if char == "$":
            raise _Refuse("variable expansion in unquoted heredoc")
        out.append(char)
        j += 1
    return "".join(out)
