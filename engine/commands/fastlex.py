"""The common case without a parser: split a plain chain (words, simple quotes, `&& || | ;`) in one pass.

Agents mostly send `ls -la src | head -n 5`-shaped commands. Parsing each with tree-sitter and walking the
tree costs more than the rest of a decision, so this module splits the subset whose meaning is not in
doubt: unquoted words of ordinary characters, single-quoted text, double-quoted text without `$`, `` ` ``,
`\\` or `!`, leading unquoted `NAME=value` words of plain characters, and the four chain operators. Anything
else — an expansion, a glob, a redirection, a backslash, a newline, a non-ASCII character, an empty segment,
a command name of other characters, a `==` — returns None and the full analysis decides
(engine.commands.analysis): tree-sitter-bash misreads some of those, so only the grammar may answer for them.
The answer for what it accepts is the full analysis's answer (tests/engine/commands/test_fastlex.py
compares the two over generated and hostile corpora); it never accepts what the full analysis refuses.
"""

from __future__ import annotations

import re

__all__ = ["Part", "split_plain"]

# A word: pieces of bare text and quotes with no blank between. Possessive quantifiers: no backtracking.
# Quoted text is printable ASCII and tabs (so no control or non-ASCII character gets past the match).
_WORD_TEXT = r"""(?:[A-Za-z0-9_./:,+=-]++|'[\t -&(-~]*+'|"[\t #%-\[\]-_a-~]*+")++"""
_SEGMENT_TEXT = rf"[ \t]*+{_WORD_TEXT}(?:[ \t]++{_WORD_TEXT})*+[ \t]*+"
_OPERATOR_TEXT = r"&&|\|\||[|;]"
# The whole subset: segments of words joined by operators, nothing else, no empty segment.
_PLAIN = re.compile(rf"{_SEGMENT_TEXT}(?:(?:{_OPERATOR_TEXT}){_SEGMENT_TEXT})*+")
# Once the text is known plain: segments and operators in turn; then each segment's words.
_PIECES = re.compile(rf"(?:{_WORD_TEXT}|[ \t]++)++|{_OPERATOR_TEXT}")
_WORD = re.compile(_WORD_TEXT)
_COMMAND_NAME = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*+")
_ASSIGNMENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*+=[A-Za-z0-9_./,-]*+")
_QUOTED = re.compile(r"""'([^']*)'|"([^"]*)\"""")
_OPERATOR = re.compile(rf"({_OPERATOR_TEXT})")

# (words after quote removal, leading NAME=value words (always none here), the segment's source text)
Part = tuple[list[str], list[str], str]


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word:
        return word
    # Inside the subset, quote removal is just dropping the quote characters of each quoted piece.
    return _QUOTED.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), word)


def split_plain(text: str) -> tuple[list[Part], tuple[str, ...]] | None:
    """The segments and operators of `text` when it is inside the plain subset, else None."""
    if _PLAIN.fullmatch(text) is None:
        return None  # newlines (`;` or heredoc data), control and non-ASCII characters: the full analysis
    any_quote = "'" in text or '"' in text
    # Without quotes an operator character can only be an operator: split there (the match proved the
    # shape, segment operator segment ...); with quotes, scan pieces so quoted operators stay in words.
    pieces = _PIECES.findall(text) if any_quote else _OPERATOR.split(text)
    parts: list[Part] = []
    for piece in pieces[0::2]:
        raw = piece.strip(" \t")
        quoted = any_quote and ("'" in raw or '"' in raw)
        # Unquoted, only blanks and word characters are left: split() splits exactly at the blanks.
        words = [_unquote(word) for word in _WORD.findall(raw)] if quoted else raw.split()
        assignments: list[str] = []
        while words and not quoted and "=" in words[0] and _ASSIGNMENT.fullmatch(words[0]) is not None:
            assignments.append(words.pop(0))  # `NAME=value` of plain characters, unquoted
        if not words or _COMMAND_NAME.fullmatch(words[0]) is None or "==" in raw:
            # tree-sitter-bash misreads some words the shell reads plainly (`X=1 a:b`, `b+: x`, `ls ==`,
            # `- a=b`, found by the differential tests): a command name of other characters, an
            # assignment (`NAME=value cmd`) and any `==` are left to the full analysis.
            return None
        parts.append((words, assignments, raw))
    return parts, tuple(pieces[1::2])
