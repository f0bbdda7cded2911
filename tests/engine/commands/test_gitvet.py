"""gitvet finds the repository git would use, exactly as git finds it, and names every key not inert."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import gitvet
from engine.commands.treecode import (
    MANIFEST_TREE,
    PIP_PROJECT,
    RECIPE_TREE,
    TREE_PROGRAMS,
    binding,
    findings_for,
    unbound_findings,
)

GIT = "/usr/bin/git"
ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@x",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run([GIT, "-C", str(cwd), *args], env=ENV, check=True, capture_output=True)
    return done.stdout.decode().strip()


def repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "f").write_text("x\n")
    git(path, "add", "f")
    git(path, "commit", "-qm", "x")
    return path


def keys(found: list[gitvet.Finding]) -> list[str]:
    return [f.what.split(" ")[0] for f in found]


def test_a_fresh_and_a_cloned_repository_are_inert(tmp_path: Path) -> None:
    src = repo(tmp_path / "src")
    assert gitvet.vet(GIT, ["git", "status"], str(src)) == []
    subprocess.run([GIT, "clone", "-q", str(src), str(tmp_path / "clone")], env=ENV, check=True)
    assert gitvet.vet(GIT, ["git", "log"], str(tmp_path / "clone")) == []


def test_unknown_keys_ask_whatever_their_name(tmp_path: Path) -> None:
    work = repo(tmp_path / "r")
    for key in ("filter.anything-at-all.process", "diff.Zz9.textconv", "someday.new.key", "Core.Hookspath"):
        git(work, "config", key, "x")
    found = sorted(keys(gitvet.vet(GIT, ["git", "status"], str(work))))
    assert found == [
        "core.hookspath",
        "diff.Zz9.textconv",
        "filter.anything-at-all.process",
        "someday.new.key",
    ]


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://h/r.git", True),
        ("git@h:r.git", True),
        ("/srv/r.git", True),
        ("ssh://h/r", True),
        ("ext::sh -c x", False),
        ("fd::3", False),
        ("evil://h/r", False),
        ("-uploadpack=x", False),
    ],
)
def test_remote_urls_run_no_helper(tmp_path: Path, url: str, ok: bool) -> None:
    work = repo(tmp_path / "r")
    git(work, "config", "remote.origin.url", url)
    assert (gitvet.vet(GIT, ["git", "fetch"], str(work)) == []) is ok


def test_discovery_walks_up_and_stops_at_the_first_repository(tmp_path: Path) -> None:
    outer = repo(tmp_path / "outer")
    git(outer, "config", "alias.x", "!true")
    inner = repo(outer / "sub" / "inner")
    (inner / "deep").mkdir()
    assert gitvet.vet(GIT, ["git", "status"], str(inner / "deep")) == []  # git uses inner, not outer
    assert keys(gitvet.vet(GIT, ["git", "status"], str(outer / "sub"))) == ["alias.x"]
    # -C is applied as git applies it (relative to the cwd, cumulatively), --git-dir as given
    assert keys(gitvet.vet(GIT, ["git", "-C", "..", "status"], str(inner / "deep"))) == []
    assert keys(gitvet.vet(GIT, ["git", "-C", "..", "-C", "..", "status"], str(inner / "deep"))) == [
        "alias.x"
    ]
    assert keys(gitvet.vet(GIT, ["git", "-C", "../..", "status"], str(inner))) == ["alias.x"]
    assert keys(gitvet.vet(GIT, ["git", f"--git-dir={outer}/.git", "log"], str(inner))) == ["alias.x"]
    assert keys(gitvet.vet(GIT, ["git", "--git-dir", f"{outer}/.git", "log"], str(inner))) == ["alias.x"]


def test_worktrees_read_the_common_config_and_their_own(tmp_path: Path) -> None:
    main = repo(tmp_path / "main")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    git(main, "config", "extensions.worktreeConfig", "true")
    assert gitvet.vet(GIT, ["git", "status"], str(tmp_path / "wt")) == []
    git(tmp_path / "wt", "config", "--worktree", "core.fsmonitor", "x")
    found = gitvet.vet(GIT, ["git", "status"], str(tmp_path / "wt"))
    assert keys(found) == ["core.fsmonitor"] and found[0].path.endswith("config.worktree")
    git(main, "config", "gpg.program", "x")
    assert "gpg.program" in keys(gitvet.vet(GIT, ["git", "status"], str(tmp_path / "wt")))


def test_bare_repositories_and_broken_gitfiles(tmp_path: Path) -> None:
    bare = tmp_path / "b.git"
    subprocess.run([GIT, "init", "-q", "--bare", str(bare)], env=ENV, check=True)
    assert gitvet.vet(GIT, ["git", "log"], str(bare / "refs")) == []
    git(bare, "config", "uploadpack.packObjectsHook", "x")
    assert keys(gitvet.vet(GIT, ["git", "log"], str(bare / "refs"))) == ["uploadpack.packobjectshook"]
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / ".git").write_text("gitdir: /nowhere\n")
    assert gitvet.vet(GIT, ["git", "status"], str(odd)), "an unfollowable .git file must not pass"


def test_submodules_in_the_work_tree_are_vetted(tmp_path: Path) -> None:
    sub = repo(tmp_path / "subsrc")
    work = repo(tmp_path / "r")
    git(work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "s")
    assert gitvet.vet(GIT, ["git", "status"], str(work)) == []
    git(work / ".git" / "modules" / "s", "config", "diff.x.command", "x")
    assert "diff.x.command" in keys(gitvet.vet(GIT, ["git", "status"], str(work)))


def test_the_command_line_is_vetted_too(tmp_path: Path) -> None:
    work = repo(tmp_path / "r")
    assert keys(gitvet.vet(GIT, ["git", "-c", "user.name=x", "log"], str(work))) == []
    assert keys(gitvet.vet(GIT, ["git", "-c", "core.pager=sh", "log"], str(work))) == ["-c"]
    for argv in (
        ["git", "--exec-path=/tmp", "log"],
        ["git", "--config-env=a=B", "log"],
        ["git", "--weird", "x"],
        ["git", "clone", "-u", "x", "a"],
        ["git", "fetch", "--upload-pack=x"],
        ["git", "rebase", "-x", "x"],
        ["git", "submodule", "foreach", "x"],
        ["git", "bisect", "run", "x"],
        ["git", "grep", "-Ox", "y"],
    ):
        assert gitvet.vet(GIT, argv, str(work)), argv
    assert gitvet.vet(GIT, ["git", "submodule", "status"], str(work)) == []
    assert gitvet.vet(GIT, ["git", "push", "-u", "origin", "main"], str(work)) == []


def test_an_unparseable_config_asks(tmp_path: Path) -> None:
    work = repo(tmp_path / "r")
    with (work / ".git" / "config").open("a") as f:
        f.write("[broken\n")
    found = gitvet.vet(GIT, ["git", "status"], str(work))
    assert found and "could not be parsed" in found[0].what


@pytest.mark.parametrize("program", ["direnv", "just", "go", "cargo", "npm"])
def test_programs_that_search_upward_find_the_file_above(tmp_path: Path, program: str) -> None:
    spec = TREE_PROGRAMS[program]
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    name = spec.files[0]
    (top / name).parent.mkdir(parents=True, exist_ok=True)
    (top / name).write_text("x\n")
    found = findings_for([program], (f"/usr/bin/{program}",), str(top / "a" / "b"), [])
    assert [f.path for f in found if f.what != MANIFEST_TREE] == [os.path.join(str(top), name)]


def test_make_reads_only_its_own_directory_and_what_f_names(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("all:\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "other.mk").write_text("all:\n")
    assert findings_for(["make"], ("/usr/bin/make",), str(tmp_path / "sub"), []) == []
    named = findings_for(["make", "-f", "../other.mk"], ("/usr/bin/make",), str(tmp_path / "sub"), [])
    assert [os.path.basename(f.path) for f in named if f.what != RECIPE_TREE] == ["other.mk"]
    moved = findings_for(["make", "-C", ".."], ("/usr/bin/make",), str(tmp_path / "sub"), [])
    assert [os.path.basename(f.path) for f in moved if f.what != RECIPE_TREE] == ["Makefile"]
    # and where the recipes run (the directory -C leaves): not bound by bytes, so approved once only
    assert [os.path.realpath(f.path) for f in named if f.what == RECIPE_TREE] == [str(tmp_path / "sub")]
    assert [os.path.realpath(f.path) for f in moved if f.what == RECIPE_TREE] == [str(tmp_path)]
    assert unbound_findings(binding(moved)) == [f.path for f in moved if f.what == RECIPE_TREE]


def test_pip_names_the_build_backend_only_when_it_builds(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[build-system]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "setup.py").write_text("import os\n")
    pip = ("/usr/bin/pip3",)
    assert findings_for(["pip3", "list"], pip, str(tmp_path), []) == []
    here = findings_for(["pip3", "install", "."], pip, str(tmp_path), [])
    assert [os.path.basename(f.path) for f in here if f.what != PIP_PROJECT] == ["pyproject.toml"]
    sub = findings_for(["pip3", "install", "--no-deps", "-e", "./sub"], pip, str(tmp_path), [])
    assert sorted(os.path.basename(f.path) for f in sub if f.what != PIP_PROJECT) == [
        "pyproject.toml",
        "setup.py",
    ]
    # and the project trees pip builds: their backend imports what is there, which no digest holds
    assert [f.path for f in here if f.what == PIP_PROJECT] == [str(tmp_path)]
    assert [f.path for f in sub if f.what == PIP_PROJECT] == [str(tmp_path / "sub")]
    assert unbound_findings(binding(sub)) == [str(tmp_path / "sub")]


def test_a_sandbox_workspace_counts_as_agent_writable_whoever_owns_the_file(tmp_path: Path) -> None:
    from engine.commands.treecode import agent_writable

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "Makefile").write_text("all:\n")
    assert agent_writable(str(ws / "Makefile"), [str(ws)])
    if os.geteuid() != 0:  # root may write anything, so for root every tree is the agent's
        assert not agent_writable("/etc/hostname", [str(ws)])
    else:  # another local user's file is hostile too, whoever may write it
        other = tmp_path / "other.toml"
        other.write_text("x")
        os.chown(other, 65534, 65534)
        assert agent_writable(str(other), [])


def test_more_config_files_than_vetted_asks(tmp_path: Path) -> None:
    work = repo(tmp_path / "r")
    for i in range(gitvet.MAX_CONFIG_FILES + 1):
        mod = work / ".git" / "modules" / f"m{i:03d}"
        mod.mkdir(parents=True)
        (mod / "config").write_text("[core]\n\tbare = false\n")
    found = gitvet.vet(GIT, ["git", "status"], str(work))
    assert [f.what for f in found] == ["more nested repositories than exechost vets"]


def test_dot_dot_after_a_link_goes_where_git_goes(tmp_path: Path) -> None:
    """`git -C link/.. status`: git chdirs through the link, so `..` is the link target's parent; a
    lexical join would vet the clean directory the text names instead."""
    evil = repo(tmp_path / "evil")
    git(evil, "config", "alias.x", "!true")
    (evil / "inside").mkdir()
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "link").symlink_to(evil / "inside")
    assert keys(gitvet.vet(GIT, ["git", "-C", "link/..", "status"], str(clean))) == ["alias.x"]
    assert keys(gitvet.vet(GIT, ["git", "status"], str(clean / "link"))) == ["alias.x"]


def test_the_re_vet_names_a_key_added_after_the_decision(tmp_path: Path) -> None:
    from engine.commands.allowlist import evaluate_allowlist
    from engine.commands.analysis import analyze_command
    from engine.commands.treecode import tree_vet

    work = repo(tmp_path / "r")
    git(work, "config", "alias.st", "!true")
    analysis = analyze_command("git status")
    result = evaluate_allowlist(analysis, [], cwd=str(work), env={"PATH": "/usr/bin:/bin"})
    vetted = tree_vet(analysis, result, str(work), [])
    assert [f.what.split(" ")[0] for f in vetted.findings()] == ["alias.st"]
    assert vetted.problem() is None
    git(work, "config", "filter.x.clean", "cat")
    assert "filter.x.clean" in (vetted.problem() or "")


def test_docker_reads_a_compose_file_only_for_compose(tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text("services: {}\n")
    docker = ("/usr/bin/docker",)
    assert findings_for(["docker", "ps"], docker, str(tmp_path), []) == []
    assert findings_for(["docker", "compose", "up"], docker, str(tmp_path), [])


# --------------------------------------------------------------------------- the parse cache (issue 19)


def spawns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record every git that read_config starts."""
    seen: list[list[str]] = []
    real_run = subprocess.run

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        seen.append(argv)
        return real_run(argv, **kw)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(gitvet.subprocess, "run", run)
    return seen


def test_a_config_rewritten_with_the_same_size_and_mtime_is_vetted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parse is cached by the config's bytes, not its stamp: a same-size rewrite with the old mtime put
    back (what a racing attacker would do) is parsed again, and the decision changes."""
    work = repo(tmp_path / "r")
    config = work / ".git" / "config"
    text = config.read_text()
    config.write_text(text + "[user]\n\tname = aaaa\n")
    before = os.stat(config)
    started = spawns(monkeypatch)
    assert gitvet.vet(GIT, ["git", "status"], str(work)) == []
    assert gitvet.vet(GIT, ["git", "status"], str(work)) == []
    assert len(started) == 1  # the second decision spawned no git
    config.write_text(text + "[user]\n\tnamx = aaaa\n")
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(config).st_size == before.st_size
    assert keys(gitvet.vet(GIT, ["git", "status"], str(work))) == ["user.namx"]
    config.write_text(text + "[user]\n\tname = aaaa\n")  # back to inert: cached, no spawn
    spawned = len(started)
    assert gitvet.vet(GIT, ["git", "status"], str(work)) == []
    assert len(started) == spawned


def test_a_parse_error_names_the_file_it_came_from(tmp_path: Path) -> None:
    for name in ("one", "two"):
        work = repo(tmp_path / name)
        (work / ".git" / "config").write_text("[core\n")
        found = gitvet.vet(GIT, ["git", "status"], str(work))
        assert found and f"file {work / '.git' / 'config'}" in found[0].what


def test_a_fifo_planted_as_the_config_asks_without_hanging(tmp_path: Path) -> None:
    work = repo(tmp_path / "r")
    config = work / ".git" / "config"
    config.unlink()
    os.mkfifo(config)
    found = gitvet.vet(GIT, ["git", "status"], str(work))
    assert found and "not a regular file" in found[0].what


def test_git_that_did_not_run_is_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = repo(tmp_path / "r")
    (work / ".git" / "config").write_text("[user]\n\tname = timeout-case\n")
    real_run = subprocess.run

    def timeout(argv: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        raise subprocess.TimeoutExpired(argv, 10)

    monkeypatch.setattr(gitvet.subprocess, "run", timeout)
    assert gitvet.vet(GIT, ["git", "status"], str(work))  # asks
    monkeypatch.setattr(gitvet.subprocess, "run", real_run)
    assert gitvet.vet(GIT, ["git", "status"], str(work)) == []


def test_a_config_is_parsed_only_by_a_git_only_root_can_change(tmp_path: Path) -> None:
    """Vetting runs git before any ask: the agent's own `./git` (or a link to it) must never be what runs."""
    from engine.commands.gitvet import parser_git, root_only

    assert root_only("/usr/bin/git")
    fake = tmp_path / "git"
    fake.write_text("#!/bin/sh\ntouch ran\n")
    fake.chmod(0o755)
    assert not root_only(str(fake))  # /tmp is writable by others
    assert parser_git(str(fake)) == "/usr/bin/git"
    assert parser_git("/usr/bin/git") == "/usr/bin/git"
    link = tmp_path / "link"
    link.symlink_to("/usr/bin/git")
    assert parser_git(str(link)) == str(link)  # resolved: the system's git, run by its name


@pytest.mark.parametrize(
    ("argv", "local"),
    [
        ("git push ../dst.git main", True),
        ("git push file://{tmp}/dst.git main", True),
        ("git push --repo=../dst.git", True),
        ("git push -o ci.skip ../dst.git", True),
        ("git push near", True),  # a remote whose URL is a path
        ("git push", True),  # no repository named: any configured remote may be the one
        ("git -c url.{tmp}/.insteadOf=me: push me:dst.git", True),  # a rewrite into a path
        ("git push far main", False),  # an ssh remote
        ("git push host:dst.git main", False),  # scp-like: ssh
        ("git push https://example.org/x.git main", False),
        ("git fetch ../dst.git", False),  # upload-pack there runs no hooks, and no program key of its config
        ("git ls-remote ../dst.git", False),
    ],
)
def test_a_push_to_a_local_repository_names_it_and_is_never_saved(
    tmp_path: Path, argv: str, local: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """receive-pack runs in a local destination with its own hooks and config (git clears the forced
    GIT_CONFIG_COUNT for it): the destination is named, and a directory binds no bytes, so allow-once."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(tmp_path / "home"))  # the home host views protect
    work = repo(tmp_path / "w")
    subprocess.run([GIT, "init", "-q", "--bare", str(tmp_path / "dst.git")], env=ENV, check=True)
    git(work, "remote", "add", "near", str(tmp_path / "dst.git"))
    git(work, "remote", "add", "far", "ssh://example.org/x.git")
    found = gitvet.vet(GIT, argv.format(tmp=tmp_path).split(), str(work))
    pushes = [f for f in found if f.what == gitvet.RECEIVE_PACK_TREE]
    if not local:
        assert pushes == [], pushes
        return
    assert [f.path for f in pushes][:1] == [str(tmp_path / "dst.git")], found
    assert str(tmp_path / "dst.git") in unbound_findings(binding(pushes))


def test_a_remote_in_the_operators_global_config_is_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (home / ".gitconfig").write_text(f'[url "{tmp_path}/"]\n\tpushInsteadOf = mine:\n')
    work = repo(tmp_path / "w")
    subprocess.run([GIT, "init", "-q", "--bare", str(tmp_path / "dst.git")], env=ENV, check=True)
    found = gitvet.vet(GIT, ["git", "push", "mine:dst.git"], str(work))
    assert [f.path for f in found if f.what == gitvet.RECEIVE_PACK_TREE] == [str(tmp_path / "dst.git")]


@pytest.mark.parametrize(
    ("sub", "asks"),
    [
        ("status", False),
        ("log", False),
        ("show", False),
        ("rev-parse", False),
        ("st", True),  # an alias (the operator's, or one git would look up): not known to run nothing
        ("credential-store", True),  # a git-<name> program of its own
        ("lfs", True),  # a `git-lfs` on the PATH
        ("frobnicate", True),
    ],
)
def test_only_subcommands_known_to_run_no_program_run_unasked(tmp_path: Path, sub: str, asks: bool) -> None:
    """The subcommand check is a list of what is known not to run programs: every other word asks."""
    work = repo(tmp_path / "r")
    found = gitvet.vet(GIT, ["git", sub], str(work))
    assert bool(found) == asks, found
    if asks:
        assert "not a subcommand known to run no program" in found[0].what
