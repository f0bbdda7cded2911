"""The decision reads a path where the run's view has it (engine.commands.viewpaths): variants of fresh
round 10 c's plants in the agent's own /tmp (engine.commands.hostprivate) in spellings and hops a check
of the literal word would miss, and the trusted files a private dir holds (a home, an XDG config dir)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import gatewaydirs, hostprivate, viewpaths
from engine.config.loader import load_config
from engine.policy.decision import evaluate
from tests.attacks.harness import ALLOWLIST, attempt, refused
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import write_config

GIT = "/usr/bin/git"
NINJA = "/usr/bin/ninja"
NPM = "/usr/bin/npm"
_NINJA_FILE = "rule t\n  command = touch {marker}\nbuild out: t\n"


def _binds(state: Path, space: str = "main") -> tuple[tuple[str, str], ...]:
    return hostprivate.binds(str(state), space, (str(state.parent / "tmp"),))


def _copy(state: Path, path: Path, space: str = "main") -> Path:
    """`path`'s copy in `space`'s private dirs: agent main's (the harness names it), or the operator's own
    (`approve_after`'s exec names no agent: the operator's places, fresh round 15 b)."""
    found = hostprivate.source_of(_binds(state, space), str(path))
    assert found is not None
    return Path(found)


def _plant_ninja(state: Path) -> tuple[Path, Path, Path]:
    """build.ninja in the agent's own <private>/p; the empty workdir; the marker it would touch."""
    root = state.parent
    named = root / "tmp" / "p"
    planted = _copy(state, named)
    planted.mkdir(parents=True)
    marker = root / "PWNED"
    (planted / "build.ninja").write_text(_NINJA_FILE.format(marker=marker))
    tree = root / "w"
    tree.mkdir()
    return named, tree, marker


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NINJA), reason="ninja is not installed")
@pytest.mark.parametrize("spelling", ["-C{p}", "-C {p}/.", "-C {p}/../p", "-C sub/l", "-C hop"])
async def test_every_spelling_of_a_dir_in_the_agents_own_tmp_asks(state_dir: Path, spelling: str) -> None:
    """An attached short option, a `.` or `..` on the way, a link one directory down, and a host link
    outside the private dir whose target is in it (`hop -> <root>/via`, `via -> <private>/p`)."""
    named, tree, marker = _plant_ninja(state_dir)
    (tree / "sub").mkdir()
    os.symlink(named, tree / "sub" / "l")
    os.symlink(named, state_dir.parent / "via")
    os.symlink(state_dir.parent / "via", tree / "hop")
    command = "ninja " + spelling.format(p=named)
    details = await attempt(state_dir, command, allow=[(NINJA, None)], workdir=str(tree))
    assert not marker.exists(), details["_text"]
    assert refused(details), details["_text"]
    assert "own copy of a private dir" in details["_text"], details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NPM), reason="npm is not installed")
async def test_an_option_value_after_equals_into_the_agents_own_tmp_asks(state_dir: Path) -> None:
    root = state_dir.parent
    named = root / "tmp" / "p"
    planted = _copy(state_dir, named, hostprivate.OPERATOR)
    planted.mkdir(parents=True)
    marker = root / "PWNED"
    package = {"name": "p", "version": "1.0.0", "scripts": {"test": f"touch {marker}"}}
    (planted / "package.json").write_text(json.dumps(package))
    tree = root / "w"
    tree.mkdir()
    details = await attempt(state_dir, f"npm --prefix={named} test", allow=[(NPM, None)], workdir=str(tree))
    assert not marker.exists(), details["_text"]
    assert refused(details), details["_text"]


@needs_bwrap
@pytest.mark.skipif(not os.path.exists(NINJA), reason="ninja is not installed")
async def test_a_path_outside_every_private_dir_still_runs_unasked(state_dir: Path) -> None:
    """The control: the same allowlisted ninja on a directory that is the same file in the view and on
    the host (no private dir on its way) runs."""
    root = state_dir.parent
    tree = root / "w"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "build.ninja").write_text("rule t\n  command = echo built\nbuild out: t\n")
    os.symlink(tree / "d", tree / "l")
    details = await attempt(state_dir, "ninja -C l -n", allow=[(NINJA, None)], workdir=str(tree))
    assert details["status"] != "denied", details["_text"]
    assert "own copy of a private dir" not in details["_text"], details["_text"]


def test_a_diverging_path_never_offers_allow_always(state_dir: Path) -> None:
    """Decided on files that are not the run's: approved once at most, never saved to run unasked."""
    root = state_dir.parent
    (root / "tmp" / "p").mkdir(parents=True)
    tree = root / "w"
    tree.mkdir()
    write_config(state_dir, ALLOWLIST)
    config = load_config(state_dir / "config.toml")
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    store.add_allowlist("main", "/usr/bin/ls", arg_pattern=None)
    decided = evaluate(
        f"ls {root / 'tmp' / 'p'}", config=config, store=store, cwd=str(tree), params={"host": "gateway"}
    )
    assert decided.verdict == "ask", decided.reason
    assert "allow-always" not in decided.allowed_decisions
    assert any("own copy of a private dir" in w for w in decided.warnings), decided.warnings
    # the same command with no private dirs (the view and the host agree) runs
    write_config(state_dir, ALLOWLIST + "hostPrivate = []\n")
    config = load_config(state_dir / "config.toml")
    same = evaluate(
        f"ls {root / 'tmp' / 'p'}", config=config, store=store, cwd=str(tree), params={"host": "gateway"}
    )
    assert same.verdict == "allow", same.reason


def test_the_view_walk_follows_links_where_the_view_has_them(tmp_path: Path) -> None:
    """in_view: a link in the agent's copy is read there; a host link into a private dir lands in the copy;
    `..` after a link is taken from the link's target, as the kernel does."""
    dest, source = tmp_path / "tmp", tmp_path / "copy"
    dest.mkdir()
    source.mkdir()
    binds = ((str(source), str(dest)),)
    (source / "real").mkdir()
    os.symlink("real", source / "l")
    os.symlink(dest / "real", tmp_path / "hop")
    assert viewpaths.in_view(binds, str(dest / "l" / "f"), "/") == str(source / "real" / "f")
    assert viewpaths.in_view(binds, "hop/f", str(tmp_path)) == str(source / "real" / "f")
    assert viewpaths.in_view(binds, str(dest / "l" / ".." / "x"), "/") == str(source / "x")
    os.symlink("loop", source / "loop")
    assert viewpaths.in_view(binds, str(dest / "loop"), "/") is None
    assert viewpaths.diverging(binds, ["/usr/bin", "x", "s/a/b"], str(tmp_path)) == []
    assert viewpaths.diverging(binds, [f"file://{dest}/r", "hop"], str(tmp_path)) == [
        f"file://{dest}/r",
        "hop",
    ]


def _repo_with_a_filtered_change(tree: Path) -> None:
    ident = ("-c", "user.name=a", "-c", "user.email=a@b")
    tree.mkdir()
    for args in (("init", "-q", "."), ()):
        if args:
            subprocess.run([GIT, *args], cwd=tree, check=True, capture_output=True)
    (tree / "f").write_text("x\n")
    subprocess.run([GIT, *ident, "add", "f"], cwd=tree, check=True, capture_output=True)
    subprocess.run([GIT, *ident, "commit", "-qm", "x"], cwd=tree, check=True, capture_output=True)
    (tree / ".gitattributes").write_text("* filter=x\n")
    (tree / "f").write_text("y\n")


@needs_bwrap
@pytest.mark.parametrize("where", ["home-below", "xdg", "in-the-home"])
async def test_a_trusted_config_in_a_private_dir_is_the_hosts(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The variants of the home in a private dir: a home one level below it (HOME=<private>/svc, the
    private dir holds the home), and an XDG_CONFIG_HOME in it that the host lacks (git's global config
    at $XDG_CONFIG_HOME/git/config), and a private dir inside the home holding the default one
    (~/.config, bound after the home): the agent's copy never reaches an allowlisted git."""
    root = state_dir.parent
    private = root / "tmp"
    marker = root / "PWNED"
    if where == "home-below":
        (private / "svc").mkdir()
        monkeypatch.setenv("HOME", str(private / "svc"))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(private / "svc"))  # the home host views protect
        gatewaydirs.record(str(private / "svc"), str(state_dir))  # the operator's, in the home as it is
        planted = _copy(state_dir, private / "svc" / ".gitconfig")
    elif where == "xdg":
        monkeypatch.setenv("XDG_CONFIG_HOME", str(private / "cfg"))
        planted = _copy(state_dir, private / "cfg" / "git" / "config")
    else:
        home = root / "h"
        (home / ".config").mkdir(parents=True)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        monkeypatch.setenv(hostprivate.DEFAULT_ENV, str(home / ".config"))
        binds = hostprivate.binds(str(state_dir), "main", (str(home / ".config"),))
        planted = Path(hostprivate.source_of(binds, str(home / ".config" / "git" / "config")) or "/")
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f'[filter "x"]\n\tclean = tee {marker}\n')
    tree = root / "w"
    _repo_with_a_filtered_change(tree)

    details = await attempt(state_dir, "git status --short", allow=[(GIT, None)], workdir=str(tree))

    assert not marker.exists(), details["_text"]
    assert details["status"] == "completed" and "M f" in details["_text"], details["_text"]


def test_protect_binds_what_a_private_dir_holds_after_it(tmp_path: Path) -> None:
    """hostprivate.protect: a present trusted file by its host path, a missing one as the empty file, a
    missing PATH dir as an empty read-only dir; nothing outside every private dir."""
    dest = tmp_path / "tmp"
    (dest / "bin").mkdir(parents=True)
    (dest / "conf").write_text("x")
    binds = ((str(tmp_path / "copy"), str(dest)),)
    got = hostprivate.protect(
        binds,
        str(tmp_path / "home"),
        [str(dest / "conf"), str(dest / "gone"), str(tmp_path / "elsewhere")],
        [str(dest / "bin"), str(dest / "nobin")],
        "/empty",
    )
    assert got == [
        *("--ro-bind", str(dest / "conf"), str(dest / "conf")),
        *("--ro-bind", "/empty", str(dest / "gone")),
        *("--ro-bind", str(dest / "bin"), str(dest / "bin")),
        *("--tmpfs", str(dest / "nobin"), "--remount-ro", str(dest / "nobin")),
    ]
    first, last = hostprivate.ops(binds, str(dest))
    assert first == ["--bind", str(tmp_path / "copy"), str(dest)] and last == []  # the home itself: first
    first, last = hostprivate.ops(binds, str(dest / "svc"))
    assert last == [] and first  # one holding the home: first, the home read-only on top
    first, last = hostprivate.ops(binds, str(tmp_path))
    assert first == [] and last  # inside the home: last


@needs_bwrap
async def test_a_workdir_in_the_agents_own_tmp_runs_allowlisted_and_asks_by_its_own_name(
    state_dir: Path,
) -> None:
    """The agent's copy of a private dir is in the state dir, but it is the run's own: an allowlisted `ls`
    there runs unasked (it always asked: "inside exechost's state dir"), a word leading out of it into the
    state dir still misses, and an ask shows the workdir as the agent named it, never the state dir's path."""
    root = state_dir.parent
    named = root / "tmp" / "proj"
    (_copy(state_dir, named)).mkdir(parents=True)
    (_copy(state_dir, named) / "f").write_text("x\n")
    ran = await attempt(state_dir, "ls", allow=[("/usr/bin/ls", None)], workdir=str(named))
    assert ran["status"] == "completed" and ran["_text"].split() == ["f"], ran["_text"]
    out = await attempt(
        state_dir, f"ls {state_dir}/exec-approvals.json", allow=[("/usr/bin/ls", None)], workdir=str(named)
    )
    assert refused(out), out["_text"]
    asked = await attempt(state_dir, "touch g", workdir=str(named))  # not allowlisted: it asks
    assert refused(asked), asked["_text"]
    assert f"CWD: {named}\n" in asked["_text"], asked["_text"]
    assert str(state_dir) not in asked["_text"], asked["_text"]


@needs_bwrap
async def test_a_script_in_the_agents_own_tmp_is_bound_by_the_bytes_the_run_reads(state_dir: Path) -> None:
    """`sh /tmp/x.sh` where only the agent's copy exists: the ask showed "does not exist" and approving
    ran whatever that copy held by then. The binder reads the copy the run reads: its digest is in the
    ask, and a rewrite after the ask is refused as stale."""
    from tests.attacks.test_content_binding import approve_after

    root = state_dir.parent
    named = root / "tmp" / "x.sh"
    planted = _copy(state_dir, named, hostprivate.OPERATOR)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("echo approved-bytes\n")
    marker = root / "PWNED"
    tree = root / "w"
    tree.mkdir()
    rows: dict[str, dict] = {}

    def shown(view: dict) -> None:
        rows.update({d["path"]: d for d in view["contentDigests"]})

    text = await approve_after(
        state_dir,
        f"sh {named}",
        tree,
        lambda: planted.write_text(f"touch {marker}\necho evil-bytes\n"),
        shown=shown,
    )
    assert not marker.exists(), text
    assert "evil-bytes" not in text and "approved-bytes" not in text, text
    assert rows[str(named)]["sha256"], rows  # bound: the agent's copy's digest, shown by its own name


@needs_bwrap
async def test_a_script_in_the_agents_own_tmp_runs_the_bytes_approved(state_dir: Path) -> None:
    from tests.attacks.test_content_binding import approve_after

    root = state_dir.parent
    named = root / "tmp" / "x.sh"
    planted = _copy(state_dir, named, hostprivate.OPERATOR)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text('echo approved-bytes "$0"\n')
    tree = root / "w"
    tree.mkdir()
    text = await approve_after(state_dir, f"sh {named}", tree, lambda: None)
    assert "approved-bytes" in text, text  # ($0 is the sealed mirror's path: see docs/SECURITY.md)


@needs_bwrap
async def test_git_in_a_workdir_in_the_agents_own_tmp_reads_the_repository_vetted(state_dir: Path) -> None:
    """The repository in the agent's copy is vetted at its host path and git is pointed at it by the
    name the view has (GIT_DIR, GIT_WORK_TREE, the vetted config's copy): an allowlisted `git status`
    there works, and a filter the agent adds to .git/config after the vet is not the config git reads."""
    root = state_dir.parent
    named = root / "tmp" / "repo"
    copy = _copy(state_dir, named)
    _repo_with_a_filtered_change(copy)
    details = await attempt(state_dir, "git status --short", allow=[(GIT, None)], workdir=str(named))
    assert details["status"] == "completed", details["_text"]
    assert "M f" in details["_text"], details["_text"]
