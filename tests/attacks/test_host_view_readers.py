"""Fresh round 8 r (attacker r's tests, rewritten at the view's level): what a program the gateway trusts
reads outside the home is found where that program finds it — the global git config's `core.hooksPath`
(the operator's next commit runs its hooks), and every file asyncssh reads for ~/.ssh/config at each node
connect: an entry of ~/.ssh that is a link out of it, and every `Include` (a file, or a glob's directory)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostoutside, hosttrust, hostview
from engine.commands.pinned import pinned_view
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
    (Path.home() / ".ssh").mkdir(mode=0o700)
    return Path.home()


@needs_bwrap
def test_the_global_hooks_path_outside_the_home_is_read_only(home: Path, tmp_path: Path) -> None:
    """attackR's test_the_global_hooks_path_outside_the_home_is_not_writable: git is asked for
    `core.hooksPath` with the includes; the hooks dir is kept read-only whole."""
    hooks = tmp_path / "team" / "githooks"
    hooks.mkdir(parents=True)
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    assert str(hooks) in hosttrust.git_includes()
    out = _run(f"echo 'echo planted' > {hooks}/pre-commit 2>&1; echo done")
    assert "done" in out and not (hooks / "pre-commit").exists(), out


@needs_bwrap
def test_a_file_the_ssh_config_includes_is_read_only_and_a_missing_one_made_first(
    home: Path, tmp_path: Path
) -> None:
    """attackR's test_a_file_the_ssh_config_includes_is_not_writable, and its variants: a missing include
    outside the home (made empty first), an include of an include, a glob's directory."""
    team = tmp_path / "team"
    (team / "conf.d").mkdir(parents=True)
    (team / "ssh_config").write_text(f"Include {team}/nested\n")
    (home / ".ssh" / "config").write_text(
        f'Host x\n  Include {team}/ssh_config\ninclude={team}/missing "{team}/conf.d/*.conf"\n'
    )
    found = hosttrust.ssh_files(str(home))
    assert {str(team / "ssh_config"), str(team / "nested"), str(team / "missing")} <= set(found), found
    assert hosttrust.ssh_dirs(str(home)) == [str(team / "conf.d")]
    script = "; ".join(
        f"echo 'Match exec \"touch /tmp/x\"' > {p} 2>/dev/null"
        for p in (team / "ssh_config", team / "nested", team / "missing", team / "conf.d" / "a.conf")
    )
    out = _run(script + "; echo done")
    assert "done" in out, out
    assert (team / "ssh_config").read_text().startswith("Include")
    assert not (team / "nested").exists() or (team / "nested").read_text() == ""
    assert (team / "missing").read_text() == ""  # made empty by the gateway before the run
    assert not (team / "conf.d" / "a.conf").exists()


@needs_bwrap
def test_an_ssh_config_linked_out_of_dot_ssh_is_read_only_and_never_in_host_writable(
    home: Path, tmp_path: Path
) -> None:
    """attackR's test_the_ssh_config_linked_out_of_dot_ssh_is_not_writable, both cases: a link to a
    dotfiles checkout outside the home is followed and its file kept read-only; one into a hostWritable
    dir refuses that hostWritable (it would hold the file asyncssh reads)."""
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "ssh_config").write_text("Host *\n  ServerAliveInterval 30\n")
    (home / ".ssh" / "config").symlink_to(dotfiles / "ssh_config")
    out = _run(f"echo 'Match exec \"touch /tmp/x\"' > {dotfiles}/ssh_config 2>&1; echo done")
    assert "done" in out and "Match" not in (dotfiles / "ssh_config").read_text(), out

    src = home / "src" / "dotfiles"
    src.mkdir(parents=True)
    (src / "ssh_config").write_text("Host *\n")
    (home / ".ssh" / "config").unlink()
    (home / ".ssh" / "config").symlink_to(src / "ssh_config")
    with pytest.raises(hostoutside.HostViewError, match="hostWritable names"):
        hostview.view_args(
            os.environ["OPENCLAW_STATE_DIR"], outside=hostoutside.Outside(writable=(str(home / "src"),))
        )


@needs_bwrap
def test_an_xdg_config_home_outside_the_home_is_kept_whole(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attackR's test_an_xdg_config_home_outside_the_home_is_kept_whole: with XDG_CONFIG_HOME elsewhere
    only its git config was kept; a run wrote pip.conf's index-url there for the operator's next pip."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    out = _run(f"mkdir -p {xdg}/pip 2>&1; echo x > {xdg}/pip.conf 2>&1; echo done")
    assert "done" in out and not (xdg / "pip").exists() and not (xdg / "pip.conf").exists(), out


@needs_bwrap
def test_a_dangling_rc_link_into_a_missing_dir_outside_the_home_is_not_creatable(
    home: Path, tmp_path: Path
) -> None:
    """attackR's dangling ~/.bash_profile link (fresh round 8 r), one level deeper: the target's directory
    is missing too; its nearest existing directory is kept, so the run makes neither."""
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (home / ".bash_profile").symlink_to(dotfiles / "bash" / "profile")
    out = _run(
        f"mkdir -p {dotfiles}/bash 2>&1; echo 'touch /tmp/x' > {dotfiles}/bash/profile 2>&1; echo done"
    )
    assert "done" in out and not (dotfiles / "bash").exists(), out
    assert not (home / ".bash_profile").exists()  # never made: an empty one would hide ~/.profile
