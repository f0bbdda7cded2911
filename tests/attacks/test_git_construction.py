"""Round 8 (attackP): allowlisted git ran code unasked because its argv handling listed bad options. Now
what runs without an ask is an allowlist of subcommands, each with an allowlist of inert options
(engine.commands.gitopts); everything else asks. attackP's gateway tests stay in
tests/attacks/test_fresh_round8_p.py (now plain tests); these add the variants: abbreviations, stuck
short options, `=` and separate values, `--no-`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import gitopts, gitvet
from engine.commands.treecode import unbound_findings
from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, write_config

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
