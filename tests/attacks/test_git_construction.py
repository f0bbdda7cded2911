"""Round 8 (attackP): allowlisted git ran code unasked because its argv handling listed bad options. Now
what runs without an ask is an allowlist of subcommands, each with an allowlist of inert options
(engine.commands.gitopts); everything else asks. The gateway tests are attackP's
(tests/attacks/test_fresh_round8_p.py, by the round-8 attacker), copied here as plain tests; the unit
tests below add the variants: abbreviations, stuck short options, `=` and separate values, `--no-`."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import gitopts, gitvet
from engine.commands.treecode import unbound_findings
from engine.protocol.frames import RemoteError
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.gateway import connect, gateway, wait_until, write_config

GIT = "/usr/bin/git"
ID = ["-c", "user.name=a", "-c", "user.email=a@b"]


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run([GIT, *ID, *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _state() -> Path:
    return Path(os.environ["OPENCLAW_STATE_DIR"])


def _repo(root: Path) -> Path:
    repo = root / "w"
    repo.mkdir()
    _git(repo, "init", "-q", ".")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    return repo


# --------------------------------------------------------------------------- attackP's, through the gateway


async def test_class5_git_rebase_continue_runs_the_exec_lines_of_the_agents_todo(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = _git(repo, "rev-parse", "HEAD")
    marker = tmp_path / "PWNED"
    # What the agent leaves in its repository (any allowlisted writer, or a sandbox with workspaceAccess=rw).
    state = repo / ".git" / "rebase-merge"
    state.mkdir()
    (state / "git-rebase-todo").write_text(f"exec touch {marker}\n")
    (state / "head-name").write_text("refs/heads/master\n")
    (state / "onto").write_text(head + "\n")
    (state / "orig-head").write_text(head + "\n")
    (state / "interactive").write_text("")
    details = await attempt(
        _state(),
        "git rebase --continue",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details) or not marker.exists(), details


async def test_class5_git_bisect_view_runs_any_git_subcommand_named_after_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "commit", "-q", "--allow-empty", "-m", "two")
    # Bisect state and a submodule: refs and files the agent writes in its own repository.
    _git(repo, "update-ref", "refs/bisect/bad", "HEAD")
    _git(repo, "update-ref", "refs/bisect/good-x", "HEAD~1")
    (repo / ".git" / "BISECT_TERMS").write_text("bad\ngood\n")
    sub = repo / "sub"
    sub.mkdir()
    _git(sub, "init", "-q", ".")
    _git(sub, "commit", "-q", "--allow-empty", "-m", "s")
    _git(repo, "add", "sub")
    (repo / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n')
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(),
        f"git bisect view submodule foreach 'touch {marker};:'",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details) or not marker.exists(), details


async def test_class8_git_cherry_pick_strategy_runs_a_program_from_the_work_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "f").write_text("a\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "two")
    _git(repo, "checkout", "-q", "-b", "other", "HEAD~1")
    marker = tmp_path / "PWNED"
    plugin = repo / "git-merge-.." / "x"  # a directory named `git-merge-..`: git-merge-../x is this file
    plugin.parent.mkdir()
    plugin.write_text(f"#!/bin/sh\ntouch {marker}\n")
    plugin.chmod(0o755)
    details = await attempt(
        _state(), "git cherry-pick --strategy=../x master", allow=[(GIT, None)], workdir=str(repo)
    )
    assert refused(details) or not marker.exists(), details


async def test_class8_git_rebase_strategy_runs_a_program_from_the_work_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "checkout", "-q", "-b", "other")
    (repo / "g").write_text("b\n")
    _git(repo, "add", "g")
    _git(repo, "commit", "-q", "-m", "other")
    _git(repo, "checkout", "-q", "master")
    (repo / "f").write_text("a\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "two")
    _git(repo, "checkout", "-q", "other")
    marker = tmp_path / "PWNED"
    plugin = repo / "git-merge-.." / "x"
    plugin.parent.mkdir()
    plugin.write_text(f"#!/bin/sh\ntouch {marker}\n")
    plugin.chmod(0o755)
    details = await attempt(
        _state(), "git rebase --force-rebase -s ../x master", allow=[(GIT, None)], workdir=str(repo)
    )
    assert refused(details) or not marker.exists(), details


async def test_class5_git_ls_remote_hidden_exec_option_runs_a_shell_command(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(),
        f"git ls-remote --exec='touch {marker}; git-upload-pack' .",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details) or not marker.exists(), details


async def test_class5_git_push_to_a_legacy_remotes_file_runs_the_destinations_hooks(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    dest = tmp_path / "dest"
    subprocess.run([GIT, "init", "-q", "--bare", str(dest)], check=True)
    marker = tmp_path / "PWNED"
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    remotes = repo / ".git" / "remotes"
    remotes.mkdir()
    (remotes / "x").write_text(f"URL: {dest}\nPush: refs/heads/master:refs/heads/master\n")
    details = await attempt(_state(), "git push x", allow=[(GIT, None)], workdir=str(repo))
    assert refused(details) or not marker.exists(), details


async def test_class5_git_push_relative_url_from_a_subdirectory_runs_the_destinations_hooks(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    (repo / "sub").mkdir()
    dest = tmp_path / "dest"
    subprocess.run([GIT, "init", "-q", "--bare", str(dest)], check=True)
    marker = tmp_path / "PWNED"
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    sub = str(repo / "sub")
    details = await attempt(_state(), "git push ../dest master", allow=[(GIT, None)], workdir=sub)
    assert refused(details) or not marker.exists(), details


async def test_class5_allow_always_binds_no_script_named_inside_a_git_option_value(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    script = repo / "t.sh"
    approved = tmp_path / "approved"
    script.write_text(f"touch {approved}\n")
    marker = tmp_path / "PWNED"
    command = "git -c alias.z='!sh t.sh' z"
    state = _state()
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", GIT)
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request("exec", {"command": command, "workdir": str(repo)})
            assert first["details"]["status"] == "approval-pending", first
            # Fixed: what a git key or option not known inert names is in no bound file: allow-once only.
            assert "allow-always" not in first["details"]["allowedDecisions"], first
            with contextlib.suppress(RemoteError):
                await client.request(
                    "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
                )
            script.write_text(f"touch {marker}\n")  # after the operator looked at `sh t.sh` as it was
            second = await client.request("exec", {"command": command, "workdir": str(repo)})
        finally:
            await client.close()
    assert refused(second["details"]) or not marker.exists(), second["details"]
    assert "=command:" not in (state / "exec-approvals.json").read_text()


async def test_binding_asks_with_other_repository_config_coalesce_into_one_approval(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "f").write_text("a\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "f")
    (repo / "f").write_text("b\n")  # modified: status runs the clean filter of its attribute
    (repo / ".gitattributes").write_text("* filter=x\n")
    marker = tmp_path / "PWNED"
    config = repo / ".git" / "config"
    plain = config.read_text()
    config.write_text(plain + "[alias]\n\tst = status\n")  # asks: a key not known inert, harmless
    state = _state()
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", GIT)
    async with gateway(state):
        client = await connect(state)
        try:
            params = {"command": "git status", "workdir": str(repo)}
            first = await client.request("exec", {**params, "sessionKey": "agent:main:one"})
            assert first["details"]["status"] == "approval-pending", first
            config.write_text(plain + f'[filter "x"]\n\tclean = touch {marker}; cat\n')
            second = await client.request("exec", {**params, "sessionKey": "agent:main:two"})
            assert second["details"]["status"] == "approval-pending", second
            shown = first["details"]["approvalId"]
            # The operator approves what the inbox shows for the first ask (alias.st), once.
            await client.request("approve", {"id": shown, "decision": "allow-once"})
            others = second["details"]["approvalId"]

            async def ended(key: str) -> bool:
                got = await client.request("approvals.status", {"approvalId": shown, "sessionKey": key})
                run = got["details"].get("run") or {}
                return run.get("status") not in (None, "running", "starting")

            if others == shown:  # coalesced: the one approval also runs the second session's command
                await wait_until(lambda: ended("agent:main:two"), timeout=30)
        finally:
            await client.close()
    assert not marker.exists()


async def test_class5_git_request_pull_url_operand_is_an_option_to_ls_remote(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "remote", "add", "origin", str(repo))  # an inert remote.origin.url: a local path
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(),
        f"git request-pull -- HEAD '--upload-pack=touch {marker};git-upload-pack'",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details) or not marker.exists(), details


async def test_class5_git_pull_operand_after_dash_dash_is_an_option_to_fetch(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "remote", "add", "origin", str(repo))
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(),
        f"git pull -- '--upload-pack=touch {marker};git-upload-pack'",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details) or not marker.exists(), details


async def test_class5_git_push_to_a_path_git_completes_with_dot_git_runs_the_destinations_hooks(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    dest = tmp_path / "dest.git"
    subprocess.run([GIT, "init", "-q", "--bare", str(dest)], check=True)
    marker = tmp_path / "PWNED"
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    command = f"git push {tmp_path / 'dest'} master"
    details = await attempt(_state(), command, allow=[(GIT, None)], workdir=str(repo))
    assert refused(details) or not marker.exists(), details


# --------------------------------------------------------------------------- variants, decided by the grammar


def _asks(command: str, cwd: Path) -> list[str]:
    return [f.what for f in gitvet.vet(GIT, command.split(), str(cwd))]


ASKS = [
    # state-machine continuations: they run what .git's state files say
    "git rebase --continue",
    "git rebase --skip",
    "git rebase --edit-todo",
    "git rebase --abort",
    "git rebase --cont",
    "git cherry-pick --continue",
    "git revert --continue",
    "git merge --continue",
    "git am --continue",
    "git am x.mbox",
    "git bisect view submodule foreach x",
    "git bisect visualize",
    "git bisect run x",
    "git bisect start",
    # options naming a program or a strategy, in every spelling git takes
    "git rebase --exec=x",
    "git rebase --exec x",
    "git rebase --exe=x",
    "git rebase --ex x",
    "git rebase -x x",
    "git rebase -qx x",
    "git rebase -xx",
    "git rebase -s ../x master",
    "git rebase -s../x master",
    "git rebase -qs../x master",
    "git rebase --strategy=../x master",
    "git rebase --strat=../x master",
    "git rebase -i master",
    "git rebase --interactive master",
    "git cherry-pick --strategy=../x master",
    "git cherry-pick --strategy ../x master",
    "git cherry-pick --strategy-option=x master",
    "git cherry-pick -X x master",
    "git merge -s ../x other",
    "git merge -s../x other",
    "git merge --strategy=../x other",
    "git merge -e other",
    "git pull -s ../x",
    "git pull --rebase=interactive",
    "git ls-remote --exec=x .",
    "git ls-remote --exe=x .",
    "git ls-remote --upload-pack=x .",
    "git ls-remote --upload-pa=x .",
    "git fetch --upload-pack=x .",
    "git fetch --upl=x .",
    "git push --receive-pack=x .",
    "git push --exec=x .",
    "git push --rec=x .",
    "git clone -u x . d",
    "git clone -qu x . d",
    "git clone -qux . d",
    "git clone --template=t . d",
    "git clone -c alias.x=!y . d",
    "git init --template=t d",
    "git grep -O x",
    "git grep -Ox",
    "git grep --open-files-in-pager=x x",
    "git grep --open x",
    "git difftool -x x",
    "git difftool --extcmd=x",
    "git mergetool -t x",
    "git archive --remote=. HEAD",
    "git archive --exec=x --remote=. HEAD",
    "git log --output=/tmp/x",
    "git log --ext-diff",
    "git diff --ext-diff",
    "git commit -e",
    "git commit --edit",
    "git commit --no-verify=x",
    "git commit -S",
    "git commit --gpg-sign=x",
    "git commit -cHEAD",
    "git tag -s v1",
    "git add -p",
    "git add --interactive",
    "git submodule foreach x",
    "git submodule update",
    "git submodule--helper foreach x",
    "git stash -p",
    "git worktree add ../x",
    "git branch --edit-description",
    "git config --edit",
    "git config -e",
    "git help -w log",
    "git config --global core.fsmonitor x",
    "git config --file=/tmp/x core.fsmonitor x",
    "git apply --directory=../.. x.patch",
    "git help --web log",
    "git log --recurse-submodules",
    "git status --ignore-submodules=none",
    # transports that run a helper program
    "git fetch ext::sh",
    "git ls-remote foo::bar",
    "git push evil://x master",
    "git clone foo::x d",
    "git remote add x foo::bar",
    # subcommands not known to run nothing
    "git st",
    "git filter-branch",
    "git send-email x",
    "git for-each-repo --config=x status",
    "git upload-pack .",
    "git hook run x",
    "git maintenance run",
    "git instaweb",
    "git credential fill",
    "git remote-ext x y",
    # what follows `--` never rescues an unknown option before it, and a remote operand is read as a URL
    "git pull -- --upload-pack=x",
    "git fetch -- --upload-pack=x",
    "git push -- --receive-pack=x",
    "git fetch --end-of-options --upload-pack=x",
    "git request-pull -- HEAD --upload-pack=x",
    "git rebase --exec=x -- f",
]
RUNS = [
    "git status",
    "git status --short",
    "git status -sb",
    "git status -uno",
    "git status --porcelain=v2 -z",
    "git log --oneline -n 5",
    "git log -n5",
    "git log -1 --format=%H",
    "git log --format %H -3",
    "git log -p -- f",
    "git log --end-of-options HEAD",
    "git show HEAD --stat",
    "git diff --cached -U3 --stat",
    "git diff -M50 HEAD~1",
    "git add -A .",
    "git commit -qm x",
    "git commit -m --exec=x",
    "git commit --allow-empty -F -",
    "git branch -vv",
    "git checkout -q -b side",
    "git checkout -- f.txt",
    "git switch -c new",
    "git reset --hard HEAD",
    "git rebase -q master",
    "git rebase --onto main HEAD~2",
    "git cherry-pick -x abc",
    "git merge --no-edit other",
    "git stash",
    "git stash list",
    "git stash show -p",
    "git stash pop --index",
    "git remote -v",
    "git remote show origin",
    "git bisect log",
    "git fetch -q origin",
    "git push -u origin master",
    "git ls-remote --heads .",
    "git grep -n -3 foo",
    "git grep -e foo -- '*.py'",
    "git rev-parse --show-toplevel",
    "git config user.name",
    "git config --get core.bare",
    "git commit -am msg",
    "git log -10 --graph --decorate --all",
    "git status -uall",
    "git --no-pager log -C . --stat",
    "git tag -a v1 -m x",
    "git clean -fdx",
]


@pytest.mark.parametrize("command", ASKS)
def test_what_is_not_in_the_grammar_asks(tmp_path: Path, command: str) -> None:
    repo = _repo(tmp_path)
    assert _asks(command, repo), command


@pytest.mark.parametrize("command", RUNS)
def test_what_the_grammar_holds_runs_unasked(tmp_path: Path, command: str) -> None:
    repo = _repo(tmp_path)
    assert _asks(command, repo) == [], command


def test_a_push_to_a_path_counts_every_repository_git_would_enter(tmp_path: Path) -> None:
    """receive-pack's enter_repo tries `/.git`, ``, `.git/.git`, `.git` after the path; `file://host/p`
    is local too: each names the repository whose hooks would run."""
    repo = _repo(tmp_path)
    dest = tmp_path / "dest.git"
    subprocess.run([GIT, "init", "-q", "--bare", str(dest)], check=True)
    for word in (str(tmp_path / "dest"), f"file://localhost{tmp_path}/dest", "../dest"):
        assert gitvet.RECEIVE_PACK_TREE in _asks(f"git push {word} master", repo), word
    (repo / "sub").mkdir()
    assert gitvet.RECEIVE_PACK_TREE in _asks("git push ../../dest master", repo / "sub")


def test_a_value_is_taken_as_git_takes_it() -> None:
    """A required value is the next word whatever it looks like (`-m --exec=x` is a message); an optional
    one only after `=` or stuck (`--porcelain x`: x is an operand); a flag given a value asks."""
    assert gitopts.problems("commit", ["-m", "--exec=x"]) == []
    assert gitopts.problems("status", ["--porcelain", "x"]) == []
    assert gitopts.problems("status", ["--short=x"])
    assert gitopts.problems("log", ["-n"]) == []  # git says a value is missing: nothing runs


def test_every_subcommand_in_the_table_runs_with_no_options() -> None:
    """The table's own shape: each entry parses, modes included (a typo'd spec would silently allow)."""
    for sub in gitopts.subcommands():
        entry = gitopts._TABLE[sub]
        modes = entry if isinstance(entry, dict) else {"": entry}
        for mode, spec in modes.items():
            assert all(name.startswith("--") and len(name) > 3 for name in spec.long), (sub, mode)
            assert all(len(letter) == 1 for letter in spec.short), (sub, mode)


@pytest.mark.parametrize("where", ["remotes", "branches"])
def test_a_legacy_remote_file_makes_remote_commands_ask(tmp_path: Path, where: str) -> None:
    repo = _repo(tmp_path)
    (repo / ".git" / where).mkdir(exist_ok=True)
    (repo / ".git" / where / "x").write_text("URL: ../dest\n")
    for command in ("git push x", "git fetch x", "git pull x", "git ls-remote x", "git push"):
        assert gitvet.LEGACY_REMOTES in _asks(command, repo), command
    assert _asks("git status", repo) == []


def test_git_findings_are_never_bound_so_allow_always_is_not_offered(tmp_path: Path) -> None:
    """A key or option not known inert may name any program (`!sh t.sh`): its bytes are in no bound file,
    so the binding says so (decision.py drops allow-always on it). The config's digest stays in it."""
    from engine.commands.treecode import binding

    repo = _repo(tmp_path)
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + "[alias]\n\tz = !sh t.sh\n")
    record = gitvet.Record()
    found = gitvet.vet(GIT, ["git", "status"], str(repo), record)
    assert found
    text = binding(found, record.data)
    assert unbound_findings(text)
    assert str(config) in text
    argv = gitvet.vet(GIT, ["git", "-c", "alias.z=!sh t.sh", "z"], str(tmp_path))
    assert unbound_findings(binding(argv))


async def test_allow_always_is_not_offered_for_a_repository_alias_naming_a_script(tmp_path: Path) -> None:
    """The config twin of attackP's `-c alias.z='!sh t.sh' z`: the alias's t.sh is in no bound file, so an
    approval of `git z` is for this run only, and a t.sh rewritten after it never runs unasked."""
    repo = _repo(tmp_path)
    (repo / "t.sh").write_text("true\n")
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + "[alias]\n\tz = !sh t.sh\n")
    state = _state()
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", GIT)
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request("exec", {"command": "git z", "workdir": str(repo)})
        finally:
            await client.close()
    assert first["details"]["status"] == "approval-pending", first
    assert "allow-always" not in first["details"]["allowedDecisions"], first


def test_the_pinned_view_links_no_legacy_remotes() -> None:
    """git reads remotes from .git/remotes/ and .git/branches/; the vet asks while they hold any file, and
    the view links neither, so one made after the vet is not seen by the git that runs."""
    from engine.commands.pinned import COMMON_ENTRIES

    assert "remotes" not in COMMON_ENTRIES and "branches" not in COMMON_ENTRIES
