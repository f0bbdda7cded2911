"""Adversarial corpus: every attempt to slip past an allowlist must end unsatisfied (ask or deny)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.commands.allowlist import (
    AllowlistEntry,
    command_hash_pattern,
    enforced_command,
    evaluate_allowlist,
    has_durable_approval,
)
from engine.commands.analysis import analyze_command

EVIL = "#!/bin/sh\necho PWNED\n"


@dataclass
class Attempt:
    command: str
    entries: list[str] | None = None  # None = the standard allowlist below
    path: str | None = None  # PATH template; None = "{box}/bin:/usr/bin:/bin"
    safe_bins: set[str] = field(default_factory=lambda: {"cut", "uniq", "head", "tail", "tr", "wc"})
    arg_patterns: dict[str, str] = field(default_factory=dict)


STANDARD = ["/usr/bin/ls", "/usr/bin/echo", "/usr/bin/cat", "/usr/bin/printf"]

CORPUS: dict[str, Attempt] = {
    # substitution, in every quoting context
    "dollar-paren": Attempt("ls $(id)"),
    "backtick": Attempt("ls `id`"),
    "dq-dollar-paren": Attempt('echo "$(id)"'),
    "dq-backtick": Attempt('echo "`id`"'),
    "nested-in-word": Attempt("echo a$(id)b"),
    "param-default-subst": Attempt("echo ${x:-$(id)}"),
    "arith": Attempt("echo $((1+2))"),
    "process-subst-in": Attempt("cat <(id)"),
    "process-subst-out": Attempt("echo x >(id)"),
    # redirections
    "redirect-out": Attempt("echo x > /tmp/pwn"),
    "redirect-append": Attempt("echo x >> ~/.bashrc"),
    "redirect-in": Attempt("cat < /etc/shadow"),
    "redirect-fd": Attempt("ls 2>&1"),
    "redirect-amp": Attempt("ls &> /tmp/x"),
    "redirect-prefix": Attempt(">/tmp/x ls"),
    "herestring": Attempt("cat <<< hi"),
    "heredoc-to-shell": Attempt("bash <<'EOF'\nid\nEOF", entries=[*STANDARD, "/usr/bin/bash"]),
    "heredoc-subst": Attempt("cat <<EOF\n$(id)\nEOF"),
    "heredoc-unterminated": Attempt("cat <<EOF\n$(id)"),
    # chaining and structure
    "semicolon-tail": Attempt("ls; id"),
    "and-tail": Attempt("ls && id"),
    "or-tail": Attempt("ls || id"),
    "pipe-to-sh": Attempt("echo id | sh"),
    "pipe-to-xargs": Attempt("echo id | xargs"),
    "background": Attempt("ls & id"),
    "pipe-amp": Attempt("ls |& id"),
    "subshell": Attempt("(id)"),
    "group": Attempt("{ id; }"),
    "negation": Attempt("! id"),
    "if": Attempt("if ls; then id; fi"),
    "for": Attempt("for x in a; do id; done"),
    "function": Attempt("ls() { id; }; ls"),
    "function-kw": Attempt("function ls { id; }; ls"),
    "test-subst": Attempt("[[ $(id) ]]"),
    "comment-after-escaped-blank": Attempt("ls \\ #; id"),  # no comment for bash: `id` runs
    "double-semicolon": Attempt("ls ;; id"),
    # newlines and continuations
    "newline": Attempt("ls\nid"),
    "newline-in-quotes-then-cmd": Attempt("echo 'a\nb'\nid"),
    "carriage-return": Attempt("ls\rid"),
    "crlf": Attempt("ls\r\nid"),
    "line-continuation": Attempt("ls &&\\\nid"),
    "nul-byte": Attempt("ls\x00; id"),
    # expansions in argv[0]
    "var-argv0": Attempt("$CMD -la"),
    "braced-var-argv0": Attempt("${CMD} x"),
    "ifs": Attempt("cat${IFS}/etc/shadow"),
    "glob-argv0-star": Attempt("/usr/bin/l* -la"),
    "glob-argv0-question": Attempt("/usr/bin/l? -la"),
    "glob-argv0-class": Attempt("/usr/bin/[l]s"),
    "brace-argv0": Attempt("/usr/bin/{ls,id}"),
    "tilde-argv0": Attempt("~/ls"),
    "ansi-c-argv0": Attempt("$'\\x69d'"),
    "locale-argv0": Attempt('$"id"'),
    "empty-argv0": Attempt("'' ls"),
    # resolution tricks
    "dot-slash-shadow": Attempt("./ls"),
    "path-has-cwd": Attempt("ls", path=":/usr/bin:/bin"),
    "path-has-dot": Attempt("ls", path=".:/usr/bin:/bin"),
    "bare-name-via-cwd-path": Attempt("ls", entries=["ls"], path=":/usr/bin:/bin"),
    "bare-name-via-dot-path": Attempt("ls", entries=["ls"], path=".:/usr/bin:/bin"),
    "bare-name-via-relative-path": Attempt("ls", entries=["ls"], path="../work:/usr/bin:/bin"),
    "symlink-to-sh": Attempt("./sl/ls -c id"),
    "disguised-shell-broad-pattern": Attempt("./sl/ls -c 'echo $(id)'", entries=["/usr/bin/*"]),
    "disguised-shell-plain": Attempt("./sl/ls -c id", entries=["/usr/bin/*"]),
    "env-dashdash-assign": Attempt("env -- LD_PRELOAD=/tmp/x.so ls", entries=["*"]),
    "safebin-jq-import": Attempt("jq -n 'import \"evil\" as e; 1'", safe_bins={"jq"}),
    "traversal": Attempt("/usr/bin/../../{box}/work/ls"),
    "relative-traversal": Attempt("../work/./ls"),
    "uppercase": Attempt("LS"),
    "uppercase-path": Attempt("/USR/BIN/LS"),
    "kelvin-sign": Attempt("{box}/tools/\u212ait", entries=["{box}/tools/kit"]),
    # unicode look-alikes and invisible characters
    "roman-numeral-l": Attempt("\u217cs"),
    "cyrillic-s": Attempt("l\u0455"),
    "fullwidth": Attempt("\uff4c\uff53"),
    "zero-width": Attempt("l\u200bs; id"),
    "nbsp": Attempt("ls\u00a0;id"),
    "bidi-override": Attempt("echo \u202e; id"),
    # assignments
    "path-assignment": Attempt("PATH={box}/work ls"),
    "ld-preload": Attempt("LD_PRELOAD=/tmp/x.so ls"),
    "ifs-assignment": Attempt("IFS=/ ls"),
    "bare-assignment": Attempt("X=$(id)"),
    "assignment-under-star": Attempt("BASH_ENV=/tmp/x ls", entries=["*"]),
    # builtins
    "exec": Attempt("exec id"),
    "exec-allowlisted": Attempt("exec ls"),
    "eval": Attempt("eval id"),
    "eval-quoted": Attempt("eval 'ls; id'"),
    "dot": Attempt(". ./evil.sh"),
    "source": Attempt("source ./evil.sh"),
    "command-builtin": Attempt("command id"),
    "builtin": Attempt("builtin echo x"),
    "alias": Attempt("alias ls=id"),
    "hash-p": Attempt("hash -p {box}/work/ls ls && ls"),
    "printf-v": Attempt("printf -v PATH {box}/work && ls"),
    "cd-then-dot": Attempt("cd {box}/work && ./ls"),
    "coproc": Attempt("coproc ls"),
    "export": Attempt("export PATH={box}/work; ls"),
    "trap": Attempt("trap id EXIT"),
    # wrappers
    "sudo": Attempt("sudo ls"),
    "sudo-abs": Attempt("/usr/bin/sudo ls"),
    "doas": Attempt("doas ls"),
    "setsid": Attempt("setsid ls"),
    "chrt": Attempt("chrt 1 ls"),
    "ionice": Attempt("ionice -c3 ls"),
    "taskset": Attempt("taskset 1 ls"),
    "nice-sudo": Attempt("nice -n 5 sudo ls"),
    "env-dashdash-sudo": Attempt("env -- sudo ls"),
    "timeout-sudo": Attempt("timeout 5 sudo ls"),
    "sudo-under-star": Attempt("sudo ls", entries=["*"]),
    "env-S": Attempt("env -S 'sh -c id' ls"),
    "env-u": Attempt("env -u PATH ls"),
    "env-i": Attempt("env -i ls"),
    "env-assign": Attempt("env PATH={box}/work ls"),
    "time-o": Attempt("time -o /tmp/out ls"),
    "nice-unknown-opt": Attempt("nice --evil ls"),
    "wrapper-depth": Attempt("nice nice nice nice nice ls"),
    "wrapper-inner-miss": Attempt("nice -n 1 id"),
    "time-inner-miss": Attempt("time id"),
    "sudo-alias-symlink": Attempt("s ls", entries=["**"], path="{box}/fake:/usr/bin:/bin"),
    "nice-alias-symlink": Attempt(
        "nn id", entries=["/usr/bin/nice", "/usr/bin/ls"], path="{box}/alias:/usr/bin"
    ),
    "untrusted-nice": Attempt("nice ls", path="{box}/fake:/usr/bin:/bin"),
    "dashdash-trick": Attempt("ls -- ; id"),
    # tree-sitter-bash quirks found by the differential tests against real bash
    "split-word-argv0": Attempt("'ls'\\blk"),
    "skipped-escaped-space": Attempt("git \\ status", entries=[], arg_patterns={"git": "status"}),
    # shells
    "sh-c-single": Attempt("sh -c id"),
    "sh-c-chain-miss": Attempt("sh -c 'ls; id'"),
    "sh-c-subst": Attempt('sh -c "ls \\$(id)"'),
    "sh-c-positional": Attempt("sh -c '$0' /usr/bin/id"),
    "sh-c-extra-args": Attempt("sh -c ls id"),
    "sh-c-deep": Attempt('bash -c \'bash -c "sh -c \\"sh -c ls\\""\''),
    "sh-c-builtin": Attempt("bash -c 'source ./evil.sh'"),
    "zsh-c": Attempt("zsh -c ls"),
    "bash-rcfile": Attempt("bash --rcfile ./evil.sh -c ls"),
    "bash-o": Attempt("bash -o xtrace -c ls"),
    "untrusted-shell": Attempt("sh -c ls", path="{box}/fake:/usr/bin:/bin"),
    "env-sh-c": Attempt("env sh -c 'id'"),
    "bash-script": Attempt("bash ./evil.sh"),
    # argPattern
    "argpattern-extra-arg": Attempt(
        "git status --output=/etc/x", entries=[], arg_patterns={"git": "status( -s)?"}
    ),
    "argpattern-chain": Attempt("git status && id", entries=[], arg_patterns={"git": "status( -s)?"}),
    "argpattern-joined-word": Attempt("git 'status -s'", entries=[], arg_patterns={"git": "status -s"}),
    "argpattern-other-verb": Attempt("git push", entries=[], arg_patterns={"git": "status( -s)?"}),
    # safe bins
    "safebin-file-operand": Attempt("head -n 5 /etc/shadow"),
    "safebin-dotdot": Attempt("cut -f1 ../secret"),
    "safebin-tail-file": Attempt("tail -f /var/log/syslog"),
    "safebin-tr-operands": Attempt("tr a b c"),
    "safebin-wc-files0": Attempt("wc --files0-from=/etc/passwd"),
    "safebin-wc-files0-prefix": Attempt("wc --files0=/etc/passwd"),
    "safebin-sort-o": Attempt("sort -o /etc/x", safe_bins={"sort"}),
    "safebin-sort-compress": Attempt("sort --compress-program=sh", safe_bins={"sort"}),
    "safebin-sort-prefix": Attempt("sort --comp=sh", safe_bins={"sort"}),
    "safebin-jq-env": Attempt("jq -n env", safe_bins={"jq"}),
    "safebin-jq-rawfile": Attempt("jq --rawfile a /etc/shadow .", safe_bins={"jq"}),
    "safebin-awk": Attempt("awk 'BEGIN{system(\"id\")}'", safe_bins={"awk"}),
    "safebin-sed": Attempt("sed -n 1p", safe_bins={"sed"}),
    "safebin-untrusted-dir": Attempt("head -n 1", path="{box}/fake:/usr/bin:/bin"),
    "safebin-dot-slash": Attempt("./head -n 1"),
    "safebin-unknown-flag": Attempt("tr -S a b"),
}


@pytest.fixture
def box(tmp_path: Path) -> Path:
    root = tmp_path.resolve()

    def tool(rel: str, body: str = EVIL) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        path.chmod(0o755)

    for rel in (
        "work/ls",
        "work/head",
        "home/ls",
        "fake/sudo",
        "fake/nice",
        "fake/sh",
        "fake/head",
        "tools/kit",
        "tools/\u212ait",
        "work/evil.sh",
        "bin/.keep",
    ):
        tool(rel)
    (root / "work" / "sl").mkdir()
    (root / "work" / "sl" / "ls").symlink_to("/bin/sh")
    (root / "fake" / "s").symlink_to(root / "fake" / "sudo")
    (root / "alias").mkdir()
    (root / "alias" / "nn").symlink_to("/usr/bin/nice")
    return root


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 60


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bypass_attempt_is_never_satisfied(box: Path, name: str) -> None:
    attempt = CORPUS[name]
    command = attempt.command.replace("{box}", str(box))
    patterns = (
        STANDARD if attempt.entries is None else [p.replace("{box}", str(box)) for p in attempt.entries]
    )
    entries = [AllowlistEntry(p) for p in patterns]
    entries += [AllowlistEntry(name_, arg_pattern=regex) for name_, regex in attempt.arg_patterns.items()]
    entries.append(AllowlistEntry(command_hash_pattern("ls -la")))  # a durable approval for something else
    path = (attempt.path or "{box}/bin:/usr/bin:/bin").replace("{box}", str(box))
    env = {"PATH": path, "HOME": str(box / "home")}

    analysis = analyze_command(command)
    result = evaluate_allowlist(
        analysis, entries, cwd=str(box / "work"), env=env, safe_bins=attempt.safe_bins
    )
    assert not (analysis.ok and result.satisfied), (analysis, result)
    assert enforced_command(analysis, result) is None
    assert not has_durable_approval(command, entries)


def test_the_standard_allowlist_does_allow_the_plain_forms(box: Path) -> None:
    # The corpus proves nothing if the allowlist never allowed anything: the honest versions pass.
    entries = [AllowlistEntry(p) for p in STANDARD]
    env = {"PATH": f"{box}/bin:/usr/bin:/bin", "HOME": str(box / "home")}
    for command in (
        "ls -la",
        "echo '$(id)'",
        "cat x | head -n 5",
        "nice -n 5 ls",
        "sh -c 'ls && echo ok'",
        "env ls",
        "timeout 5 ls",
        "/bin/ls",
        "l\\s",
        "'l's",
    ):
        analysis = analyze_command(command)
        result = evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env)
        assert analysis.ok and result.satisfied, (command, analysis.reason, result)
        assert enforced_command(analysis, result)
    # A comment is dropped as bash drops it: what runs is the pinned `ls`, never the commented text.
    analysis = analyze_command("ls # ; id")
    result = evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env)
    assert result.satisfied and "id" not in (enforced_command(analysis, result) or "id")
    git = [AllowlistEntry("/usr/bin/git", arg_pattern="status( -s)?")]
    analysis = analyze_command("git status -s")
    if os.path.exists("/usr/bin/git"):
        assert evaluate_allowlist(analysis, git, cwd=str(box), env=env).satisfied
