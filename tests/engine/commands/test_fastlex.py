"""The lexical fast path gives the full analysis's answer or steps aside: never a different one."""

from __future__ import annotations

import os
import random
import shlex
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.commands import analysis, lexscan
from engine.commands.allowlist import AllowlistEntry, SegmentMatch, enforced_command, evaluate_allowlist
from engine.commands.analysis import CommandAnalysis
from engine.commands.fastlex import split_plain
from engine.commands.rendering import _quote, pin_path
from engine.commands.shelltext import Reading, read_shell_text

# Pieces an agent (or an attacker) puts in a command: ordinary words, wrappers, shells, keywords, builtins,
# assignments, quotes holding every metacharacter, operators and the characters the subset refuses.
WORDS = [
    "ls", "-la", "src/1", "git", "status", "--short", "cat", "README.md", "head", "-n", "5", "echo",
    "grep", "-e", "TODO", "wc", "-l", "nice", "timeout", "30", "time", "-p", "env", "--", "stdbuf", "-oL",
    "sudo", "doas", "nohup", "setsid", "sh", "bash", "dash", "zsh", "-c", "-lc", "-x", "python3", "-m",
    "pytest", "rm", "-rf", "/tmp/x", "tr", "a-z", "A-Z", "uniq", "cut", "-f", "printf", "-v", "%s",
    "if", "then", "fi", "for", "do", "done", "case", "esac", "while", "function", "select", "coproc",
    "in", "exec", "eval", "source", ".", "export", "cd", "set", "alias", "command", "builtin", "read",
    "FOO=1", "A_B=x", "X=", "a-b=c", "1A=2", "=x", "x=y=z", "PATH=/tmp", "'FOO=1'", "FOO='a b'",
    'FOO="c d"', "a=b", "--opt=v", "key:value", "a,b", "50%", "user@host", "+x", "./bin/tool",
    "../up", "/usr/bin/ls", "~/bin", "~", "*.py", "a?b", "[ab]", "{a,b}", "#c", "a#b", "!x", "a!b",
    "^x", "$HOME", "${X}", "$(id)", "`id`", "$'x'", '$"x"', "a\\ b", "\\n", "<x", ">y", "2>&1",
    "&>z", "<<EOF", "<<<s", "(x)", "é", "\u200b", "\x01",
    "''", '""', "'a b'", "'$HOME'", "'`id`'", "'a;b|c&&d'", "'\"'", "\"'\"", '"a b"', '"a;b|c"',
    '"$X"', '"`id`"', '"a\\"b"', '"!x"', "'it'\"'\"'s'", "a'b'c", "'a'\"b\"c", '"unterminated',
    "'unterminated",
]  # fmt: skip
OPERATORS = [" && ", " || ", " | ", "; ", "&&", "||", "|", ";", " ; ", " & ", ";;", "|&", " ||| ", "\n"]
BLANKS = [" ", "  ", "\t", " \t "]


def _command(rng: random.Random, depth: int = 0) -> str:
    parts: list[str] = []
    for index in range(rng.randint(1, 3)):
        if index:
            parts.append(rng.choice(OPERATORS))
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 4))]
        if depth < 2 and rng.random() < 0.15:
            inner = _command(rng, depth + 1)
            words = [rng.choice(["sh", "bash", "nice sh", "zsh"]), rng.choice(["-c", "-lc", "-x -c"])]
            words.append(rng.choice([shlex.quote(inner), f'"{inner}"', f"'{inner}' extra"]))
        parts.append(rng.choice(BLANKS).join(words))
    text = "".join(parts)
    if rng.random() < 0.1:
        text = rng.choice(BLANKS) + text + rng.choice(BLANKS)
    return text


def corpus(n: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(n):
        yield _command(rng)


def full_only(command: str, monkeypatch: pytest.MonkeyPatch) -> CommandAnalysis:
    with monkeypatch.context() as patch:
        patch.setattr(analysis, "split_plain", lambda text: None)
        return analysis._analyze(command, 0)


def check(command: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Fast and full agree; True when the fast path answered."""
    fast = analysis._fast_analysis(command, 0) if split_plain(command) is not None else None
    full = full_only(command, monkeypatch)
    if fast is not None:
        assert full.ok, (command, full.reason)
        assert fast == full, command
    assert analysis._analyze(command, 0) == full, command
    return fast is not None


def test_fast_path_agrees_with_the_full_analysis_on_a_large_generated_corpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answered = sum(check(command, monkeypatch) for command in corpus(20_000, seed=19))
    # Not vacuous: a good share of the corpus is inside the subset, and all of it agrees.
    assert answered > 1_000


BENCH_SHAPES = [
    "ls -la src/{i}",
    "git status --short {i}",
    "cat README.md | head -n {i}",
    "echo 'build {i}' && ls dist",
    "grep -e TODO -n src/main.py{i} | wc -l",
    "nice -n 5 timeout 30 ls {i}",
    "sh -c 'ls {i} && echo done'",
    "python3 -m pytest -q tests/test_{i}.py",
    "sudo ls {i}",
    "tr a-z A-Z | uniq -c | cut -f {i}",
    'bash -lc "cat notes{i}.txt | tail -n 5"',
    "time -p ls {i}",
    "env -- ls {i}",
    "FOO={i} ls",
    "git log --format=oneline -n {i}",
]


@pytest.mark.parametrize("shape", BENCH_SHAPES)
def test_agent_shaped_commands_take_the_fast_path_and_agree(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = shape.format(i=7)
    assert check(command, monkeypatch), command


HOSTILE = [
    "ls; then",
    "ls && if",
    "nice if x",
    "time",
    "env",
    "FOO=1",
    "FOO=1 && ls",
    "'FOO=1' ls",
    "a-b=c ls",
    "ls &&",
    "&& ls",
    "ls ;; x",
    "ls |& x",
    "ls & x",
    "ls ||| x",
    "ls ;",
    "; ls",
    "''",
    "'' ls",
    '"" ls',
    "printf -v PATH x",
    "printf -vPATH x",
    "sh -c 'ls $(id)'",
    "sh -c 'ls' extra",
    "sh -c",
    "zsh -c ls",
    'bash -c \'bash -c "sh -c \\"sh -c ls\\""\'',
    "sh -c 'sh -c \"sh -c ls\"'",
    "sudo -u root ls",
    "env FOO=1 ls",
    "nohup ls",
    "ls\tx",
    "ls\u00a0x",
    "ls\x0bx",
    "ls\rx",
    "ls 'a\nb'",
    "ls a\\\nb",
    "exec ls",
    "command ls",
    ". ./x",
    "x=1 y=2 z",
    "ls a=b c==d",
    "nice -n 5 timeout 30 env -- time -p nice ls",
    "timeout -s KILL 5 ls",
    # tree-sitter-bash misreads these (each was a fast/full disagreement found by the tests below)
    "X=1 a:b",
    "X= key:value",
    "A_B=x\tkey:value x",
    "b+: x",
    "a+: =0,",
    "ls ==",
    "ls == x",
    "- a=b",
    "- b=0.",
    "sh -c ==",
    "user@host",
    "x@ y",
    "50% x",
    "_=x ls",
    "_= a",
    "X=1 - a:b",
    "X=1 a=b a:b",
    "X='a b' ls",
    "X=a:b ls",
]


@pytest.mark.parametrize("command", HOSTILE)
def test_hostile_strings_agree_or_fall_back(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    check(command, monkeypatch)


_TEXT = st.text(alphabet="ab=-_ \t'\"|&;$`\\!#*?~(){}[]<>\n.%@", max_size=24)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_property_random_text_agrees_or_falls_back(command: str) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        check(command, monkeypatch)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab=-_ \t'\"|&;!*?~{}[]>%@.:/", max_size=30))
def test_property_reader_is_the_identity_without_its_active_characters(command: str) -> None:
    # analysis skips read_shell_text on text with none of `\r \n \\ ` $ ( ) # <`: it must change nothing.
    assert analysis._READER_ACTIVE.search(command) is None
    assert read_shell_text(command) == Reading(command, (), None)


def _random_word(rng: random.Random, chars: str) -> str:
    word = "".join(rng.choice(chars) for _ in range(rng.randint(1, 4)))
    roll = rng.random()
    if roll < 0.1:
        return f"'{word}'"
    if roll < 0.2:
        return f'{word}"{word}"'
    return word


PREFIXES = [
    "ls ",
    "git ",
    "nice ",
    "env ",
    "sh -c ",
    "timeout 5 ",
    "X=1 ",
    "X= ",
    "A_B=x Y=2 ",
    "a_=1 ",
    "A1=- ",
]


@pytest.mark.parametrize("chars", ["ab,-./_0:+=", "a:+=-_@%^", "aX=1 ", "ab_=1:"])
def test_words_of_every_subset_character_agree_or_fall_back(
    chars: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words made only of the characters tree-sitter-bash has tripped on (`=`, `:`, `+`) in every
    position: where the grammar misreads them, the fast path must have stepped aside."""
    rng = random.Random(chars)
    answered = 0
    for _ in range(15_000):
        command = " ".join(_random_word(rng, chars) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.3:
            command = rng.choice(PREFIXES) + command
        if rng.random() < 0.2:
            command += rng.choice([" | wc", " && ls", "; x", "||y"])
        answered += check(command, monkeypatch)
    assert answered > 500


def _subset_scans_pass(command: str) -> bool:
    """What _analyze skips by trying the subset first: on text the subset takes, bash's reader changes
    nothing and the lexical and character scans find nothing."""
    if split_plain(command) is None:
        return False
    assert read_shell_text(command) == Reading(command, (), None), command
    assert lexscan.lexical_reason(command) is None, command
    assert lexscan.char_reason(command) is None, command
    return True


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet="ab=-_ \t'\"|&;$`\\!#*?~(){}[]<>\n\r.%@:,+/\x01é", max_size=30))
def test_property_the_subset_is_inside_every_scan_it_skips(command: str) -> None:
    _subset_scans_pass(command)


def test_the_subset_is_inside_every_scan_it_skips_on_the_generated_corpus() -> None:
    quoted = ["'$(id) `x` <<EOF # ( ) \\ ! ~'", "'a\tb'", '"( ) # < > ~ * ? [ ] { } ; & |"', "'\"'"]
    rng = random.Random(7)
    commands = [*corpus(20_000, seed=23), *(f"echo {rng.choice(quoted)} | wc" for _ in range(50))]
    assert sum(_subset_scans_pass(command) for command in commands) > 1_000


def test_rendering_joins_as_quoting_each_word_would() -> None:
    """The enforced command's one-join fast path (segments without a `'`) renders exactly what quoting each
    word does, over the generated corpus allowed wholesale (`*`)."""

    def reference(an: CommandAnalysis, matches: tuple[SegmentMatch, ...]) -> str:
        parts: list[str] = []
        for index, (segment, match) in enumerate(zip(an.segments, matches, strict=True)):
            if index:
                parts.append(an.operators[index - 1])
            pin = pin_path(match)
            parts.append(" ".join(_quote(word) for word in (pin, *segment.argv[1:])))
        return " ".join(parts)

    env = {"PATH": "/usr/bin:/bin"}
    compared = 0
    for command in [*corpus(5_000, seed=29), 'echo "it\'s" | cat', "echo 'a'\"'\"'b' && ls"]:
        an = analysis._analyze(command, 0)
        if not an.ok or any(s.wrapper_argv or s.inner or s.heredocs for s in an.segments):
            continue
        result = evaluate_allowlist(an, [AllowlistEntry("*")], cwd=os.getcwd(), env=env)
        rendered = enforced_command(an, result)
        if rendered is not None:
            assert rendered == reference(an, result.segments), command
            compared += 1
    assert compared > 100
