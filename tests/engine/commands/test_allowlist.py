"""Allowlist matching (reference §3.4), safe bins (§3.7), the enforced command and allow-always (§3.10)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.commands.allowlist import (
    DEFAULT_SAFE_BINS,
    AllowlistEntry,
    AllowlistResult,
    SafeBinProfile,
    allow_always_patterns,
    args_text,
    command_hash_pattern,
    enforced_command,
    evaluate_allowlist,
    has_durable_approval,
    profile_from_config,
    resolve_executable,
    trusted_dir_warnings,
)
from engine.commands.analysis import analyze_command
from engine.commands.safebins import DEFAULT_SAFE_BIN_PROFILES, validate_safe_bin_argv

SHOW = '#!/bin/sh\nfor a in "$@"; do printf \'[%s]\' "$a"; done; echo\n'


def make_tool(path: Path, body: str = SHOW) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def box(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    make_tool(root / "bin" / "show")
    make_tool(root / "bin" / "g++")
    make_tool(root / "bin" / "tool[1](stable)")
    make_tool(root / "work" / "show")  # a different `show` in the cwd
    (root / "bin" / "notexec").write_text("x")
    return root


def env_for(box: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{box}/bin:/usr/bin:/bin", "HOME": str(box / "home"), **extra}


def check(command: str, entries: list[AllowlistEntry], box: Path, **kw: object) -> AllowlistResult:
    analysis = analyze_command(command)
    assert analysis.ok, analysis.reason
    return evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env_for(box), **kw)  # type: ignore[arg-type]


def satisfied(command: str, patterns: list[str], box: Path) -> bool:
    return check(command, [AllowlistEntry(p) for p in patterns], box).satisfied


# --------------------------------------------------------------------------- resolution


def test_resolution_through_path_cwd_and_realpath(box: Path) -> None:
    env = env_for(box)
    cwd = str(box / "work")
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    assert resolve_executable("./show", cwd=cwd, env=env) == str(box / "work" / "show")
    assert resolve_executable("../bin/show", cwd=cwd, env=env) == str(box / "bin" / "show")
    assert resolve_executable("sh", cwd=cwd, env=env) == os.path.realpath("/bin/sh")
    assert resolve_executable("notexec", cwd=cwd, env=env) is None
    assert resolve_executable("nope-not-here", cwd=cwd, env=env) is None
    assert resolve_executable("show", cwd=cwd, env={"PATH": ":/usr/bin"}) == str(box / "work" / "show")
    assert resolve_executable("ls", cwd=cwd, env={}) == os.path.realpath("/usr/bin/ls")  # default PATH


def test_resolution_follows_symlinks_before_dotdot(box: Path) -> None:
    (box / "work" / "link").symlink_to(box / "bin")
    assert resolve_executable("./link/show", cwd=str(box / "work"), env={}) == str(box / "bin" / "show")
    # `link/..` is box/, not work/: the kernel's answer, not normpath's.
    make_tool(box / "show")
    assert resolve_executable("./link/../show", cwd=str(box / "work"), env={}) == str(box / "show")


# --------------------------------------------------------------------------- patterns (§3.4)


@pytest.mark.parametrize(
    ("pattern", "command", "expected"),
    [
        ("{box}/bin/show", "show x", True),
        ("{box}/**", "show", True),  # ** crosses /
        ("{box}/*", "show", False),  # * does not
        ("{box}/*/show", "show", True),
        ("{box}/bin/sho?", "show", True),
        ("{box}/bin?show", "show", False),  # ? does not cross /
        ("{box}/bin/*", "show", True),
        ("{box}/BIN/SHOW", "show", False),  # case-sensitive on Linux (issue 9 item 16)
        ("{box}/bin/g++", "g++", True),  # regex metacharacters are literal
        ("{box}/bin/g+", "g++", False),
        ("{box}/bin/tool[1](stable)", "'tool[1](stable)'", True),
        ("{box}/bin/tool1", "'tool[1](stable)'", False),
        ("show", "show", False),  # bare names never match (issue 9 item 17): resolved when added
        ("SHOW", "show", False),
        ("sh*", "show", False),
        ("show", "./show", False),  # bare names only match PATH-invoked commands
        ("show", "{box}/bin/show", False),
        ("{box}/bin/show", "./show", False),  # ./x is the cwd's file, not PATH's
        ("{box}/work/show", "./show", True),
        ("/bin/sh", "sh x.sh", True),  # a literal pattern names its real file
        ("*", "show", True),
        ("*", "no-such-command", True),  # bare * matches even unresolved executables
        ("{box}/**", "no-such-command", False),
        ("=command:0123456789abcdef", "show", False),  # durable hashes never match paths
    ],
)
def test_pattern_matching(box: Path, pattern: str, command: str, expected: bool) -> None:
    assert satisfied(command.format(box=box), [pattern.format(box=box)], box) is expected


def test_tilde_patterns_expand_home(box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `~` is the state dir's home (OPENCLAW_HOME first), never the command's own HOME (issue 9 item 18).
    monkeypatch.setenv("OPENCLAW_HOME", str(box / "home"))
    make_tool(box / "home" / "bin" / "mine")
    entries = [AllowlistEntry("~/bin/mine")]
    assert check(f"{box}/home/bin/mine", entries, box).satisfied
    assert not check(f"{box}/bin/show", entries, box).satisfied


def test_arg_pattern_matches_quoted_joined_args(box: Path) -> None:
    entry = AllowlistEntry(f"{box}/bin/show", arg_pattern=r"status( -s)?")
    assert check("show status", [entry], box).satisfied
    assert check("show status -s", [entry], box).satisfied
    assert not check("show status -s --porcelain", [entry], box).satisfied  # fullmatch, not search
    assert not check("show 'status -s'", [entry], box).satisfied  # one word is not two
    assert args_text(("x", "a b", "it's", "")) == "'a b' 'it'\"'\"'s' ''"
    empty = AllowlistEntry(f"{box}/bin/show", arg_pattern="")
    assert check("show", [empty], box).satisfied
    assert not check("show x", [empty], box).satisfied
    assert not check("show x", [AllowlistEntry(f"{box}/bin/show", arg_pattern="(")], box).satisfied


def test_arg_pattern_entry_wins_and_ids_are_reported(box: Path) -> None:
    entries = [
        AllowlistEntry(f"{box}/bin/*", id="broad"),
        AllowlistEntry(f"{box}/bin/show", arg_pattern="x", id="narrow"),
    ]
    match = check("show x", entries, box).segments[0]
    assert (match.satisfied_by, match.entry_id, match.matched_pattern) == (
        "allowlist",
        "narrow",
        f"{box}/bin/show",
    )
    assert check("show y", entries, box).segments[0].entry_id == "broad"


def test_every_segment_must_be_satisfied(box: Path) -> None:
    entries = [AllowlistEntry(f"{box}/bin/show")]
    assert check("show a && show b ; show c ; show d || show e", entries, box).satisfied
    # A pipe is input to the next program: only one known to read it as data takes it unasked
    # (engine.commands.stdindata); `show` is not known, so the pipe into it misses its entry.
    piped = check("show b | show c", entries, box)
    assert not piped.satisfied and "not known to read its input as data" in str(piped.segments[1].reason)
    make_tool(box / "bin" / "cat")
    assert check("show b | cat c", [*entries, AllowlistEntry(f"{box}/bin/cat")], box).satisfied
    result = check("show a && ls", entries, box)
    assert not result.satisfied
    assert [m.satisfied_by for m in result.segments] == ["allowlist", None]
    assert result.segments[1].reason == "allowlist miss"


def test_failed_analysis_is_never_satisfied(box: Path) -> None:
    analysis = analyze_command("show $(id)")
    result = evaluate_allowlist(analysis, [AllowlistEntry("*")], cwd=str(box), env=env_for(box))
    assert not result.satisfied


# --------------------------------------------------------------------------- safe bins (§3.7)


@pytest.mark.parametrize(
    ("command", "ok"),
    [
        ("wc -l", True),
        ("wc -lw", True),
        ("wc --lines", True),
        ("wc --li", True),  # unique prefix
        ("wc --files0-from=x", False),
        ("wc --files0=x", False),  # prefix of a denied flag is denied
        ("wc file.txt", False),
        ("head -n 5", True),
        ("head -n5", True),
        ("head -5", True),
        ("head --lines=5", True),
        ("head -n 5 /etc/passwd", False),
        ("head -n /etc/passwd", False),
        ("tail -f", False),  # never ends (issue 9 item 19)
        ("tail -n 20 log.txt", False),
        ("uniq -c", True),
        ("uniq -ci", True),
        ("uniq in.txt out.txt", False),
        ("cut -d , -f 1", True),
        ("cut -d, -f1", True),
        ("cut -f1 ../secret", False),
        ("tr a-z A-Z", True),
        ("tr -d '\\r'", True),
        ("tr -S a b", False),  # reference test
        ("tr a b c", False),
        ("tr", False),
        ("wc --bogus", False),
        ("wc -- -l", False),  # after -- it is an operand
    ],
)
def test_default_safe_bins(box: Path, command: str, ok: bool) -> None:
    assert check(command, [], box).satisfied is ok


def test_opt_in_profiles(box: Path) -> None:
    bins = {*DEFAULT_SAFE_BINS, "sort", "grep", "jq"}

    def run(command: str) -> bool:
        return check(command, [], box, safe_bins=bins).satisfied

    assert run("sort -r")
    assert run("sort -rn -k 2")
    assert not run("sort -o out")
    assert not run("sort --compress-program=sh")
    assert not run("sort --comp=sh")
    assert not run("sort -T /tmp")
    assert not run("sort file")
    assert run("grep -e foo -i")
    assert not run("grep foo")  # pattern must come through -e
    assert not run("grep -r -e foo")
    assert not run("grep -f patterns")
    assert not run("jq .foo")  # jq is a language: never a safe bin, whatever the config says
    assert not run("jq -r --arg name value .x")
    assert not run("jq env")
    assert not run("jq '$ENV.HOME'")
    assert not run("jq -f prog.jq")
    assert not run("jq --rawfile a /etc/passwd .")
    assert not check("sort -r", [], box).satisfied  # not a default


def test_safe_bins_need_trusted_dirs_and_profiles(box: Path) -> None:
    make_tool(box / "bin" / "wc")  # PATH puts box/bin first
    result = check("wc -l", [], box)
    assert not result.satisfied
    assert "outside the trusted dirs" in (result.segments[0].reason or "")
    assert check("/usr/bin/wc -l", [], box).satisfied
    assert not check("awk 1", [], box, safe_bins={"awk"}).satisfied  # interpreters never
    assert not check("nl", [], box, safe_bins={"nl"}).satisfied  # unprofiled
    profile = SafeBinProfile(bool_flags=frozenset({"-b"}), value_flags=frozenset({"-s"}))
    assert check("nl -s x", [], box, safe_bins={"nl"}, safe_bin_profiles={"nl": profile}).satisfied


def test_profile_from_config() -> None:
    profile = profile_from_config(
        "nl", {"minPositional": 0, "maxPositional": 0, "allowedValueFlags": ["-s"], "booleanFlags": ["-p"]}
    )
    assert validate_safe_bin_argv(["-p", "-s", "x"], profile) is None
    assert validate_safe_bin_argv(["-q"], profile) == "unknown option -q"
    with pytest.raises(ValueError, match=r"safeBinProfiles\.nl"):
        profile_from_config("nl", {"maxPositional": -1})
    with pytest.raises(ValueError, match="unknown profile keys"):
        profile_from_config("nl", {"bogus": 1})
    assert set(DEFAULT_SAFE_BINS) <= set(DEFAULT_SAFE_BIN_PROFILES)


def test_trusted_dir_warning_text(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    assert trusted_dir_warnings([str(loose), "/usr/bin"]) == [
        f"exec: safeBinTrustedDirs includes world-writable directory '{loose}'; "
        "remove trust or tighten permissions (for example chmod 755)."
    ]


# --------------------------------------------------------------------------- enforced command


def run_shell(command: str, cwd: Path) -> str:
    out = subprocess.run(["/bin/sh", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=20)
    return out.stdout


def test_enforced_command_pins_argv0_and_quotes_every_word(box: Path) -> None:
    command = """show "it's" 'a b' '$HOME' '*' && show x | cat y"""
    make_tool(box / "bin" / "cat")  # a data reader by name: a pipe into it is data (stdindata)
    analysis = analyze_command(command)
    entries = [AllowlistEntry(f"{box}/bin/show"), AllowlistEntry(f"{box}/bin/cat")]
    result = evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env_for(box))
    enforced = enforced_command(analysis, result)
    assert enforced == (
        f"'{box}/bin/show' 'it'\"'\"'s' 'a b' '$HOME' '*' && '{box}/bin/show' 'x' | '{box}/bin/cat' 'y'"
    )
    # Run it for real with a hostile PATH: the pinned path still runs, and words arrive verbatim.
    make_tool(box / "work" / "evil" / "show", "#!/bin/sh\necho EVIL\n")
    out = run_shell(f"PATH={box}/work/evil; {enforced}", box / "work")
    assert "EVIL" not in out
    assert "[y]" in out
    assert run_shell(f"PATH={box}/work/evil; " + enforced.split(" && ")[0], box) == "[it's][a b][$HOME][*]\n"


def test_enforced_command_keeps_wrappers_and_shell_payloads(box: Path) -> None:
    entries = [AllowlistEntry(f"{box}/bin/show")]
    analysis = analyze_command("nice -n 1 timeout 5 show a && sh -c 'show \"b c\" && show d'")
    result = evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env_for(box))
    assert result.satisfied
    enforced = enforced_command(analysis, result)
    assert enforced is not None
    assert enforced.startswith("'/usr/bin/nice' '-n' '1' '/usr/bin/timeout' '5' ")
    assert run_shell(enforced, box) == "[a]\n[b c]\n[d]\n"


def test_enforced_command_unavailable(box: Path) -> None:
    analysis = analyze_command("no-such-command x")
    result = evaluate_allowlist(analysis, [AllowlistEntry("*")], cwd=str(box), env=env_for(box))
    assert result.satisfied
    assert enforced_command(analysis, result) is None  # nothing to pin: approval is required
    miss = evaluate_allowlist(analyze_command("ls"), [], cwd=str(box), env=env_for(box))
    assert enforced_command(analyze_command("ls"), miss) is None


# --------------------------------------------------------------------------- allow-always (§3.10)


def test_allow_always_patterns(box: Path) -> None:
    entries: list[AllowlistEntry] = []

    def patterns(command: str) -> list[str]:
        analysis = analyze_command(command)
        result = evaluate_allowlist(analysis, entries, cwd=str(box / "work"), env=env_for(box))
        return allow_always_patterns(command, analysis, result)

    wc, cat = os.path.realpath("/usr/bin/wc"), os.path.realpath("/usr/bin/cat")
    assert patterns("cat a && cat b | wc -l") == [cat, wc]
    # The shell is never persisted: its inner executables are.
    assert patterns("sh -c 'cat a && cat b'") == [cat]
    assert patterns("bash -lc 'wc x'") == [wc]
    # Interpreters, blocked wrappers, unresolvable commands and failed analyses fall back to the hash.
    for command in ("python3 -c 'print(1)'", "sudo cat", "no-such-tool", "cat $(id)", "FOO=1 cat"):
        assert patterns(command) == [command_hash_pattern(command)], command
    assert patterns("cat a && python3 x.py") == [cat, command_hash_pattern("cat a && python3 x.py")]
    # A program not known to take no code from its argv (argvsafe) gets its exact command saved, whether
    # or not anyone listed it as one that runs code: `show` here, mvn, uv, gradle on a host.
    assert patterns("show a && show b | wc -l") == [wc, command_hash_pattern("show a && show b | wc -l")]
    assert patterns("bash -lc 'show x'") == [command_hash_pattern("bash -lc 'show x'")]


def test_command_hash_and_durable_approval() -> None:
    pattern = command_hash_pattern("  make deploy  ")
    assert pattern == command_hash_pattern("make deploy")
    assert pattern.startswith("=command:") and len(pattern) == len("=command:") + 64
    assert pattern == "=command:" + __import__("hashlib").sha256(b"make deploy").hexdigest()
    entries = [AllowlistEntry(pattern, source="allow-always")]
    assert has_durable_approval("make deploy", entries)
    assert not has_durable_approval("make deploy && id", entries)
    assert not has_durable_approval("make deploy", [AllowlistEntry("make deploy", source="allow-always")])
    # Reference §3.3 (a): a hash entry is durable only when an allow-always decision wrote it.
    assert not has_durable_approval("make deploy", [AllowlistEntry(pattern)])
    assert not has_durable_approval("make deploy", [AllowlistEntry(pattern, source="manual")])


# --------------------------------------------------------------------------- resolution cache


def test_resolution_cache_sees_new_files_chmod_and_retargeted_links(box: Path) -> None:
    first = box / "first"
    first.mkdir()
    env = {"PATH": f"{first}:{box}/bin:/usr/bin"}
    cwd = str(box / "work")
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    # A file planted earlier in PATH shadows at once, exactly as the shell would run it.
    make_tool(first / "show")
    assert resolve_executable("show", cwd=cwd, env=env) == str(first / "show")
    (first / "show").unlink()
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    # A non-executable file made executable (no directory entry changes).
    (first / "show").write_text(SHOW)
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    (first / "show").chmod(0o755)
    assert resolve_executable("show", cwd=cwd, env=env) == str(first / "show")
    # A symlink retargeted in place (rename over it).
    make_tool(box / "a" / "target")
    make_tool(box / "b" / "target")
    (first / "tool").symlink_to(box / "a" / "target")
    assert resolve_executable("tool", cwd=cwd, env=env) == str(box / "a" / "target")
    (first / "tmp-link").symlink_to(box / "b" / "target")
    os.replace(first / "tmp-link", first / "tool")
    assert resolve_executable("tool", cwd=cwd, env=env) == str(box / "b" / "target")
    # The link's target file replaced by another symlink elsewhere.
    (box / "a" / "target").unlink()
    make_tool(box / "c" / "real")
    assert resolve_executable("tool", cwd=cwd, env=env) == str(box / "b" / "target")


def test_resolution_cache_with_missing_path_dirs_and_relative_names(box: Path) -> None:
    later = box / "later"
    env = {"PATH": f"{later}:{box}/bin"}
    cwd = str(box / "work")
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    make_tool(later / "show")  # the directory did not exist when the answer was cached
    assert resolve_executable("show", cwd=cwd, env=env) == str(later / "show")
    assert resolve_executable("./late", cwd=cwd, env=env) is None
    make_tool(box / "work" / "late")
    assert resolve_executable("./late", cwd=cwd, env=env) == str(box / "work" / "late")


def test_resolution_cache_survives_fork_without_stealing_events(box: Path) -> None:
    first = box / "first"
    first.mkdir()
    env = {"PATH": f"{first}:{box}/bin"}
    cwd = str(box / "work")
    assert resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
    pid = os.fork()
    if pid == 0:  # child: its own watcher; the change it makes must be seen by both processes
        ok = resolve_executable("show", cwd=cwd, env=env) == str(box / "bin" / "show")
        make_tool(first / "show")
        ok = ok and resolve_executable("show", cwd=cwd, env=env) == str(first / "show")
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert resolve_executable("show", cwd=cwd, env=env) == str(first / "show")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="ab-_=:,./@%+ \"'$*\\é\t\n~", max_size=5), max_size=5))
def test_args_text_quotes_as_shlex_does(args: list[str]) -> None:
    """args_text skips shlex.quote when no word needs it: the text argPatterns see must not change."""
    assert args_text(["prog", *args]) == " ".join(shlex.quote(arg) for arg in args)
