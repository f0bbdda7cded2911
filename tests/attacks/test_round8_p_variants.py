"""Variants of round 8 p's content-binding attacks (bind28): each closed by the construction, not by the
one spelling the attacker used (docs/SECURITY.md §5, "What was approved is what runs")."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.commands.allowlist import evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.content import bind
from engine.commands.textnames import cd_dirs, unpinned_word
from engine.commands.treecode import TREE_PROGRAMS, binding, findings_for, unbound_findings
from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, wait_until, write_config


def _state() -> Path:
    return Path(os.environ["OPENCLAW_STATE_DIR"])


async def _approved_once_after(
    command: str, workdir: Path, change: Callable[[], object], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Ask `command`, run `change` while the ask waits, approve it once: the run, as approvals.status
    reports it."""
    state = _state()
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            params: dict[str, Any] = {"command": command, "workdir": str(workdir)}
            if env is not None:
                params["env"] = env
            first = await client.request("exec", params)
            assert first["details"]["status"] == "approval-pending", first
            change()
            approval = first["details"]["approvalId"]
            await client.request("approve", {"id": approval, "decision": "allow-once"})

            async def ended() -> dict[str, Any] | None:
                got = await client.request("approvals.status", {"approvalId": approval})
                run = got["details"].get("run") or {}
                return run if run.get("status") not in (None, "running", "starting") else None

            return dict(await wait_until(ended, timeout=30))
        finally:
            await client.close()


# --------------------------------------------------------------------------- class 8: run as a script


async def test_class8_approved_bash_shebang_script_runs_as_a_script_not_sourced(tmp_path: Path) -> None:
    """`./s.sh` with `#!/bin/bash`: the sealed copy is not sourced from `-c` either: every "am I sourced"
    test (`(return 0)`, `$-` holding `c`, BASH_EXECUTION_STRING) answers as for `bash s.sh`."""
    work = tmp_path / "w"
    work.mkdir()
    out = tmp_path / "out"
    script = work / "s.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"if (return 0 2>/dev/null); then echo sourced > {out}; else echo executed > {out}; fi\n"
        f"case $- in *c*) echo dash-c >> {out};; esac\n"
        f'[ -n "${{BASH_EXECUTION_STRING+x}}" ] && echo es >> {out}\n'
        "exit 0\n"
    )
    script.chmod(0o755)
    run = await _approved_once_after("./s.sh", work, lambda: None)
    assert out.read_text() == "executed\n", run


async def test_class8_approved_bash_script_reading_its_args_and_stdin_keeps_them(tmp_path: Path) -> None:
    """The legitimate side: run as a script from its mirror, `bash s.sh a b` still gets its arguments and
    sees its own file name as $0's last part."""
    work = tmp_path / "w"
    work.mkdir()
    out = tmp_path / "out"
    (work / "s.sh").write_text(f'echo "$# $1 $2 ${{0##*/}}" > {out}\n')
    run = await _approved_once_after("bash s.sh a b", work, lambda: None)
    assert out.exists(), run
    assert out.read_text() == "2 a b s.sh\n", run


# --------------------------------------------------------------------------- class 5: names a shell reads


@pytest.mark.parametrize("spelling", ['$"x.sh"', "$'\\x78.sh'", "x.s?"])
async def test_class5_unparsed_text_a_shell_reads_its_own_way_is_refused(
    tmp_path: Path, spelling: str
) -> None:
    """dash and bash read `$"…"`, `$'\\x78'`, a glob, each its own way; the binder reads none of them:
    the approved run is refused rather than run bound to nothing."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "x.sh").write_text("echo the script the operator read\n")
    marker = tmp_path / "PWNED"

    def change() -> None:
        for name in ("$x.sh", "x.sh", "$\\x78.sh", "x.sl"):
            (work / name).write_text(f"touch {marker}\n")

    run = await _approved_once_after(f"sh {spelling}; true", work, change)
    assert not marker.exists(), run


def test_unpinned_word_names_the_word_a_shell_expands() -> None:
    assert "$x.sh" in unpinned_word("sh $'x.sh'")
    assert unpinned_word("sh 'x.sh'; true") == ""
    for text in ("sh *.sh; true", "sh {a,b}.sh; true", "sh ~/x.sh; true", "sh x\\.sh; true", "sh `echo x`"):
        assert unpinned_word(text), text


# --------------------------------------------------------------------------- class 5: where a cd leads


async def test_class5_set_physical_then_cd_dot_dot_is_bound_where_it_leads(tmp_path: Path) -> None:
    """`set -P` makes every later `cd` physical, as `cd -P` does: the binder takes both readings of every
    target, so the x.sh beside the link's target must stay absent."""
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "o").mkdir()
    (work / "sub" / "link").symlink_to(tmp_path / "o")
    (work / "x.sh").write_text("echo top\n")
    marker = tmp_path / "PWNED"
    run = await _approved_once_after(
        "set -P; cd sub/link/.. && sh x.sh > /dev/null",
        work,
        lambda: (tmp_path / "x.sh").write_text(f"touch {marker}\n"),
    )
    assert not marker.exists(), run


async def test_class4_cdpath_set_by_the_text_itself_refuses_the_run(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "x.sh").write_text("echo the script the operator read\n")
    elsewhere = tmp_path / "e" / "sub"
    elsewhere.mkdir(parents=True)
    marker = tmp_path / "PWNED"
    run = await _approved_once_after(
        f"CDPATH={tmp_path / 'e'}; cd sub && sh x.sh > /dev/null",
        work,
        lambda: (elsewhere / "x.sh").write_text(f"touch {marker}\n"),
    )
    assert not marker.exists(), run


def test_cd_dirs_reads_a_target_by_name_and_by_its_links(tmp_path: Path) -> None:
    (tmp_path / "w" / "sub").mkdir(parents=True)
    (tmp_path / "o").mkdir()
    (tmp_path / "w" / "sub" / "link").symlink_to(tmp_path / "o")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "wl").symlink_to(tmp_path / "w")
    dirs, lost = cd_dirs(["cd", "sub/link/.."], str(tmp_path / "w"), {})
    assert lost is None and {str(tmp_path / "w" / "sub"), str(tmp_path)} <= set(dirs), dirs
    dirs, lost = cd_dirs(["cd", ".."], str(tmp_path / "a" / "wl"), {})
    assert lost is None and {str(tmp_path / "a"), str(tmp_path)} <= set(dirs), dirs


@pytest.mark.parametrize(
    ("words", "env"),
    [
        (["cd", "sub"], {"CDPATH": "/e"}),
        (["CDPATH=/e", ";", "cd", "sub"], {}),
        (["shopt", "-s", "cdable_vars", ";", "cd", "x"], {}),  # no directory x: $x is where it goes
        (["pushd", "+1"], {}),
    ],
)
def test_cd_dirs_loses_a_cd_it_cannot_follow(tmp_path: Path, words: list[str], env: dict[str, str]) -> None:
    (tmp_path / "sub").mkdir()
    assert cd_dirs(words, str(tmp_path), env)[1] is not None


def test_a_lost_cd_refuses_the_run_whatever_is_approved(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.sh").write_text("echo\n")
    text = "cd sub && sh x.sh > /dev/null"
    analysis = analyze_command(text)
    result = evaluate_allowlist(analysis, [], cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    plain = bind(analysis, result, str(tmp_path), {"PATH": "/usr/bin:/bin"}, command=text)
    assert plain.refuse == ""
    agents = bind(analysis, result, str(tmp_path), {"PATH": "/usr/bin:/bin", "CDPATH": "/e"}, command=text)
    assert "cd sub" in agents.refuse


# --------------------------------------------------------------------------- class 4: what manifests name


_FIRST_ARGS = {"docker": ["compose", "up"], "docker-compose": ["up"]}


@pytest.mark.parametrize(
    "program", sorted(p for p in TREE_PROGRAMS if p not in ("make", "gmake", "pip", "pip3"))
)
def test_every_tree_tool_in_a_writable_tree_is_approved_once_only(tmp_path: Path, program: str) -> None:
    """npm scripts, an include()d .cmake, a path dependency's build.rs, `build = "x.rs"`, `go run`'s
    sources: what a manifest names to run is bound by nothing, so the manifest's directory is a finding
    no bytes hold (treecode.MANIFEST_TREE), and allow-always is not offered."""
    spec = TREE_PROGRAMS[program]
    (tmp_path / spec.files[0]).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / spec.files[0]).write_text('[package]\nbuild = "x.rs"\n')
    argv = [program, *_FIRST_ARGS.get(program, ["build"])]
    found = findings_for(argv, (f"/usr/bin/{program}",), str(tmp_path), [])
    assert str(tmp_path) in unbound_findings(binding(found)), found


@pytest.mark.parametrize(
    "command",
    [
        "env -C sub sh x.sh > /dev/null",
        "env --chdir=sub sh x.sh > /dev/null",
        "alias g=cd\ng sub && sh x.sh > /dev/null",
    ],
)
async def test_class5_a_program_or_alias_that_changes_directory_is_bound_where_it_leads(
    tmp_path: Path, command: str
) -> None:
    """Not only `cd` changes directory: `env -C`, an alias of cd (dash expands aliases in `sh -c`), any
    program's own `-C`. Every directory the text names is a place its names are bound in."""
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "x.sh").write_text("echo the script the operator read\n")
    marker = tmp_path / "PWNED"
    run = await _approved_once_after(
        command, work, lambda: (work / "sub" / "x.sh").write_text(f"touch {marker}\n")
    )
    assert not marker.exists(), run


def test_the_agents_cdpath_is_not_inert() -> None:
    """CDPATH leads every later `cd` elsewhere: the agent's asks (and the binder reads it: refused)."""
    from engine.commands.hostenv import foreign_env_keys

    assert foreign_env_keys({"CDPATH": "/e"}) == ["CDPATH"]
    assert foreign_env_keys({"cdpath": "/e"}) == ["cdpath"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [("ls *.py | wc -l", "1"), ("for f in *.py; do echo $f; done", "a.py"), ("echo $HOME", "/")],
)
async def test_data_words_a_shell_expands_run_once_approved(state_dir: Path, text: str, shown: str) -> None:
    """The lead's regression: an unpinned word is refused where it could name what runs, not where a
    program reads it as data; an operator's allow-once of a common glob or variable still runs."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    work.mkdir()
    (work / "a.py").write_text("x = 1\n")
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            asked = await agent.request("exec", {"command": text, "workdir": str(work)})
            assert asked["details"]["status"] == "approval-pending", asked
            approval = asked["details"]["approvalId"]
            await operator.request("approve", {"id": approval, "decision": "allow-once"})

            async def ended() -> Any:
                got = await operator.request("approvals.status", {"approvalId": approval})
                run = got["details"].get("run") or {}
                return run if run.get("status") in ("completed", "failed", "denied") else None

            run = await wait_until(ended, timeout=30)
        finally:
            await agent.close()
            await operator.close()
    assert run["status"] == "completed" and shown in str(run.get("tail")), run


def test_unpinned_words_in_a_program_place_refuse() -> None:
    for text in ("x=./e.sh; $x", "sh $f", "for f in *.sh; do sh $f; done", "cat $(./x.sh)", "printf -v $n x"):
        assert unpinned_word(text), text
    for text in ("echo $((x))", "[ -f $x ]", "echo $(($(id)))"):
        assert unpinned_word(text), text
    for text in (
        "ls *.py | wc -l",
        "X=$HOME ls",
        'echo "a;b" $x',
        "grep -r foo *",
        "while [ ! -e go ]; do sleep 0.05; done",
        "echo relayed-$((6*7))",
    ):
        assert unpinned_word(text) == "", text
