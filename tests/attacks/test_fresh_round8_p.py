"""Fresh attacker round 8 (p): classes 4 (what runs unasked), 5 (emulating another program) and 8
(self-reference) against the allowlist, the analysis, the decision path and content binding.

Each working attack is a strict xfail naming what works and why; the instructive failures are plain
regression tests. The agent controls its workspace (any file in the cwd), the command text and env."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
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
    _git(repo, "init", "-q", "-b", "master", ".")  # the tests name the branch
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    return repo


# --------------------------------------------------------------------------- class 5: git's own state


# Closed (git28): `rebase --continue` is no option of gitopts' table: it asks.
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


# Closed (git28): bisect's only mode in gitopts' table is `log`: `view` asks.
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


# Closed (git28): `--strategy` is no option of cherry-pick in gitopts' table: it asks.
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


# Closed (git28): `-s` is no option of rebase in gitopts' table: it asks.
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


# Closed (git28): `--exec` is no option of ls-remote in gitopts' table: it asks.
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


# Closed (git28): request-pull is no subcommand of gitopts' table: it asks.
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


# Closed (git28): a remote operand, after `--` too, is read as a URL: a leading `-` asks.
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


# Closed (git28): a file in .git/remotes/ makes remote commands ask (gitvet.LEGACY_REMOTES).
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


# Closed (git28): relative push URLs are taken from the work tree's top too.
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


# Closed (git28): every suffix enter_repo tries counts (dest.git, dest/.git, …).
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


# Closed (git28): what a git key or option not known inert names is never bound: allow-once only.
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
            # Closed: allow-always is not offered (t.sh is in no bound file), so nothing is saved.
            assert "allow-always" not in first["details"]["allowedDecisions"], first
            with contextlib.suppress(RemoteError):
                await client.request(
                    "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
                )
            assert "=command:" not in (state / "exec-approvals.json").read_text()
            script.write_text(f"touch {marker}\n")  # after the operator looked at `sh t.sh` as it was
            second = await client.request("exec", {"command": command, "workdir": str(repo)})
        finally:
            await client.close()
    assert refused(second["details"]) or not marker.exists(), second["details"]


async def _approved_once_after(
    state: Path,
    command: str,
    workdir: Path,
    change: Callable[[], object],
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Ask `command` (only git allowlisted), run `change` while the ask waits (after the operator looked),
    approve it once and wait until its run has ended; the run as approvals.status reports it."""
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


# Closed (bind28): see docs/SECURITY.md §5.
async def test_class5_unparsed_text_runs_under_dash_which_names_another_file(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "x.sh").write_text("echo the script the operator read\n")
    marker = tmp_path / "PWNED"
    other = work / "$x.sh"  # what dash runs: `$` before a quote is a literal `$`
    run = await _approved_once_after(
        _state(), "sh $'x.sh'", work, lambda: other.write_text(f"touch {marker}\n")
    )
    assert not marker.exists(), run


# Closed: a tree tool whose manifest names code to run is approved once only (treecode.MANIFEST_TREE).
async def test_class4_allow_always_npm_test_runs_a_rewritten_script_its_package_json_names(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    approved, marker = tmp_path / "approved", tmp_path / "PWNED"
    (work / "package.json").write_text('{"name": "x", "version": "1.0.0", "scripts": {"test": "node t.js"}}')
    script = work / "t.js"
    script.write_text(f"require('fs').writeFileSync({str(approved)!r}, '')\n")
    state = _state()
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/npm")
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request("exec", {"command": "npm test", "workdir": str(work)})
            assert first["details"]["status"] == "approval-pending", first
            # The script package.json names is bound by nothing: the approval is for this run only.
            assert "allow-always" not in first["details"]["allowedDecisions"], first
            assert "this run only" in first["text"], first["text"]
            approval = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            with pytest.raises(RemoteError, match="allow-always is unavailable"):
                await client.request("approve", approval)  # asked for anyway: refused, nothing saved
            await client.request("approve", {**approval, "decision": "allow-once"})
            await wait_until(lambda: approved.exists(), timeout=60)
            script.write_text(f"require('fs').writeFileSync({str(marker)!r}, '')\n")
            second = await client.request("exec", {"command": "npm test", "workdir": str(work)})
        finally:
            await client.close()
    assert refused(second["details"]) or not marker.exists(), second["details"]


# Closed (git28): an ask's identity holds the vetted bytes (TreeVet.inputs): no coalescing.
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


# Closed (bind28): see docs/SECURITY.md §5.
async def test_class8_approved_bash_script_takes_the_sourced_branch_of_the_return_idiom(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    sourced, executed = tmp_path / "sourced", tmp_path / "executed"
    (work / "s.sh").write_text(
        f"if (return 0 2>/dev/null); then touch {sourced}; else touch {executed}; fi\n"
    )
    run = await _approved_once_after(_state(), "bash s.sh", work, lambda: None)
    assert executed.exists() and not sourced.exists(), run


# Closed (bind28): see docs/SECURITY.md §5.
async def test_class5_cd_physical_dot_dot_leads_the_run_where_the_binder_never_looked(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "o").mkdir()
    (work / "sub" / "link").symlink_to(tmp_path / "o")
    (work / "x.sh").write_text("echo top\n")
    (work / "sub" / "x.sh").write_text("echo sub\n")
    marker = tmp_path / "PWNED"
    there = tmp_path / "x.sh"  # where `cd -P sub/link/..` leads: the parent of o
    run = await _approved_once_after(
        _state(),
        "cd -P sub/link/.. && sh x.sh > /dev/null",
        work,
        lambda: there.write_text(f"touch {marker}\n"),
    )
    assert not marker.exists(), run


# Closed (bind28): see docs/SECURITY.md §5.
async def test_class5_cd_dot_dot_from_a_linked_workdir_runs_where_the_binder_never_looked(
    tmp_path: Path,
) -> None:
    real = tmp_path / "b" / "w"
    real.mkdir(parents=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "wl").symlink_to(real)
    (tmp_path / "a" / "x.sh").write_text("echo the script beside the workdir's name\n")
    marker = tmp_path / "PWNED"
    there = tmp_path / "b" / "x.sh"
    run = await _approved_once_after(
        _state(),
        "cd .. && sh x.sh > /dev/null",
        tmp_path / "a" / "wl",
        lambda: there.write_text(f"touch {marker}\n"),
    )
    assert not marker.exists(), run


# Closed (bind28): see docs/SECURITY.md §5.
async def test_class4_agents_cdpath_leads_the_run_where_the_binder_never_looked(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "x.sh").write_text("echo the script the operator read\n")
    elsewhere = tmp_path / "e" / "sub"
    elsewhere.mkdir(parents=True)
    marker = tmp_path / "PWNED"
    run = await _approved_once_after(
        _state(),
        "cd sub && sh x.sh > /dev/null",
        work,
        lambda: (elsewhere / "x.sh").write_text(f"touch {marker}\n"),
        env={"CDPATH": str(tmp_path / "e")},
    )
    assert not marker.exists(), run


# Closed: cmake -P in a writable tree is approved once only (treecode.MANIFEST_TREE).
async def test_class4_allow_always_cmake_script_runs_a_rewritten_file_it_includes(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    approved, marker = tmp_path / "approved", tmp_path / "PWNED"
    (work / "build.cmake").write_text("include(${CMAKE_CURRENT_LIST_DIR}/helper.cmake)\n")
    helper = work / "helper.cmake"
    helper.write_text(f'file(WRITE "{approved}" "")\n')
    state = _state()
    write_config(state, ALLOWLIST)
    ApprovalsStore(state / "exec-approvals.json").add_allowlist("main", "/usr/bin/cmake")
    params = {"command": "cmake -P build.cmake", "workdir": str(work)}
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request("exec", params)
            assert first["details"]["status"] == "approval-pending", first
            assert "allow-always" not in first["details"]["allowedDecisions"], first
            assert "this run only" in first["text"], first["text"]
            approval = {"id": first["details"]["approvalId"], "decision": "allow-always"}
            with pytest.raises(RemoteError, match="allow-always is unavailable"):
                await client.request("approve", approval)  # asked for anyway: refused, nothing saved
            await client.request("approve", {**approval, "decision": "allow-once"})
            await wait_until(lambda: approved.exists())
            helper.write_text(f'file(WRITE "{marker}" "")\n')
            second = await client.request("exec", params)
        finally:
            await client.close()
    assert refused(second["details"]) or not marker.exists(), second["details"]


# --------------------------------------------------------------------------- what did not work (regressions)


async def test_class4_less_lesskey_source_cannot_set_lessopen_on_the_host(tmp_path: Path) -> None:
    """less reads a lesskey source named on its command line even with LESSSECURE=1, and its `#env`
    section sets variables less reads as if from the environment: LESSOPEN runs a preprocessor. Secure
    mode (every host run has LESSSECURE=1) turns the preprocessor off, so the allowlisted less runs none."""
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "PWNED"
    (work / "k.src").write_text(f"#env\nLESSOPEN = |touch {marker}; cat %s\n")
    (work / "f.txt").write_text("data\n")
    details = await attempt(
        _state(), "less --lesskey-src=k.src f.txt", allow=[("/usr/bin/less", None)], workdir=str(work)
    )
    assert details["status"] == "completed", details
    assert not marker.exists()


async def test_class5_git_push_to_a_config_remote_that_is_a_local_path_asks(tmp_path: Path) -> None:
    """The configured twin of the legacy-remotes attack above: a `remote.x.url` naming a local repository
    is seen (gitargv.local_destinations), so the push asks and the destination's hook does not run."""
    repo = _repo(tmp_path)
    dest = tmp_path / "dest"
    subprocess.run([GIT, "init", "-q", "--bare", str(dest)], check=True)
    marker = tmp_path / "PWNED"
    hook = dest / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    _git(repo, "remote", "add", "x", str(dest))
    details = await attempt(_state(), "git push x master", allow=[(GIT, None)], workdir=str(repo))
    assert refused(details), details
    assert not marker.exists()


async def test_class5_git_submodule_foreach_named_directly_asks(tmp_path: Path) -> None:
    """The direct spelling of the bisect-view attack: `git submodule foreach CMD` asks (gitargv knows
    submodule runs programs unless its word is status/summary)."""
    repo = _repo(tmp_path)
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(), f"git submodule foreach 'touch {marker};:'", allow=[(GIT, None)], workdir=str(repo)
    )
    assert refused(details), details
    assert not marker.exists()


async def test_class5_git_ls_remote_upload_pack_prefix_asks(tmp_path: Path) -> None:
    """The documented twin of the hidden `--exec`: `--upload-pa=CMD` (a prefix git's parse-options takes
    for --upload-pack) is read as naming a program, so it asks and CMD does not run."""
    repo = _repo(tmp_path)
    marker = tmp_path / "PWNED"
    details = await attempt(
        _state(),
        f"git ls-remote --upload-pa='touch {marker}; git-upload-pack' .",
        allow=[(GIT, None)],
        workdir=str(repo),
    )
    assert refused(details), details
    assert not marker.exists()


async def test_class5_safe_bin_long_option_prefix_of_a_denied_option_is_refused(tmp_path: Path) -> None:
    """getopt_long takes `--files0-fr=F` for `--files0-from=F` (wc then reads file names from F): the
    safe-bin profile reads the prefix as the denied option, so no file is read unasked."""
    work = tmp_path / "w"
    work.mkdir()
    details = await attempt(_state(), "wc -l --files0-fr=/etc/hostname", workdir=str(work))
    assert refused(details), details
