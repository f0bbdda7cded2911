"""Round 7 n's variants: what the gateway or a program it trusts reads is kept whether it exists or not,
found the way its reader finds it (git's own include list, every link on the way), and the home is
writable only where the operator lists it (`hostWritable`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostroots, hosttrust, hostview
from engine.commands.pinned import pinned_view
from engine.config.loader import load_config
from engine.tools.exec_host import host_outside
from tests.helpers.bwrap import needs_bwrap


def _run(script: str, outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE) -> str:
    view = pinned_view(None, host=True, outside=outside)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    return done.stdout + done.stderr


@pytest.fixture
def home(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return Path.home()


def test_git_includes_are_asked_of_git_nested_conditional_and_missing(home: Path, tmp_path: Path) -> None:
    """An include of an include, an includeIf whatever its condition, a `~/` path, a missing file, one
    outside the home: every one is in the list, as git resolves it (relative to the including file)."""
    (home / "dotfiles").mkdir()
    (home / ".gitconfig").write_text(
        "[include]\n\tpath = dotfiles/a.inc\n"
        '[includeIf "gitdir:~/work/"]\n\tpath = ~/work.inc\n'
        f"[include]\n\tpath = {tmp_path}/outside.inc\n"
    )
    (home / "dotfiles" / "a.inc").write_text("[include]\n\tpath = b.inc\n")  # relative to dotfiles/
    (home / "dotfiles" / "b.inc").write_text("[include]\n\tpath = ../missing.inc\n")
    found = hosttrust.git_includes()
    assert set(found) == {
        str(home / "dotfiles" / "a.inc"),
        str(home / "work.inc"),
        str(tmp_path / "outside.inc"),
        str(home / "dotfiles" / "b.inc"),
        str(home / "dotfiles" / ".." / "missing.inc"),
    }, found
    protected = hosttrust.protected(str(home.parent / "s"))
    assert str(home / "missing.inc") in protected and str(home / "dotfiles" / "b.inc") in protected


def test_the_include_cache_follows_the_files_it_read(home: Path) -> None:
    """The include list is cached by each file's bytes: a change to any file on the way is seen at once."""
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = op\n")
    assert hosttrust.git_includes() == []
    gitconfig.write_text("[include]\n\tpath = one.inc\n")
    assert not hosttrust.includes_known()  # the event loop's kept view steps aside: git must be asked
    assert hosttrust.git_includes() == [str(home / "one.inc")]
    assert hosttrust.includes_known()
    (home / "one.inc").write_text("[include]\n\tpath = two.inc\n")
    assert hosttrust.git_includes() == [str(home / "one.inc"), str(home / "two.inc")]
    (home / "one.inc").write_text("[user]\n\tname = op\n")
    assert hosttrust.git_includes() == [str(home / "one.inc")]


@pytest.mark.parametrize("what", ["include", "nested-include", "chain-hop", "path-prepend", "rootfs"])
def test_host_writable_holding_a_trusted_path_is_refused(home: Path, what: str, tmp_path: Path) -> None:
    """A hostWritable dir holding any file a trusted reader reads — an include, an include's include, a
    middle link of the global git config's chain, a pathPrepend dir, a bwrap rootfs — is refused,
    naming the key."""
    for d in ("dotfiles", "Sync", "tools", "rootfs"):
        (home / d).mkdir()
    config = home / ".gitconfig"
    if what == "include":
        config.write_text("[include]\n\tpath = dotfiles/git.inc\n")
    elif what == "nested-include":
        config.write_text(f"[include]\n\tpath = {tmp_path}/a.inc\n")
        (tmp_path / "a.inc").write_text(f"[include]\n\tpath = {home}/dotfiles/b.inc\n")
    elif what == "chain-hop":
        (home / "Sync" / "gitconfig").write_text("")
        (home / "dotfiles" / "gitconfig").symlink_to("../Sync/gitconfig")
        config.symlink_to("dotfiles/gitconfig")
    outside = hostoutside.Outside(
        writable=(str(home / "dotfiles"), str(home / "tools"), str(home / "rootfs")),
        readonly=(str(home / "tools"),) if what == "path-prepend" else (str(home / "rootfs"),),
    )
    if what in ("include", "nested-include", "chain-hop"):
        outside = hostoutside.Outside(writable=(str(home / "dotfiles"),))
    with pytest.raises(hostoutside.HostViewError, match="hostWritable names"):
        hostview.view_args(str(home.parent / "s"), outside=outside)


@needs_bwrap
def test_a_chain_hop_outside_the_home_cannot_be_repointed(home: Path, tmp_path: Path) -> None:
    """~/.gitconfig -> <elsewhere>/dotfiles/gitconfig -> ../sync/gitconfig: the middle link is outside the
    home, in a directory host commands could change; that directory is read-only in the view."""
    dotfiles, sync = tmp_path / "dotfiles", tmp_path / "sync"
    dotfiles.mkdir()
    sync.mkdir()
    (sync / "gitconfig").write_text("[user]\n\tname = op\n")
    (dotfiles / "gitconfig").symlink_to("../sync/gitconfig")
    (home / ".gitconfig").symlink_to(dotfiles / "gitconfig")
    evil = tmp_path / "evil"
    evil.write_text("[core]\n\tfsmonitor = /tmp/evil\n")
    out = _run(f"ln -sfn {evil} {dotfiles}/gitconfig || echo ln-refused; echo end")
    assert "ln-refused" in out and "end" in out, out
    assert os.readlink(dotfiles / "gitconfig") == "../sync/gitconfig"


def test_a_chain_hop_in_a_world_writable_directory_is_refused(home: Path, tmp_path: Path) -> None:
    """A link on the way in a directory every run may change (/tmp-like): binding it read-only would take
    it from every run, leaving it writable would give the config away: refused, naming the link."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "gitconfig").write_text("")
    (shared / "gitconfig").symlink_to(tmp_path / "gitconfig")
    (home / ".gitconfig").symlink_to(shared / "gitconfig")
    with pytest.raises(hostoutside.HostViewError, match="reached through the link"):
        hostview.view_args(str(home.parent / "s"))


@needs_bwrap
def test_an_include_outside_the_home_is_read_only_present_or_not(home: Path, tmp_path: Path) -> None:
    """An include outside the home (present) is read-only; a missing one is made empty (0600) by the
    gateway and read-only, so no run can create it (an empty config sets nothing)."""
    inc_dir = tmp_path / "inc"
    inc_dir.mkdir()
    (inc_dir / "present.inc").write_text("[user]\n\tname = op\n")
    (home / ".gitconfig").write_text(
        f"[include]\n\tpath = {inc_dir}/present.inc\n[include]\n\tpath = {inc_dir}/sub/missing.inc\n"
    )
    out = _run(
        f"echo x >> {inc_dir}/present.inc || echo present-ro; "
        f"echo x > {inc_dir}/sub/missing.inc || echo missing-ro; echo end"
    )
    assert "present-ro" in out and "missing-ro" in out and "end" in out, out
    assert (inc_dir / "present.inc").read_text() == "[user]\n\tname = op\n"
    made = inc_dir / "sub" / "missing.inc"
    assert made.read_text() == "" and made.stat().st_mode & 0o777 == 0o600


@needs_bwrap
def test_path_prepend_and_rootfs_outside_the_home_are_read_only_present_or_not(
    state_dir: Path, home: Path, tmp_path: Path
) -> None:
    """Every agent's pathPrepend dir and bwrap rootfs (from the config, by host_outside): read-only to
    every host run, a missing one made empty first (nothing on PATH, nothing to run)."""
    tools, later, rootfs, ops_rootfs = (tmp_path / n for n in ("tools", "later", "rootfs", "opsroot"))
    tools.mkdir()
    (rootfs / "usr" / "bin").mkdir(parents=True)
    path = state_dir / "config.toml"
    path.write_text(
        f'[tools.exec]\nhost = "gateway"\npathPrepend = ["{tools}"]\n'
        f'[agents.defaults.sandbox.bwrap]\nrootfs = "{rootfs}"\n'
        f'[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\npathPrepend = ["{later}"]\n'
        f'[agents.list.sandbox.bwrap]\nrootfs = "{ops_rootfs}"\n'
    )
    os.chmod(path, 0o600)
    outside = host_outside(load_config(path), "main", str(tmp_path))
    assert {str(tools), str(later), str(rootfs), str(ops_rootfs)} <= set(outside.readonly), outside
    targets = [tools / "grep", later / "grep", rootfs / "usr" / "bin" / "bwrap", ops_rootfs / "bin" / "sh"]
    script = "; ".join(f"mkdir -p {t.parent}; echo x > {t} || echo ro" for t in targets)
    out = _run(f"{script}; echo end", outside)
    assert out.count("ro\n") >= 4 and "end" in out, out
    assert not any(t.exists() for t in targets)
    assert later.is_dir() and not list(later.iterdir()) and ops_rootfs.is_dir()


def test_the_workdir_note_names_host_writable_for_any_unlisted_dir_in_the_home(home: Path) -> None:
    (home / "proj").mkdir()
    state = str(home.parent / "s")
    note = hostroots.workdir_note(state, hostoutside.Outside(workdir=str(home / "proj")))
    assert note is not None and "hostWritable" in note and str(home / "proj") in note
    listed = hostoutside.Outside(workdir=str(home / "proj"), writable=(str(home / "proj"),))
    assert hostroots.workdir_note(state, listed) is None
    assert hostroots.writable_roots(state, outside=listed) == [str(home / "proj")]
    assert hostroots.writable_roots(state, outside=hostoutside.Outside(workdir=str(home / "proj"))) == []


@needs_bwrap
def test_the_kept_view_follows_an_include_added_later(home: Path, tmp_path: Path) -> None:
    """An include added to ~/.gitconfig after the kept view was made (outside the home): the view's
    operations change with git's answer, so the next run's view is re-made with it read-only."""
    inc = tmp_path / "later.inc"
    inc.write_text("[user]\n\tname = op\n")
    (home / ".gitconfig").write_text("[user]\n\tname = op\n")
    assert "ok" in _run(f"echo x >> {inc} && echo ok")  # not trusted yet: writable like /tmp
    inc.write_text("[user]\n\tname = op\n")
    (home / ".gitconfig").write_text(f"[include]\n\tpath = {inc}\n")
    out = _run(f"echo x >> {inc} || echo inc-ro")
    assert "inc-ro" in out, out
    assert inc.read_text() == "[user]\n\tname = op\n"
