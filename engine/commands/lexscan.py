"""Line 1 of command analysis, apart from the grammar: a quote-aware scan of the raw text that refuses every
character with shell meaning beyond words, quotes and the four chain operators (tree-sitter must then agree,
engine/commands/analysis.py), and the characters no plain command contains."""

from __future__ import annotations

import re
import unicodedata

_PIECE = re.compile(r"""'[^']*'?|"(?:[^"\\]|\\[\s\S])*"?|\\[\s\S]?|[^'"\\]+""")
DQ_SUBST = re.compile(r"\$\(|`")
DQ_EXPANSION = re.compile(r"\$[A-Za-z_{0-9@*#?$!-]")
_BARE_BAD = re.compile(r"&&|\|\||[`$<>()&|;*?\[\]{}~#!]")


def lexical_reason(command: str) -> str | None:
    """First reason the raw text is not plain, scanning quotes exactly as the shell does."""
    pieces = _PIECE.findall(command)
    prev_end_blank = True  # a `#` only starts a comment at the start of a word
    for index, piece in enumerate(pieces):
        head = piece[0]
        if head == "'":
            if len(piece) < 2 or piece[-1] != "'":
                return "unterminated quote"
            prev_end_blank = False
            continue
        if head == '"':
            if len(piece) < 2 or piece[-1] != '"' or (piece.endswith('\\"') and not _dq_closed(piece)):
                return "unterminated quote"
            body = piece[1:-1]
            if "\\\n" in body:
                return "line continuation"
            if DQ_SUBST.search(strip_dq_escapes(body)):
                return "command substitution"
            if DQ_EXPANSION.search(strip_dq_escapes(body)):
                return "variable expansion"
            prev_end_blank = False
            continue
        if head == "\\":
            if len(piece) < 2:
                return "unterminated shell quote/escape"
            if piece[1] == "\n":
                return "line continuation"
            prev_end_blank = False
            continue
        reason = _bare_reason(piece, prev_end_blank, pieces[index + 1] if index + 1 < len(pieces) else "")
        if reason:
            return reason
        prev_end_blank = piece[-1] in " \t\n"
    return None


def _dq_closed(piece: str) -> bool:
    # `"...\"` with an odd run of backslashes before the final quote is unterminated.
    run = len(piece) - 1 - len(piece[:-1].rstrip("\\"))
    return run % 2 == 0


def strip_dq_escapes(body: str) -> str:
    return re.sub(r"\\[\s\S]", "", body)


BARE_REASONS = {
    "`": "command substitution",
    "<": "redirection",
    ">": "redirection",
    "(": "subshell",
    ")": "subshell",
    "*": "glob",
    "?": "glob",
    "[": "glob",
    "]": "glob",
    "{": "brace expansion",
    "}": "brace expansion",
    "~": "tilde expansion",
    "!": "negation or history expansion",
}


def _bare_reason(piece: str, word_start: bool, following: str) -> str | None:
    for match in _BARE_BAD.finditer(piece):
        char, at = match.group(), match.start()
        nxt = piece[at + 1] if at + 1 < len(piece) else following[:1]
        if char in ("&&", "||"):
            continue
        if char == "$":
            if nxt == "(":
                return "command substitution"
            if nxt in ("'", '"'):
                return "ANSI-C or locale quoting"
            if nxt and nxt not in " \t;&|":
                return "variable expansion"
            continue
        if char == "<" and nxt == "<" and piece[at + 2 : at + 3] != "<":
            return "heredoc"
        if char == "&":
            return "redirection" if nxt == ">" else "background"
        if char == "|":
            if nxt == "&":
                return "unsupported shell token: |&"
            continue
        if char == ";":
            if nxt in (";", "&"):
                return f"unsupported shell token: ;{nxt}"
            continue
        if char == "#":
            if (at == 0 and word_start) or (at > 0 and piece[at - 1] in " \t\n;&|"):
                return "comment"
            continue
        return BARE_REASONS.get(char, "unsupported shell token")
    return None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # \t and \n allowed


def char_reason(command: str) -> str | None:
    # A newline separates commands like `;` (or is data inside quotes); `\r` is refused by read_shell_text.
    if "\r" in command:
        return "carriage return (CRLF): bash reads \\r as part of the word"
    if command.isascii():
        return "control character" if _CONTROL.search(command) else None
    for char in command:
        category = unicodedata.category(char)
        if char in "\t \n":
            continue
        if category[0] in "CZ":
            return "invisible or control character"
    return None
