"""Shell-command analysis: prove a command is a plain chain of simple commands, or fail closed."""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import NamedTuple

import tree_sitter
import tree_sitter_bash

from engine.commands.fastlex import split_plain
from engine.commands.inlineeval import inline_eval
from engine.commands.interpoptions import INLINE, UNKNOWN, program_source
from engine.commands.interpreters import is_interpreter
from engine.commands.lexscan import (
    BARE_REASONS,
    DQ_EXPANSION,
    DQ_SUBST,
    char_reason,
    lexical_reason,
    strip_dq_escapes,
)
from engine.commands.shelltext import Heredoc, read_shell_text
from engine.commands.wrappers import BLOCKED_WRAPPERS, TRANSPARENT_WRAPPERS, basename, names, unwrap

__all__ = [
    "ANALYSED_SHELLS",
    "BLOCKED_WRAPPERS",
    "HEREDOC_WARNING",
    "OTHER_SHELLS",
    "TRANSPARENT_WRAPPERS",
    "CommandAnalysis",
    "Heredoc",
    "Segment",
    "analyze_command",
    "inline_eval",
    "names",
    "redirections",
]

MAX_COMMAND_CHARS = 16_384
MAX_SHELL_DEPTH = 3  # nested `sh -c` levels analysed

HEREDOC_WARNING = "Warning: heredoc execution requires explicit approval in allowlist mode."

# Shells whose `-c` payload we analyse with the bash grammar (their syntax is a subset of bash's).
ANALYSED_SHELLS = frozenset({"sh", "bash", "dash", "ash"})
# Shells with their own expansion rules (zsh `=cmd`, fish, csh ...): `-c` there is never proven plain.
OTHER_SHELLS = frozenset({"zsh", "ksh", "mksh", "pdksh", "yash", "fish", "csh", "tcsh", "rc", "es", "posh"})
# Builtins and keywords that run code, change shell state or need the shell itself: never plain.
SHELL_BUILTINS = names(
    "exec eval . source command builtin enable alias unalias trap set shopt export declare typeset "
    "readonly local unset let read mapfile readarray hash fc history cd pushd popd ulimit umask coproc "
    "wait jobs fg bg disown suspend logout exit return break continue shift getopts complete compgen "
    "compopt bind caller dirs times function select if then else elif fi do done case esac while until "
    "for in { } ! [[ ]] (( "
)


# Segment and CommandAnalysis are named tuples: immutable (analyses are cached and shared) and built in a
# fraction of a frozen dataclass's time, which showed in the per-decision profile (issue 19).
class Segment(NamedTuple):
    """One simple command of a chain, after quote removal and wrapper unwrapping."""

    argv: tuple[str, ...]  # words of the effective command after unwrapping transparent wrappers
    raw: str  # source text of this segment
    wrappers: tuple[str, ...]  # transparent wrappers removed, e.g. ("nice", "env")
    blocked_wrapper: str | None  # "sudo"/"doas"/"setsid"/... -> this segment can never be satisfied
    assignments: tuple[str, ...]  # leading NAME=value words (a segment with these never satisfies)
    # Each removed wrapper's own words (name + options), so the enforced command can keep and pin them.
    wrapper_argv: tuple[tuple[str, ...], ...] = ()
    # `sh -c '<chain>'`: the payload's own analysis (argv[-1] is the payload text).
    inner: CommandAnalysis | None = None
    # `<<EOF` bodies this command reads (stdin data, never code: a heredoc to an interpreter asks).
    heredocs: tuple[Heredoc, ...] = ()


class CommandAnalysis(NamedTuple):
    ok: bool  # False = fail closed (ask or deny, never allow)
    reason: str | None  # e.g. "command substitution", "redirection", "unparseable"
    segments: tuple[Segment, ...]
    operators: tuple[str, ...]  # between segments: "&&", "||", ";", "|"  (len = len(segments)-1)


class _Unsafe(Exception):
    """Raised inside the walk; the message is the analysis reason."""


def _fail(reason: str) -> CommandAnalysis:
    return CommandAnalysis(False, reason, (), ())


# Line 1, the lexical scan, lives in engine/commands/lexscan.py.

# --------------------------------------------------------------------------- line 2: the grammar

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_LOCAL = threading.local()


def _parser() -> tree_sitter.Parser:
    """One parser per thread: decisions run in worker threads, and a Parser is not safe to share."""
    parser: tree_sitter.Parser | None = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


_NODE_REASONS = {
    "command_substitution": "command substitution",
    "process_substitution": "process substitution",
    "simple_expansion": "variable expansion",
    "expansion": "variable expansion",
    "arithmetic_expansion": "arithmetic expansion",
    "brace_expression": "brace expansion",
    "ansi_c_string": "ANSI-C or locale quoting",
    "translated_string": "ANSI-C or locale quoting",
    "subshell": "subshell",
    "compound_statement": "group",
    "function_definition": "function definition",
    "if_statement": "control structure",
    "while_statement": "control structure",
    "for_statement": "control structure",
    "c_style_for_statement": "control structure",
    "case_statement": "control structure",
    "test_command": "test expression",
    "declaration_command": "shell builtin",
    "unset_command": "shell builtin",
    "negated_command": "negation",
    "variable_assignment": "assignment without command",
    "variable_assignments": "assignment without command",
    "file_redirect": "redirection",
    "herestring_redirect": "redirection",
    "heredoc_redirect": "heredoc",
    "redirected_statement": "redirection",
    "comment": "comment",
    "arithmetic_command": "arithmetic expansion",
}
_WORD_TYPES = frozenset({"word", "number", "raw_string", "string", "concatenation"})
_CHAIN_OPERATORS = frozenset({"&&", "||", ";", "|"})


def _node_reason(node: tree_sitter.Node) -> str:
    return _NODE_REASONS.get(node.type, f"unsupported shell syntax: {node.type}")


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


_WORD_SPECIAL = re.compile(r"[$`<>()&|;*?\[\]{}~!'\" \t\n\r\\]")


def _bare_word(text: str) -> str:
    """Quote removal for an unquoted word; any unescaped metacharacter left means tree-sitter disagreed."""
    if not _WORD_SPECIAL.search(text) and not text.startswith("#"):
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                raise _Unsafe("unterminated shell quote/escape")
            out.append(text[index + 1])
            index += 2
            continue
        if char in "$`<>()&|;*?[]{}~!'\" \t\n\r" or (char == "#" and index == 0):
            raise _Unsafe(BARE_REASONS.get(char, "unsupported shell token"))
        out.append(char)
        index += 1
    return "".join(out)


def _dq_word(text: str) -> str:
    body = text[1:-1]
    if DQ_SUBST.search(strip_dq_escapes(body)):
        raise _Unsafe("command substitution")
    if DQ_EXPANSION.search(strip_dq_escapes(body)):
        raise _Unsafe("variable expansion")
    return re.sub(r'\\([$`"\\])', r"\1", body)


def _blank(gap: bytes) -> bool:
    return not gap.strip(b" \t")


def _contiguous(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """Children that cover `node` byte for byte; a hole means tree-sitter skipped text bash would read."""
    children = node.children
    at = node.start_byte
    for child in children:
        if child.start_byte != at:
            raise _Unsafe("unparseable")
        at = child.end_byte
    if at != node.end_byte:
        raise _Unsafe("unparseable")
    return children


def _word_value(node: tree_sitter.Node) -> str:
    kind = node.type
    if kind == "word" or kind == "number":
        return _bare_word(_text(node))
    if kind == "raw_string":
        text = _text(node)
        if len(text) < 2 or text[0] != "'" or text[-1] != "'":
            raise _Unsafe("unterminated quote")
        return text[1:-1]
    if kind == "string":
        for child in node.children:
            if child.type not in ('"', "string_content"):
                raise _Unsafe(_node_reason(child))
        text = _text(node)
        if len(text) < 2 or text[0] != '"' or text[-1] != '"':
            raise _Unsafe("unterminated quote")
        return _dq_word(text)
    if kind == "concatenation":
        return "".join(_word_value(child) for child in _contiguous(node))
    raise _Unsafe(_node_reason(node))


def _flatten(root: tree_sitter.Node, src: bytes) -> tuple[list[tree_sitter.Node], list[str], list[int]]:
    """Commands, the operators between them and where each operator starts, refusing every statement
    type that is not a chain. A newline between two commands is `;`, as bash reads it; a newline after
    an operator (`ls &&⏎pwd`) is blank; before one (`ls⏎&& pwd`) bash refuses, and so do we."""
    commands: list[tree_sitter.Node] = []
    operators: list[str] = []
    positions: list[int] = []
    expect_command = True
    last_end = 0

    def visit(node: tree_sitter.Node) -> None:
        nonlocal expect_command, last_end
        for child in node.children:
            kind = child.type
            if kind not in ("list", "pipeline"):
                gap = src[last_end : child.start_byte]
                if b"\n" in gap and kind == "command" and not expect_command:
                    operators.append(";")
                    positions.append(last_end + gap.index(b"\n"))
                    expect_command = True
                elif not _blank(gap.replace(b"\n", b"") if expect_command else gap):
                    raise _Unsafe("unparseable")  # text no node accounts for
                last_end = child.end_byte
            if kind in ("list", "pipeline"):
                visit(child)
            elif kind == "command":
                if not expect_command:
                    raise _Unsafe("unparseable")
                commands.append(child)
                expect_command = False
            elif kind in _CHAIN_OPERATORS:
                if expect_command:
                    raise _Unsafe("empty command")
                operators.append(kind)
                positions.append(child.start_byte)
                expect_command = True
            elif kind == "&":
                raise _Unsafe("background")
            elif kind == "|&":
                raise _Unsafe("unsupported shell token: |&")
            elif child.is_named:
                raise _Unsafe(_node_reason(child))
            else:
                raise _Unsafe(f"unsupported shell token: {kind}")

    visit(root)
    if not _blank(src[last_end:].replace(b"\n", b"")):
        raise _Unsafe("unparseable")
    if not commands:
        raise _Unsafe("empty command")
    if expect_command:
        raise _Unsafe("empty command")  # trailing operator, `echo ok &&` or `ls;`
    return commands, operators, positions


def _segment(node: tree_sitter.Node, depth: int) -> Segment:
    assignments: list[str] = []
    words: list[str] = []
    text, base = node.text or b"", node.start_byte
    last_end = base
    for child in node.children:
        kind = child.type
        # Only blanks may separate words: tree-sitter skips some text bash reads (`x \ a` is `x ' a'`).
        if not _blank(text[last_end - base : child.start_byte - base]):
            raise _Unsafe("unparseable")
        # tree-sitter-bash splits `'a'\b` into two sibling nodes; with no blank between them they are
        # one shell word (both found by the differential test against real bash).
        joined = child.start_byte == last_end and child.start_byte != base
        last_end = child.end_byte
        if kind == "variable_assignment":
            if words or joined:
                raise _Unsafe("unparseable")
            assignments.append(_assignment(child))
        elif kind == "command_name":
            if words or joined or len(child.children) != 1:
                raise _Unsafe("unparseable")
            words.append(_word_value(_contiguous(child)[0]))
        elif kind in _WORD_TYPES:
            if not words:
                raise _Unsafe("unparseable")
            if joined:
                words[-1] += _word_value(child)
            else:
                words.append(_word_value(child))
        else:
            raise _Unsafe(_node_reason(child))
    if not _blank(text[last_end - base :]):
        raise _Unsafe("unparseable")
    return _build_segment(words, assignments, _text(node), depth)


def _build_segment(words: list[str], assignments: list[str], raw: str, depth: int) -> Segment:
    """A segment from its words, however they were split (the tree walk above or engine.commands.fastlex)."""
    if not words:
        raise _Unsafe("assignment without command")
    if words[0] in SHELL_BUILTINS:
        raise _Unsafe(f"shell builtin: {words[0]}")
    if words[0] == "":
        raise _Unsafe("empty command name")
    if words[0] == "printf" and any(word.startswith("-v") for word in words[1:3]):
        raise _Unsafe("shell builtin: printf -v")  # assigns a shell variable, e.g. PATH for later segments
    plain = _PLAIN_NAMES.get(words[0])
    if plain is None:
        plain = _plain_name(words[0])
    if plain:  # what unwrap and _shell_payload give a name that is neither a wrapper nor a shell
        return Segment(tuple(words), raw, (), None, tuple(assignments), (), None)
    groups, argv, blocked = unwrap(words)
    inner = None
    if blocked is None:
        if argv[0] in SHELL_BUILTINS:
            raise _Unsafe(f"shell builtin: {argv[0]}")
        inner = _shell_payload(argv, depth)
    if not groups:  # positional: keyword arguments double the cost of building a Segment
        return Segment(tuple(argv), raw, (), blocked, tuple(assignments), (), inner)
    return Segment(
        argv=tuple(argv),
        raw=raw,
        wrappers=tuple(basename(group[0]) for group in groups),
        blocked_wrapper=blocked,
        assignments=tuple(assignments),
        wrapper_argv=tuple(tuple(group) for group in groups),
        inner=inner,
    )


# Command name -> whether it is neither a wrapper (transparent or blocked) nor a shell, by basename as
# unwrap and _shell_payload compare it. A pure function of the name; bounded like the analysis cache.
_PLAIN_NAMES: dict[str, bool] = {}
_WRAPPER_OR_SHELL = BLOCKED_WRAPPERS | frozenset(TRANSPARENT_WRAPPERS) | ANALYSED_SHELLS | OTHER_SHELLS


def _plain_name(word: str) -> bool:
    plain = basename(word) not in _WRAPPER_OR_SHELL
    if len(_PLAIN_NAMES) >= 4096:
        _PLAIN_NAMES.clear()
    _PLAIN_NAMES[word] = plain
    return plain


def _assignment(node: tree_sitter.Node) -> str:
    children = _contiguous(node)
    if len(children) < 2 or children[0].type != "variable_name" or children[1].type != "=":
        raise _Unsafe(_node_reason(node) if len(children) < 2 else "unsupported assignment")
    value = "".join(_word_value(child) for child in children[2:])
    return f"{_text(children[0])}={value}"


_SHELL_FLAG_CLUSTER = re.compile(r"-[eulx]*c[eulx]*")
_SHELL_FLAG = re.compile(r"-[eulx]+")


def _shell_payload(argv: list[str], depth: int) -> CommandAnalysis | None:
    """`sh -c '<payload>'`: analyse the payload; any shell we cannot prove plain fails closed."""
    name = basename(argv[0])
    if name not in ANALYSED_SHELLS and name not in OTHER_SHELLS:
        return None
    flags: list[str] = []
    script_at = None
    for i, word in enumerate(argv[1:], start=1):
        if _SHELL_FLAG_CLUSTER.fullmatch(word):
            script_at = i + 1
            flags.append(word)
            break
        if _SHELL_FLAG.fullmatch(word):
            flags.append(word)
            continue
        break
    if script_at is None:
        # Options read as the shell reads them (issue 27 §5): `bash -e x.sh`, `sh -- x.sh`, `sh -s` are
        # plain runs of a file or of stdin, whose content binding follows; what no grammar covers asks.
        source = program_source(argv) if name in ANALYSED_SHELLS else None
        if source is not None and source.kind == INLINE:
            raise _Unsafe(f"unsupported shell option: {argv[1]}")
        unparsed = source is None or source.kind == UNKNOWN
        if unparsed and any(word.startswith(("-", "+")) for word in argv[1:2]):
            raise _Unsafe(f"unsupported shell option: {argv[1]}")
        return None  # `bash script.sh` / `sh` reading stdin: the shell itself must be allowlisted
    if name in OTHER_SHELLS:
        raise _Unsafe(f"unsupported shell for -c: {name}")
    if script_at != len(argv) - 1:
        raise _Unsafe(
            "shell -c with positional arguments" if script_at < len(argv) else "shell -c without a command"
        )
    if depth >= MAX_SHELL_DEPTH:
        raise _Unsafe("shell nesting too deep")
    inner = _analyze(argv[script_at], depth + 1)
    if not inner.ok:
        raise _Unsafe(f"{name} -c: {inner.reason}")
    return inner


# --------------------------------------------------------------------------- entry point


def analyze_command(command: str) -> CommandAnalysis:
    """Segments and operators of `command`, or ok=False with the first reason it is not provably plain."""
    if not isinstance(command, str):
        return _fail("not a string")
    return _analyze_cached(command)


@lru_cache(maxsize=4096)
def _analyze_cached(command: str) -> CommandAnalysis:
    # Pure function of the text, and CommandAnalysis is immutable, so caching cannot go stale.
    return _analyze(command, 0)


def _analyze(command: str, depth: int) -> CommandAnalysis:
    if len(command) > MAX_COMMAND_CHARS:
        return _fail("command too long")
    # The plain subset first: text inside it is printable ASCII whose only reader-active characters sit
    # inside quotes, so read_shell_text returns it unchanged and the lexical and character scans pass it
    # (test_fastlex checks all three on every text the subset takes); the answer is the one they lead to.
    fast = _fast_analysis(command, depth)
    if fast is not None:
        return fast
    if not command.strip():
        return _fail("empty command")
    # Heredoc bodies come out as stdin data and continuations are spliced first (shelltext.py); the
    # two checks below then prove the residual text plain, newlines separating commands like `;`.
    # Control and invisible characters are refused in heredoc bodies too: the operator reads them.
    heredocs: tuple[Heredoc, ...] = ()
    if _READER_ACTIVE.search(command) is None:
        text = command  # read_shell_text returns exactly this (and no heredocs) when none of these occur
    else:
        reading = read_shell_text(command)
        if reading.reason:
            return _fail(reading.reason)
        text, heredocs = reading.text, reading.heredocs
    reason = lexical_reason(text) or char_reason(command)
    if reason:
        return _fail(reason)
    if text != command and not heredocs:  # spliced continuations may leave plain text
        fast = _fast_analysis(text, depth)
        if fast is not None:
            return fast
    src = text.encode("utf-8")  # _char_reason has refused lone surrogates
    root = _parser().parse(src).root_node
    if root.has_error or root.type != "program":
        return _fail("unparseable")
    try:
        nodes, operators, positions = _flatten(root, src)
        segments = tuple(_segment(node, depth) for node in nodes)
        if heredocs:
            segments = _attach_heredocs(segments, nodes, positions, heredocs, text)
    except _Unsafe as exc:
        return _fail(str(exc))
    except RecursionError:
        return _fail("unparseable")
    return CommandAnalysis(True, None, segments, tuple(operators))


# Characters bash's reader (shelltext.py) acts on; text without any of them reads as itself, no heredocs.
_READER_ACTIVE = re.compile(r"[\r\n\\`$()#<]")


def _fast_analysis(text: str, depth: int) -> CommandAnalysis | None:
    """The plain-chain subset split without tree-sitter (engine.commands.fastlex), segments built by the
    same code as the tree walk's. None (the grammar decides) outside the subset or when anything in it
    fails, so every reason a command is refused still comes from the full analysis."""
    split = split_plain(text)
    if split is None:
        return None
    parts, operators = split
    try:
        segments = tuple([_build_segment(words, assigned, raw, depth) for words, assigned, raw in parts])
    except (_Unsafe, RecursionError):
        return None
    return CommandAnalysis(True, None, segments, operators)


def _attach_heredocs(
    segments: tuple[Segment, ...],
    nodes: list[tree_sitter.Node],
    positions: list[int],
    heredocs: tuple[Heredoc, ...],
    text: str,
) -> tuple[Segment, ...]:
    """Give each heredoc to the command whose words surround its operator; a body for an interpreter
    (`bash <<EOF`, `python3 - <<EOF`, `sh -s`) is code, so that asks."""
    attached: list[list[Heredoc]] = [[] for _ in segments]
    for doc in heredocs:
        at = len(text[: doc.at].encode("utf-8"))  # tree-sitter counts bytes
        index = sum(1 for p in positions if p < at)
        if index >= len(nodes) or at <= nodes[index].start_byte:
            raise _Unsafe("heredoc before the command")
        attached[index].append(doc)
    out: list[Segment] = []
    for segment, docs in zip(segments, attached, strict=True):
        if docs:
            if segment.blocked_wrapper is None and (
                is_interpreter(segment.argv[0]) or segment.argv[0] in SHELL_BUILTINS
            ):
                raise _Unsafe(f"heredoc to an interpreter: the body is code for {basename(segment.argv[0])}")
            segment = segment._replace(heredocs=tuple(docs))
        out.append(segment)
    return tuple(out)


_REDIRECTS = frozenset({"file_redirect", "herestring_redirect"})


def redirections(command: str) -> list[str]:
    """The redirections in `command` as written (`> /tmp/out`, `2>&1`), for a refusal that names them; the
    analysis itself only says `redirection`."""
    data = command.encode("utf-8", "surrogatepass")
    found: list[str] = []
    todo = [_parser().parse(data).root_node]
    while todo and len(found) < 8:
        node = todo.pop()
        if node.type in _REDIRECTS:
            found.append(data[node.start_byte : node.end_byte].decode("utf-8", "replace"))
            continue
        todo.extend(reversed(node.children))
    return found
