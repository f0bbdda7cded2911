"""The common case without a parser: split a plain chain (words, simple quotes, `&& || | ;`) in one pass.

Agents mostly send `ls -la src | head -n 5`-shaped commands. Parsing each with tree-sitter and walking the
tree costs more than the rest of a decision, so this module splits the subset whose meaning is not in
doubt: unquoted words of ordinary characters, single-quoted text, double-quoted text without `$`, `` ` ``,
`\\` or `!`, leading `NAME=value` words, and the four chain operators. Anything else — an expansion, a glob,
a redirection, a backslash, a newline, a non-ASCII character, an empty segment, a command-name word with
`=` that is not an assignment — returns None and the full analysis (engine.commands.analysis) decides.
The answer for what it accepts is the full analysis's answer (tests/engine/commands/test_fastlex.py
compares the two over generated and hostile corpora); it never accepts what the full analysis refuses.
"""

from __future__ import annotations

import re

__all__ = ["Part", "split_plain"]

# One token per match: blanks, an operator, a word (pieces of bare text and quotes, no blank between), or
# any other character (group 3), which means the text is outside the subset.
_TOKEN = re.compile(
    r"""[ \t]+|(&&|\|\||[|;])|((?:[A-Za-z0-9_./:,+=-]+|'[^']*'|"[^"$`\\!]*")+)|([\s\S])"""
)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is a blank
_QUOTED = re.compile(r"""'([^']*)'|"([^"]*)\"""")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

# (words after quote removal, leading NAME=value words, the segment's source text)
Part = tuple[list[str], list[str], str]


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word:
        return word
    # Inside the subset, quote removal is just dropping the quote characters of each quoted piece.
    return _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), word)


def split_plain(text: str) -> tuple[list[Part], tuple[str, ...]] | None:
    """The segments and operators of `text` when it is inside the plain subset, else None."""
    if not text.isascii() or _CONTROL.search(text) is not None:
        return None  # newlines (`;` or heredoc data), control and non-ASCII characters: the full analysis
    parts: list[Part] = []
    operators: list[str] = []
    words: list[str] = []
    assignments: list[str] = []
    start = end = -1
    for match in _TOKEN.finditer(text):
        op, word, other = match.groups()
        if other is not None:
            return None
        if op is not None:
            if start < 0:
                return None  # empty segment: the full analysis names it
            if not words:
                return None  # assignments only
            parts.append((words, assignments, text[start:end]))
            operators.append(op)
            words, assignments, start = [], [], -1
            continue
        if word is None:
            continue  # blanks
        if start < 0:
            start = match.start()
        end = match.end()
        if not words and "=" in word:
            if _ASSIGNMENT.match(word) is None:
                return None  # `a-b=c` or `'X=1'` in command position: left to the full analysis
            assignments.append(_unquote(word))
            continue
        words.append(_unquote(word))
    if start < 0 or not words:
        return None
    parts.append((words, assignments, text[start:end]))
    return parts, tuple(operators)
