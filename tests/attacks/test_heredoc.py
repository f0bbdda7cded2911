"""Issue 21: heredocs, newlines and continuations. What the analysis says runs is what bash runs.

Every accepted form is executed by real bash with a PATH of marker programs that log their argv and
stdin; the log must equal the analysis' segments (argv, heredoc data), and the enforced rendering
(pinned paths, re-quoted heredocs) must log the same. Every form that could hide a command still asks.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.commands import stdindata
from engine.commands.allowlist import AllowlistEntry, enforced_command, evaluate_allowlist
from engine.commands.analysis import analyze_command
from tests.attacks.harness import ALLOWLIST, attempt, refused

MARKERS = ("tool", "tool2", "tool3", "git", "id", "cat")
MARKER = """#!/usr/bin/python3
import json, os, sys
data = sys.stdin.read()
with open(os.environ["MARKER_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), sys.argv[1:], data]) + "\\n")
"""

Run = list[tuple[str, tuple[str, ...], str]]


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The markers stand for programs that read their input as data (a heredoc into any other asks:
    # engine.commands.stdindata); what is tested here is that bash and the analysis agree on that input.
    monkeypatch.setattr(stdindata, "INPUT_AS_DATA", stdindata.INPUT_AS_DATA | set(MARKERS))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in MARKERS:
        path = bin_dir / name
        path.write_text(MARKER)
        path.chmod(0o755)
    return bin_dir


def _bash(command: str, bin_dir: Path) -> Run:
    log = bin_dir.parent / "marker.log"
    log.write_text("")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MARKER_LOG": str(log), "HOME": str(bin_dir.parent)}
    subprocess.run(
        ["bash", "-c", command], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return sorted((name, tuple(args), data) for name, args, data in rows)


def _analysed(command: str) -> Run:
    analysis = analyze_command(command)
    assert analysis.ok, (command, analysis.reason)
    out: Run = []

    def walk(segments: tuple) -> None:  # type: ignore[type-arg]
        for segment in segments:
            if segment.inner is not None:
                walk(segment.inner.segments)
                continue
            data = segment.heredocs[-1].data if segment.heredocs else ""  # the last one is stdin
            out.append((os.path.basename(segment.argv[0]), tuple(segment.argv[1:]), data))

    walk(analysis.segments)
    return sorted(out)


def _enforced(command: str, bin_dir: Path) -> str:
    entries = [AllowlistEntry(str(bin_dir / name)) for name in MARKERS]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    analysis = analyze_command(command)
    result = evaluate_allowlist(analysis, entries, cwd=str(bin_dir.parent), env=env)
    assert result.satisfied, [m.reason for m in result.segments]
    enforced = enforced_command(analysis, result)
    assert enforced is not None
    return enforced


ACCEPTED = {
    "quoted": "tool <<'EOF'\nhello $x `id` $(id)\nEOF",
    "double-quoted": 'tool <<"EOF"\n$(id)\nEOF',
    "partly-quoted": 'tool <<E"OF"\n$HOME `id`\nEOF',
    "backslash-quoted": "tool <<\\EOF\n$HOME\nEOF",
    "unquoted-plain": 'tool <<EOF\nplain \\$ \\` \\\\ \\n \\" text\nEOF',
    "tab-stripping": "tool <<-EOF\n\tindented\n\t\tmore\n  spaces kept\n\tEOF",
    "two-heredocs": "tool <<A <<'B'\na\nA\nb $x\nB",
    "pipeline-then-newline": "tool <<EOF | tool2 x\nbody\nEOF\ntool3",
    "heredocs-in-two-commands": "tool <<A && tool2 <<B\none\nA\ntwo\nB\ntool3 last",
    "newlines-after-operators": "tool a &&\n  tool2 b\n\ntool3 'multi\nline' \"dq\nline\"",
    "continuations": "tool a \\\n  --flag \\\n  b\ntoo\\\nl2 c",
    "continuation-in-double-quotes": 'tool "a\\\nb"',
    "backslash-newline-in-single-quotes": "tool 'a\\\nb'",
    "delimiter-with-trailing-space-is-body": "tool <<'EOF'\nEOF \nid\n EOF\nEOF",
    "quote-spans-the-heredoc-line": "tool <<X; tool2 'q\nX\n'\nid\nX",
    # Comments go as bash drops them (issue 21): whole lines, trailing ones, never inside quotes or words;
    # a `#` that hides an operator hides nothing from the analysis (`id` and `tool2` are segments).
    "comments": "# header\ntool a # trailing && id\n  # indented\ntool2 'b # no' c#d \"#\"",
    "comment-hides-operator": "tool # <<tool2\nid\ntool2",
    "inside-sh-c": "bash -c 'tool <<EOF\nx\nEOF\ntool2'",
    "space-after-operator": "tool << 'EOF'\nx\nEOF",
    "glued-operator": "tool<<EOF\nx\nEOF",
    "git-commit-message": "git commit -F - <<'EOF'\nfix: the thing\n\nbody $(not run)\nEOF",
    "delimiter-at-end-without-newline": "tool <<EOF\nx\nEOF",
    "empty-body": "tool <<EOF\nEOF",
    "semicolon-then-newline": "tool;\ntool2",
}


@pytest.mark.parametrize("command", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_forms_run_what_the_analysis_says(command: str, markers: Path) -> None:
    ours = _analysed(command)
    assert _bash(command, markers) == ours, command
    # The enforced command (pinned paths, heredocs re-rendered with a fresh quoted delimiter) too.
    assert _bash(_enforced(command, markers), markers) == ours


ASKS = {
    "command-substitution-in-body": ("tool <<EOF\n$(id)\nEOF", "command substitution in unquoted heredoc"),
    "backtick-in-body": ("tool <<EOF\n`id`\nEOF", "command substitution in unquoted heredoc"),
    "braced-in-body": ("tool <<EOF\n${x:-$(id)}\nEOF", "command substitution in unquoted heredoc"),
    "variable-in-body": ("tool <<EOF\n$HOME\nEOF", "variable expansion in unquoted heredoc"),
    "unterminated": ("tool <<EOF\nhello\nid", "unterminated heredoc"),
    "real-delimiter-has-trailing-space": ("tool <<EOF\nhi\nEOF \nid", "unterminated heredoc"),
    "tab-strip-does-not-strip-spaces": ("tool <<-EOF\n  EOF\nid", "unterminated heredoc"),
    "continuation-forms-delimiter": ("tool <<EOF\nEO\\\nF\nid\nEOF", "line continuation in unquoted heredoc"),
    "continuation-joins-body-line": (
        "tool <<EOF\nx\\\nEOF\nid\nEOF",
        "line continuation in unquoted heredoc",
    ),
    "heredoc-in-command-substitution": ("tool $(cat <<EOF\nx\nEOF\n)", "command substitution"),
    "heredoc-in-dq-substitution": ('tool "$(cat <<EOF\nx\nEOF\n)"', "command substitution"),
    "bash-reads-body": ("bash <<'EOF'\nid\nEOF", "heredoc to an interpreter: the body is code for bash"),
    "sh-s": ("sh -s <<'EOF'\nid\nEOF", "heredoc to an interpreter: the body is code for sh"),
    "sh-reads-stdin": ("sh <<'EOF'\nid\nEOF", "heredoc to an interpreter: the body is code for sh"),
    "python-dash": (
        "python3 - <<'EOF'\nimport os\nEOF",
        "heredoc to an interpreter: the body is code for python3",
    ),
    "env-wrapped-shell": (
        "env bash <<'EOF'\nid\nEOF",
        "heredoc to an interpreter: the body is code for bash",
    ),
    "fd-heredoc": ("tool 3<<EOF\nid\nEOF", "heredoc on a file descriptor"),
    "variable-delimiter": ("tool <<$X\nid\n$X", "unusual heredoc delimiter"),
    # An escaped blank does not end a word, so this `#` is no comment and bash runs `id` (issue 21).
    "escaped-blank-before-hash": ("tool \\ #; id", "comment"),
    "crlf": ("tool\r\nid", "carriage return (CRLF): bash reads \\r as part of the word"),
    "crlf-delimiter": (
        "tool <<EOF\r\nx\r\nEOF\r\nid",
        "carriage return (CRLF): bash reads \\r as part of the word",
    ),
    "herestring": ("tool <<< $(id)", "command substitution"),
    "herestring-literal": ("tool <<< 'x'", "redirection"),
    "heredoc-before-command": ("<<EOF tool\nx\nEOF", "heredoc before the command"),
    "newline-before-operator": ("tool\n&& id", "unparseable"),
    "ansi-c-delimiter": ("tool <<$'E'\nid\nE", "unusual heredoc delimiter"),
}


@pytest.mark.parametrize(("command", "reason"), ASKS.values(), ids=ASKS.keys())
def test_forms_that_could_hide_a_command_ask(command: str, reason: str) -> None:
    analysis = analyze_command(command)
    assert (analysis.ok, analysis.reason) == (False, reason)


def test_the_hidden_commands_would_have_run(markers: Path) -> None:
    # The attacks are real: bash runs `id` in each of these (so accepting them would run it unasked).
    # (An unterminated body or a delimiter with a trailing space only hides data: bash reads to the end.)
    for key in ("continuation-forms-delimiter", "crlf-delimiter", "escaped-blank-before-hash"):
        ran = {name for name, _, _ in _bash(ASKS[key][0], markers)}
        assert "id" in ran, key
    # CRLF: bash runs `tool\r`, not `tool` (so `\r` is no newline to us either).
    assert _bash("tool\r\ntool2", markers) == [("tool2", (), "")]


def test_disguised_interpreter_with_heredoc_is_a_miss(markers: Path) -> None:
    # `./tool` is python3 under another name: a heredoc to it is code even when its path is allowlisted.
    (markers / "py").symlink_to("/usr/bin/python3")
    command = f"{markers}/py <<'EOF'\nimport os\nEOF"
    analysis = analyze_command(command)
    assert analysis.ok  # the name says nothing; the resolved program does
    result = evaluate_allowlist(
        analysis, [AllowlistEntry(f"{markers}/py")], cwd=str(markers), env={"PATH": "/usr/bin:/bin"}
    )
    assert not result.satisfied
    assert result.segments[0].reason == "heredoc to an interpreter: the body is code"


def test_rendered_delimiter_never_appears_in_the_body(markers: Path) -> None:
    command = "tool <<'EOF'\nEXECHOST_EOF_0\nid\nEOF"
    assert _bash(_enforced(command, markers), markers) == _analysed(command)


async def test_allowlisted_heredoc_runs_through_the_gateway_and_shell_heredoc_asks(
    state_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "written"
    done = await attempt(
        state_dir,
        f"tee {out} <<'EOF' >/dev/null\nhello $(id)\nEOF",
        allow=[("/usr/bin/tee", None)],
        config=ALLOWLIST,
    )
    assert refused(done)  # a redirection: still asks
    done = await attempt(
        state_dir,
        f"cat <<'EOF'\nhello $(id)\nEOF\nls {tmp_path}",
        allow=[("/usr/bin/cat", None), ("/usr/bin/ls", None)],
    )
    assert done["status"] == "completed", done
    assert "hello $(id)" in done["_text"]
    pwned = tmp_path / "pwned"
    asked = await attempt(
        state_dir,
        f"bash <<'EOF'\ntouch {pwned}\nEOF",
        allow=[("/usr/bin/bash", None), ("/usr/bin/touch", None)],
    )
    assert refused(asked) and not pwned.exists()


_BODY_LINE = st.lists(
    st.sampled_from(["a", " ", "\t", "$", "`", "\\", "'", '"', "EOF", "E", "x", "(", ")"]), max_size=6
).map("".join)
_DELIM = st.sampled_from(["EOF", "'EOF'", '"EOF"', 'E"OF"', "\\EOF", "-EOF", "-'EOF'"])


@settings(max_examples=60, deadline=None)
@given(_DELIM, st.lists(_BODY_LINE, max_size=4), st.booleans())
def test_property_heredoc_data_matches_real_bash(
    tmp_path_factory: pytest.TempPathFactory, delim: str, lines: list[str], trailing: bool
) -> None:
    # Whatever body we accept as data, bash feeds the program exactly that data and runs nothing else.
    markers = tmp_path_factory.mktemp("m") / "bin"
    markers.mkdir()
    for name in (*MARKERS, "EOF", "E", "x", "a", "xa", "ax", "aa", "xx"):  # lines bash might run
        (markers / name).write_text(MARKER)
        (markers / name).chmod(0o755)
    body = "".join(line + "\n" for line in lines)
    command = f"tool <<{delim}\n{body}EOF" + ("\ntool2" if trailing else "")
    analysis = analyze_command(command)
    if not analysis.ok:
        return
    # Bash can only run (and so record) names that exist; a line like `' '` names a program called " ",
    # which the analysis lists and nothing can run: compare what is runnable.
    runnable = [row for row in _analysed(command) if (markers / row[0]).is_file()]
    assert _bash(command, markers) == runnable, command
