"""Another agent's `hostWritable` dirs in an agent's host view: covered (an empty read-only dir), its own
shown and writable whatever the nesting, and the kept view remade when another agent's dirs change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.approvals.store import ApprovalsStore
from engine.commands import bindsource, hostkeeper, hostoutside, hostroots, hostview, otherroots
from engine.commands.pinned import pinned_view
from engine.commands.verified import Mirror
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, write_config

VIEWS = ["kept", "own-bwrap"]


def _run(outside: hostoutside.Outside, script: str, helper: str | None) -> subprocess.CompletedProcess[str]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hostkeeper, "helper_path", lambda h=helper: h)
        view = pinned_view(None, host=True, outside=outside)
        try:
            argv = view.wrap(["/bin/sh", "-c", script])
            done = subprocess.run(
                argv, capture_output=True, text=True, check=False, pass_fds=view.fds, cwd="/"
            )
            return done
        finally:
            view.close()


def _helper(which: str) -> str | None:
    helper = hostkeeper.helper_path()
    if which == "kept" and helper is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    return helper if which == "kept" else None


def test_the_covers_follow_the_innermost_root() -> None:
    """The operations alone: another agent's root inside this agent's is covered with every directory
    between bound over itself first; this agent's root inside that cover is bound back; a root inside
    another agent's cover is not covered again; each cover is made read-only last."""
    home = Path.home()
    p, o, r, deeper = home / "p", home / "p/a/b/o", home / "p/a/b/o/mine", home / "p/a/b/o/mine/x/o2"
    for d in (deeper, home / "p/a/b/o/theirs"):
        d.mkdir(parents=True)
    own = [str(p), str(r)]
    other = otherroots.others(own, [*own, str(o), str(deeper), str(home / "p/a/b/o/theirs")], str(home))
    assert other == [str(o), str(home / "p/a/b/o/theirs"), str(deeper)]
    ops = otherroots.ops(own, other)
    assert ops == [
        *("--bind", str(home / "p/a"), str(home / "p/a")),
        *("--bind", str(home / "p/a/b"), str(home / "p/a/b")),
        *("--tmpfs", str(o)),
        *("--bind", str(r), str(r)),
        *("--bind", str(r / "x"), str(r / "x")),
        *("--tmpfs", str(deeper)),
        *("--remount-ro", str(o)),
        *("--remount-ro", str(deeper)),
    ]
    assert otherroots.hidden_at(str(o / "theirs" / "f"), own, other) == str(o / "theirs")
    assert otherroots.hidden_at(str(o / "f"), own, other) == str(o)
    assert otherroots.hidden_at(str(r / "f"), own, other) is None
    assert otherroots.hidden_at(str(deeper / "f"), own, other) == str(deeper)


@needs_bwrap
@pytest.mark.parametrize("which", VIEWS)
def test_another_agents_root_is_an_empty_read_only_dir(state_dir: Path, which: str) -> None:
    home = Path.home()
    (home / "ops-work").mkdir()
    (home / "ops-work" / "notes.txt").write_text("ops-private\n")
    (home / "main-work").mkdir()
    outside = hostoutside.Outside(
        writable=(str(home / "main-work"),),
        writable_anywhere=(str(home / "main-work"), str(home / "ops-work")),
    )
    script = (
        f"cat {home}/ops-work/notes.txt; ls -A {home}/ops-work; echo x > {home}/ops-work/n || echo ro; "
        f"echo mine > {home}/main-work/f && cat {home}/main-work/f"
    )
    done = _run(outside, script, _helper(which))
    assert done.stdout.split() == ["ro", "mine"], done
    assert "ops-private" not in done.stdout
    # the owner sees it as it is
    owner = hostoutside.Outside(
        writable=(str(home / "ops-work"),), writable_anywhere=outside.writable_anywhere
    )
    assert _run(owner, f"cat {home}/ops-work/notes.txt", _helper(which)).stdout == "ops-private\n"


@needs_bwrap
@pytest.mark.parametrize("which", VIEWS)
def test_nested_roots_show_the_own_and_hide_the_other_and_nothing_is_renamed_away(
    state_dir: Path, which: str
) -> None:
    """~/p is this agent's (shared with the other: the other's ~/p/a/o inside it is the other's alone),
    ~/p/a/o/mine this agent's again: the own root inside the other's cover shows and is writable; the
    other's dir, and every directory on the way to it, cannot be renamed out from under its cover."""
    home = Path.home()
    p = home / "p"
    o = p / "a" / "o"
    mine = o / "mine"
    mine.mkdir(parents=True)
    (o / "secret").write_text("other-private\n")
    (mine / "f").write_text("own\n")
    outside = hostoutside.Outside(writable=(str(p), str(mine)), writable_anywhere=(str(p), str(o), str(mine)))
    script = (
        f"cat {o}/secret; cat {mine}/f; echo more >> {mine}/f && echo own-rw; echo q > {p}/q && echo p-rw; "
        f'mv {p}/a {p}/a2 || echo a-busy; {sys.executable} -c \'import os; os.rename("{o}", "{p}/o2")\' '
        f"|| echo o-stays; echo x > {o}/y || echo o-ro"
    )
    done = _run(outside, script, _helper(which))
    assert done.stdout.split() == ["own", "own-rw", "p-rw", "a-busy", "o-stays", "o-ro"], done
    assert (mine / "f").read_text() == "own\nmore\n" and (o / "secret").exists() and (p / "a").is_dir()


def test_a_missing_root_of_another_agent_is_made_private_never_through_a_link(
    state_dir: Path, tmp_path: Path
) -> None:
    """Made now (0700), so a view kept from before never shows it once something made it; below this
    agent's own root, where its run may have planted a link on the way, nothing is made through one."""
    home = Path.home()
    (home / "main-work").mkdir()
    (home / "main-work" / "lnk").symlink_to(tmp_path)
    outside = hostoutside.Outside(
        writable=(str(home / "main-work"),),
        writable_anywhere=(
            str(home / "main-work"), str(home / "ops" / "work"), str(home / "main-work" / "lnk" / "x")
        ),
    )  # fmt: skip
    hostview.view_args(str(state_dir), outside=outside)
    assert (home / "ops" / "work").is_dir() and (home / "ops" / "work").stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "x").exists()


def test_a_workdir_in_another_agents_root_is_refused(state_dir: Path) -> None:
    home = Path.home()
    (home / "ops-work" / "src").mkdir(parents=True)
    outside = hostoutside.Outside(writable_anywhere=(str(home / "ops-work"),))
    with pytest.raises(hostoutside.HostViewError, match="another agent's"):
        hostroots.refuse_hidden_cwd(str(home / "ops-work" / "src"), str(state_dir), outside)
    hostroots.refuse_hidden_cwd(str(home), str(state_dir), outside)


OPS_DIR = """[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"

[[agents.list]]
id = "ops"
[agents.list.tools.exec]
security = "full"
ask = "off"
"""


@needs_bwrap
async def test_the_kept_view_follows_another_agents_roots_when_the_config_changes(state_dir: Path) -> None:
    """The covers are part of the kept view's key: main's view is remade when ops's hostWritable dirs
    are added to the config, and again when the dir is given to main itself. Taken out of the config (ops
    retired), the dir stays covered: what ops's runs left there is not main's (fresh round 17 a)."""
    if hostkeeper.helper_path() is None:
        pytest.skip("exechost-hostenter is not built (setup.sh)")
    work = Path.home() / "ops-work"
    work.mkdir()
    (work / "notes.txt").write_text("ops-private-7f3a\n")
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/cat")
    write_config(state_dir, OPS_DIR)
    seen = []
    async with gateway(state_dir):
        op = await connect(state_dir)
        try:
            mains = f'\n[[agents.list]]\nid = "main"\n[agents.list.tools.exec]\nhostWritable = ["{work}"]\n'
            for text in (
                OPS_DIR,
                OPS_DIR + f'hostWritable = ["{work}"]\n',
                OPS_DIR + "# none again\n",
                OPS_DIR + mains,
            ):
                write_config(state_dir, text)
                read = await op.request("exec", {"command": f"cat {work}/notes.txt", "agentId": "main"})
                seen.append("ops-private-7f3a" in read["text"])
        finally:
            await op.close()
    assert seen == [True, False, False, True]


def _ops_work() -> tuple[Path, hostoutside.Outside]:
    home = Path.home()
    (home / "ops-work").mkdir()
    (home / "main-work").mkdir()
    outside = hostoutside.Outside(
        writable=(str(home / "main-work"),),
        writable_anywhere=(str(home / "main-work"), str(home / "ops-work")),
    )
    return home / "ops-work", outside


@needs_bwrap
def test_a_vetted_copy_of_another_agents_file_is_not_bound_back_over_its_cover(state_dir: Path) -> None:
    """A file the decision read (a Makefile, a script) is pinned at its path in the run's view: one in
    another agent's dir stays covered; one beside it in this agent's own still gets its copy."""
    work, outside = _ops_work()
    (work / "x.mk").write_text("all:\n\techo OPS-PINNED\n")
    mine = work.parent / "main-work" / "x.mk"
    mine.write_text("changed-on-disk\n")
    files = [(str(work / "x.mk"), b"OPS-PINNED\n"), (str(mine), b"VETTED\n")]
    view = pinned_view(None, files, host=True, outside=outside)
    try:
        argv = view.wrap(["/bin/sh", "-c", f"cat {work}/x.mk {mine}"])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    out = done.stdout + done.stderr
    assert "OPS-PINNED" not in out and "VETTED" in out, out


@needs_bwrap
def test_another_agents_script_handed_to_its_reader_is_refused_not_copied(state_dir: Path) -> None:
    """A script its reader is handed by path is a sealed copy at another path: for a file in another
    agent's dir that copy would be the file itself, so the run is refused."""
    work, outside = _ops_work()
    (work / "s.py").write_text("print('OPS-MIRRORED')\n")
    mirror = Mirror(str(state_dir.parent / "m"), str(work), "s.py", b"print('OPS-MIRRORED')\n")
    with pytest.raises(hostoutside.HostViewError, match="another agent's"):
        pinned_view(None, host=True, mirrors=[mirror], outside=outside).close()
    (work.parent / "main-work" / "s.py").write_text("print('ok')\n")
    own = Mirror(str(state_dir.parent / "m"), str(work.parent / "main-work"), "s.py", b"print('ok')\n")
    pinned_view(None, host=True, mirrors=[own], outside=outside).close()


@needs_bwrap
@pytest.mark.parametrize("which", VIEWS)
def test_another_agents_root_outside_the_home_is_covered_and_stays_in_place(
    state_dir: Path, tmp_path: Path, which: str
) -> None:
    """`hostWritable = ["/srv/team/ops"]`: outside the home nothing is bound for its owner (it is writable
    already), but every other agent's view covers it, and the directory on the way that a run may rename
    is bound over itself (a rename would take the dir out from under the next view's cover). A root that
    holds what every run needs (a PATH dir) is left shared: no view can hide it."""
    team = tmp_path / "srv" / "team"
    (team / "ops").mkdir(parents=True)
    (team / "ops" / "notes").write_text("ops-outside\n")
    outside = hostoutside.Outside(writable_anywhere=(str(team / "ops"),))
    script = f"cat {team}/ops/notes; mv {team} {team}2 || echo team-busy; echo x > {team}/ops/n || echo ro"
    done = _run(outside, script, _helper(which))
    assert done.stdout.split() == ["team-busy", "ro"], done
    assert (team / "ops" / "notes").exists() and not (team / "ops" / "n").exists()
    tools = tmp_path / "tools"
    needed = [str(tools / "bin")]  # a PATH dir, say
    assert otherroots.others((), (str(tools),), str(Path.home()), needed=lambda: needed) == []
    assert otherroots.others((), (str(tools / "lib"),), str(Path.home()), needed=lambda: needed) == [
        str(tools / "lib")
    ]


def test_a_writable_root_another_account_holds_is_refused_by_name_and_on_the_binds_fds(
    tmp_path: Path,
) -> None:
    """hostroots.trusted_writable leaves such a root out with a warning naming it and what to do; and
    bindsource.by_fd refuses it on the fds it walks, whatever was decided by name (fresh round 16 a)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: any account may exchange what is in it
    theirs = shared / "ops-work"
    theirs.mkdir()
    ours = tmp_path / "mine"
    ours.mkdir()
    kept, notes = hostroots.trusted_writable([str(ours), str(theirs), str(tmp_path / "missing")])
    assert kept == (str(ours), str(tmp_path / "missing"))
    assert len(notes) == 1 and f"hostWritable {theirs} is refused" in notes[0] and "chown" in notes[0]
    ops, fds = bindsource.by_fd(["--bind", str(ours), str(ours)], frozenset({str(ours)}))
    assert ops[0] == "--bind-fd"
    bindsource.close(fds)
    with pytest.raises(PermissionError, match="writable by other accounts"):
        bindsource.by_fd(["--bind", str(theirs), str(theirs)], frozenset({str(theirs)}))
    ops, fds = bindsource.by_fd(["--bind", str(theirs), str(theirs)])  # not a writable root: not judged
    assert ops[0] == "--bind-fd"
    bindsource.close(fds)
