"""Shell-command analysis: the reference parity table, fail-closed rules, wrappers, `sh -c`, properties."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.commands.analysis import HEREDOC_WARNING, analyze_command, inline_eval

# Reference §3.5 parity fixture: command -> executables when analysis is ok, None when it fails closed.
PARITY = [
    ("echo ok | jq .foo", ["echo", "jq"]),
    ("ls && rm -rf /tmp/x", ["ls", "rm"]),
    ('echo "a && b"', ["echo"]),
    ("echo $(whoami)", None),
    ('echo "output: $(whoami)"', None),
    ("echo 'output: $(whoami)'", ["echo"]),
    ('echo "output: \\$(whoami)"', ["echo"]),
    ("echo `id`", None),
    ('echo "output: `id`"', None),
    ("cat <(echo ok)", None),
    ("echo >(cat)", None),
    ('echo "<(echo ok)"', ["echo"]),
    ('echo ">(cat)"', ["echo"]),
]


@pytest.mark.parametrize(("command", "executables"), PARITY)
def test_reference_parity_table(command: str, executables: list[str] | None) -> None:
    result = analyze_command(command)
    if executables is None:
        assert not result.ok
        assert result.reason
        assert result.segments == ()
    else:
        assert result.ok, result.reason
        assert [s.argv[0] for s in result.segments] == executables


def test_quote_removal_gives_exact_argv() -> None:
    result = analyze_command("""printf '%s' "a \\"b\\" \\$c" 'it'"'"'s' a\\ b "" x=y""")
    assert result.ok, result.reason
    assert result.segments[0].argv == ("printf", "%s", 'a "b" $c', "it's", "a b", "", "x=y")


def test_tree_sitter_quirks_follow_bash() -> None:
    # tree-sitter-bash splits a quoted string followed by an escape into two nodes: one word for bash.
    assert analyze_command("x ''\\a").segments[0].argv == ("x", "a")
    assert analyze_command("'l'\\s -a").segments[0].argv == ("ls", "-a")
    assert analyze_command("x 'a'\\b\"c\"").segments[0].argv == ("x", "abc")
    # ... and silently skips `\ ` at the start of a word, which bash reads as a space.
    assert not analyze_command("x \\ a").ok
    assert not analyze_command("'ls'\\ y").ok


def test_operators_and_raw_text() -> None:
    result = analyze_command("ls -la && git status || echo no ; cat x | wc -l")
    assert result.ok
    assert result.operators == ("&&", "||", ";", "|")
    assert [s.raw for s in result.segments] == ["ls -la", "git status", "echo no", "cat x", "wc -l"]


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("echo ok &&", "unparseable"),
        ("ls;", "empty command"),
        ("; ls", "unparseable"),
        ("ls &", "background"),
        ("ls & id", "background"),
        ("ls > out", "redirection"),
        ("ls >> out", "redirection"),
        ("ls < in", "redirection"),
        ("ls 2>&1", "redirection"),
        ("ls &> out", "redirection"),
        ("cat <<< word", "redirection"),
        ("(ls)", "subshell"),
        ("{ ls; }", "brace expansion"),
        ("ls |& cat", "unsupported shell token: |&"),
        ("ls\rid", "carriage return (CRLF): bash reads \\r as part of the word"),
        ("ls\r\nid", "carriage return (CRLF): bash reads \\r as part of the word"),
        ("ls\n&& id", "unparseable"),
        ("ls $HOME", "variable expansion"),
        ('ls "$HOME"', "variable expansion"),
        ("ls ${HOME}", "variable expansion"),
        ('ls "${HOME}"', "variable expansion"),
        ("ls *.py", "glob"),
        ("ls file?", "glob"),
        ("ls [ab]", "glob"),
        ("echo {a,b}", "brace expansion"),
        ("ls ~/x", "tilde expansion"),
        ("echo $((1+2))", "command substitution"),
        ("echo $'\\x41'", "ANSI-C or locale quoting"),
        ('echo $"hi"', "ANSI-C or locale quoting"),
        ("echo 'open", "unterminated quote"),
        ('echo "open', "unterminated quote"),
        ('echo "a\\"', "unterminated quote"),
        ("echo hi\\ # comment", "comment"),  # an escaped blank: bash reads no comment there
        ("! ls", "negation or history expansion"),
        ("x=1", "assignment without command"),
        ("exec ls", "shell builtin: exec"),
        ("eval ls", "shell builtin: eval"),
        (". ./env.sh", "shell builtin: ."),
        ("source ./env.sh", "shell builtin: source"),
        ("command ls", "shell builtin: command"),
        ("builtin echo", "shell builtin: builtin"),
        ("coproc ls", "shell builtin: coproc"),
        ("cd /tmp", "shell builtin: cd"),
        ("hash -p /tmp/x ls", "shell builtin: hash"),
        ("printf -v PATH /tmp/x", "shell builtin: printf -v"),
        ("if true; then ls; fi", "unparseable"),
        ("ls\x00", "control character"),
        ("ls\u00a0-la", "invisible or control character"),
        ("l\u200bs", "invisible or control character"),
        ("", "empty command"),
        ("x" * 20_000, "command too long"),
    ],
)
def test_fails_closed(command: str, reason: str) -> None:
    result = analyze_command(command)
    assert not result.ok
    if reason != "unparseable":
        assert result.reason == reason
    else:
        assert result.reason


def test_control_structures_fail_closed_by_grammar() -> None:
    for command in (
        "if true; then ls; fi",
        "while true; do ls; done",
        "for x in a; do ls; done",
        "case a in a) ls;; esac",
        "f() { ls; }",
        "function f { ls; }",
        "[[ -f x ]]",
    ):
        assert not analyze_command(command).ok, command


def test_heredoc_rules() -> None:
    plain = analyze_command("cat <<EOF\nhello\nEOF")
    assert plain.ok and plain.segments[0].heredocs[0].data == "hello\n"
    quoted = analyze_command("cat <<'EOF'\n$(id)\nEOF")
    assert quoted.ok and quoted.segments[0].heredocs[0].data == "$(id)\n"
    assert analyze_command("cat <<EOF\n$(id)\nEOF").reason == "command substitution in unquoted heredoc"
    assert analyze_command("cat <<EOF\n`id`\nEOF").reason == "command substitution in unquoted heredoc"
    assert analyze_command("cat <<EOF\n${X}\nEOF").reason == "command substitution in unquoted heredoc"
    assert analyze_command("cat <<EOF\n$X\nEOF").reason == "variable expansion in unquoted heredoc"
    assert analyze_command("cat <<EOF\nhello").reason == "unterminated heredoc"
    stripped = analyze_command("cat <<-EOF\n\thi\n\tEOF")
    assert stripped.ok and stripped.segments[0].heredocs[0].data == "hi\n"
    assert HEREDOC_WARNING == "Warning: heredoc execution requires explicit approval in allowlist mode."


def test_lone_surrogates_and_odd_text_never_crash() -> None:
    for command in ("cat <<EOF\n\ud800\nEOF", "ls \udcff", "echo '\ud800'", "\ufeffls", "ls \U0001f600"):
        assert analyze_command(command).ok is False or command.endswith("\U0001f600")
    assert analyze_command("echo \U0001f600").segments[0].argv == ("echo", "\U0001f600")


def test_parsers_are_per_thread() -> None:
    import threading

    results: list[bool] = []

    def work() -> None:
        results.append(all(analyze_command(f"ls -la dir{i} && echo {i}").ok for i in range(200)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 4


def test_assignments_are_kept_and_never_hidden() -> None:
    result = analyze_command("FOO=1 BAR='a b' ls -l")
    assert result.ok
    segment = result.segments[0]
    assert segment.assignments == ("FOO=1", "BAR=a b")
    assert segment.argv == ("ls", "-l")


@pytest.mark.parametrize(
    ("command", "argv", "wrappers"),
    [
        ("env ls -la", ("ls", "-la"), ("env",)),
        ("env -- ls", ("ls",), ("env",)),
        ("nice ls", ("ls",), ("nice",)),
        ("nice -n 5 ls", ("ls",), ("nice",)),
        ("nice -n5 ls", ("ls",), ("nice",)),
        ("nice -10 ls", ("ls",), ("nice",)),
        ("nice --adjustment=3 ls", ("ls",), ("nice",)),
        ("time ls", ("ls",), ("time",)),
        ("time -p ls", ("ls",), ("time",)),
        ("timeout 5 ls", ("ls",), ("timeout",)),
        ("timeout -s KILL -k 2 1.5m ls", ("ls",), ("timeout",)),
        ("timeout --signal=TERM --preserve-status 10s ls", ("ls",), ("timeout",)),
        ("stdbuf -oL ls", ("ls",), ("stdbuf",)),
        ("stdbuf -o 0 -e L ls", ("ls",), ("stdbuf",)),
        ("/usr/bin/nice -n 1 /usr/bin/timeout 3 env ls", ("ls",), ("nice", "timeout", "env")),
        ("env", ("env",), ()),
        ("nice", ("nice",), ()),
    ],
)
def test_transparent_wrappers_unwrap(command: str, argv: tuple[str, ...], wrappers: tuple[str, ...]) -> None:
    result = analyze_command(command)
    assert result.ok, result.reason
    segment = result.segments[0]
    assert segment.argv == argv
    assert segment.wrappers == wrappers
    assert segment.blocked_wrapper is None


@pytest.mark.parametrize(
    ("command", "blocked"),
    [
        ("sudo ls", "sudo"),
        ("/usr/bin/sudo ls", "sudo"),
        ("doas ls", "doas"),
        ("setsid ls", "setsid"),
        ("chrt 1 ls", "chrt"),
        ("ionice -c3 ls", "ionice"),
        ("taskset 1 ls", "taskset"),
        ("su -c ls", "su"),
        ("pkexec ls", "pkexec"),
        ("nice sudo ls", "sudo"),
        ("env -- sudo ls", "sudo"),
        ("env -S 'ls -la'", "env"),
        ("env -u PATH ls", "env"),
        ("env -i ls", "env"),
        ("env - ls", "env"),
        ("env FOO=bar ls", "env"),
        ("env -- FOO=bar ls", "env"),
        ("time -o /tmp/x ls", "time"),
        ("nice --bogus ls", "nice"),
        ("timeout notaduration ls", "timeout"),
        ("stdbuf ls", "stdbuf"),
        ("nice nice nice nice nice ls", "wrapper depth"),
    ],
)
def test_blocked_wrappers(command: str, blocked: str) -> None:
    result = analyze_command(command)
    assert result.ok, result.reason
    assert result.segments[0].blocked_wrapper == blocked


def test_shell_c_payload_is_analysed() -> None:
    result = analyze_command("sh -c 'cat SKILL.md && printf x && wc -l'")
    assert result.ok
    inner = result.segments[0].inner
    assert inner is not None
    assert [s.argv[0] for s in inner.segments] == ["cat", "printf", "wc"]
    assert inner.operators == ("&&", "&&")
    assert analyze_command("bash -lc 'ls'").segments[0].inner is not None
    assert analyze_command("bash -euc 'ls'").segments[0].inner is not None
    assert analyze_command("bash script.sh").segments[0].inner is None


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("sh -c 'echo $(id)'", "sh -c: command substitution"),
        ("sh -c 'ls > x'", "sh -c: redirection"),
        ("sh -c ls extra", "shell -c with positional arguments"),
        ("sh -c '$0' /usr/bin/id", "shell -c with positional arguments"),
        ("sh -c", "shell -c without a command"),
        ("zsh -c ls", "unsupported shell for -c: zsh"),
        ("bash -o xtrace -c ls", "unsupported shell option: -o"),
        ("bash --rcfile x -c ls", "unsupported shell option: --rcfile"),
        ('bash -c \'bash -c "sh -c \\"sh -c ls\\""\'', None),
    ],
)
def test_shell_c_fails_closed(command: str, reason: str | None) -> None:
    result = analyze_command(command)
    assert not result.ok
    if reason:
        assert result.reason == reason
    else:
        assert "too deep" in (result.reason or "")


def test_inline_eval_detection() -> None:
    def first(command: str) -> str | None:
        return inline_eval(analyze_command(command).segments[0].argv)

    assert first("python3 -c 'print(1)'") == "python3 -c"
    assert first("node -e 'x'") == "node -e"
    assert first("perl -E 'say 1'") == "perl -E"
    assert first("find . -exec rm x '+'") == "find -exec"
    assert first("python3 script.py") is None
    assert first("ls -c") is None


# --------------------------------------------------------------------------- properties


def _unquoted_danger(text: str) -> bool:
    """Reference scanner: an unquoted/double-quoted `$(` or backtick, or an unquoted `>` / `<`.

    Outside a comment: bash ignores everything from a `#` that starts a word (after a blank, a newline,
    a metacharacter or the start) to the end of the line: in "l #`" the backtick is a comment.
    """
    quote: str | None = None
    word_start = True  # the next unquoted character would start a word
    index = 0
    while index < len(text):
        char = text[index]
        if quote == "'":
            if char == "'":
                quote = None
        elif char == "\\":
            index += 1
            if text[index : index + 1] != "\n":  # a line continuation vanishes; an escape is a word character
                word_start = False
        elif quote == '"':
            if char == '"':
                quote = None
            elif char == "`" or text.startswith("$(", index):
                return True
        elif char == "#" and word_start:
            newline = text.find("\n", index)
            if newline < 0:
                return False
            index = newline
            continue
        elif char in "'\"":
            quote = char
            word_start = False
        elif char in "`<>" or text.startswith("$(", index):
            return True
        else:
            word_start = char in " \t\n|&;()"
        index += 1
    return False


SHELLISH = st.lists(
    st.sampled_from([*"ls -a'\"\\$()`<>|&;{}*?~#!=\n\t xyz/.", "$(", "&&", "||", "sh -c ", "\u200b"]),
    max_size=30,
).map("".join)


def test_reference_scanner_knows_comments() -> None:
    # Found by hypothesis: bash ignores the backtick after a word-starting `#`, and so does the analysis.
    assert not _unquoted_danger("l #`") and analyze_command("l #`").ok
    assert not _unquoted_danger("l \\\n#`")  # a line continuation: still a word start
    for live in ("l a#`", "l \\#`", "l '#'`", "l $#`", "l #x\nls `", "l $(#"):
        assert _unquoted_danger(live) and not analyze_command(live).ok, live


@settings(max_examples=400, deadline=None)
@given(SHELLISH)
@example("l #`")
def test_property_never_crashes_and_never_ok_with_dangerous_tokens(command: str) -> None:
    result = analyze_command(command)
    assert isinstance(result.ok, bool)
    if _unquoted_danger(command):
        assert not result.ok, command
    if result.ok:
        assert len(result.operators) == len(result.segments) - 1
        assert all(segment.argv for segment in result.segments)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_property_arbitrary_text_never_crashes(command: str) -> None:
    result = analyze_command(command)
    if _unquoted_danger(command):
        assert not result.ok


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_property_single_quoted_argv_round_trips(segments: list[list[str]]) -> None:
    # Whatever the words, single-quoting them gives back exactly those words (or fails closed on
    # characters we refuse anywhere, such as `\r` and invisible characters; a newline is data).
    words = [["ls", *seg] for seg in segments]
    command = " && ".join(" ".join("'" + w.replace("'", "'\"'\"'") + "'" for w in seg) for seg in words)
    result = analyze_command(command)
    if result.ok:
        assert [list(s.argv) for s in result.segments] == words
    else:
        # A quoted backslash-newline is refused as a line continuation: still a refusal of the newline.
        refused = (
            "carriage return (CRLF): bash reads \\r as part of the word",  # refused even inside quotes
            "control character",
            "invisible or control character",
        )
        assert result.reason in refused


def test_shlex_quoted_words_round_trip() -> None:
    words = ["a b", "it's", '"q"', "$HOME", "`id`", "*", "~"]
    result = analyze_command(shlex.join(["echo", *words]))
    assert result.ok
    assert result.segments[0].argv == ("echo", *words)


# --------------------------------------------------------------------------- differential: real bash

_BARE = st.text(alphabet="abcXYZ019-_./:=,%+@^", min_size=1, max_size=5)
_SQ = st.text(alphabet='ab $`"\\*?~{}()<>|&;#!\t', max_size=6).map(lambda t: f"'{t}'")
_DQ = st.lists(
    st.sampled_from(
        [
            "a",
            "b",
            " ",
            "'",
            "*",
            "?",
            "~",
            "{}",
            "()",
            "<>",
            "|&;",
            "#",
            "!",
            '\\"',
            "\\$",
            "\\\\",
            "\\a",
            "\\`",
        ]
    ),
    max_size=5,
).map(lambda parts: '"' + "".join(parts) + '"')
_ESCAPED = st.sampled_from(list("abc $`\"'*?~{}()<>|&;#!=")).map(lambda c: "\\" + c)
_WORD = st.lists(st.one_of(_BARE, _SQ, _DQ, _ESCAPED), min_size=1, max_size=3).map("".join)


@settings(max_examples=120, deadline=None)
@given(st.lists(_WORD, min_size=1, max_size=5))
def test_property_argv_matches_real_bash(words: list[str]) -> None:
    # Whatever we accept, bash must split and unquote into exactly the same words.
    command = "printf '%s\\0' " + " ".join(words)
    result = analyze_command(command)
    if not result.ok:
        return
    assert len(result.segments) == 1
    segment = result.segments[0]
    ours = [word for group in segment.wrapper_argv for word in group] + list(segment.argv)
    out = subprocess.run(
        ["bash", "-c", command], capture_output=True, timeout=20, env={"PATH": "/usr/bin:/bin"}
    )
    assert out.returncode == 0
    theirs = out.stdout.decode().split("\0")[:-1]
    assert ["printf", "%s\\0", *theirs] == ours, (command, ours, theirs)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(_WORD, min_size=1, max_size=3), min_size=1, max_size=3), st.sampled_from(["sh", "bash"])
)
def test_property_chains_and_shell_payloads_match_real_shells(parts: list[list[str]], shell: str) -> None:
    inner = " && ".join("printf '%s\\0' " + "\t".join(words) for words in parts)
    command = f"{shell} -c {shlex.quote(inner)} ; " + inner
    result = analyze_command(command)
    if not result.ok:
        return
    payload = result.segments[0].inner
    assert payload is not None
    ours = [
        w for s in (*payload.segments, *result.segments[1:]) for w in s.argv if w not in ("printf", "%s\\0")
    ]
    out = subprocess.run(
        ["bash", "-c", command], capture_output=True, timeout=20, env={"PATH": "/usr/bin:/bin"}
    )
    assert out.stdout.decode().split("\0")[:-1] == ours, (command, ours)
