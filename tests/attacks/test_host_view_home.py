"""The host view's home is read-only as a whole (issue 27, "prefer what is allowed"): a list of protected
files in a writable home always misses the next one, and a protected file's directory could be renamed
away (a bind is a mountpoint, its parent is not), leaving its path to a directory the command makes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostroots, hostview
from engine.commands.pinned import pinned_view
from engine.config.loader import ConfigError, load_config
from tests.helpers.bwrap import needs_bwrap


def _run(script: str, outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE) -> str:
    view = pinned_view(None, host=True, outside=outside)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    return done.stdout + done.stderr


@needs_bwrap
def test_renaming_a_protected_files_directory_plants_no_xdg_git_config(state_dir: Path) -> None:
    """The lead's attack: `mv ~/.config ~/.c2 && mkdir -p ~/.config/git && printf … > ~/.config/git/config`
    plants the operator's XDG git config (core.fsmonitor runs a program at every git status)."""
    home = Path.home()
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_text("[user]\n\tname = op\n")
    _run(
        f"mv {home}/.config {home}/.c2; mkdir -p {home}/.config/git; "
        f"printf '[core]\\n\\tfsmonitor = touch {home}/pwned\\n' > {home}/.config/git/config"
    )
    assert (home / ".config" / "git" / "config").read_text() == "[user]\n\tname = op\n"
    assert not (home / ".c2").exists()


@needs_bwrap
def test_nothing_in_the_home_is_writable_but_host_writable(state_dir: Path) -> None:
    """Not a list: the user site's .pth, a missing ~/.bashrc, ~/bin on PATH, an include of ~/.gitconfig,
    ~/node_modules, the workdir the agent names — whatever a program reads from the home next — none can
    be made or changed; the directory the operator lists in hostWritable can."""
    home = Path.home()
    (home / "proj").mkdir()
    (home / "other").mkdir()
    site = home / ".local" / "lib" / "python3" / "site-packages"
    targets = [site / "zz.pth", home / ".bashrc", home / "bin" / "ssh", home / ".gitconfig.local"]
    targets += [home / "node_modules" / "x" / "index.js", home / "other" / "f"]
    script = "; ".join(f"mkdir -p {t.parent}; echo x > {t}" for t in targets)
    outside = hostoutside.Outside(writable=(str(home / "proj"),), workdir=str(home / "other"))
    out = _run(f"{script}; echo y > {home}/proj/f && echo proj-ok", outside)
    assert "proj-ok" in out, out
    assert not any(t.exists() for t in targets)
    assert (home / "proj" / "f").read_text() == "y\n"


@needs_bwrap
def test_a_config_outside_the_home_cannot_be_written_or_its_directory_renamed(
    state_dir: Path, tmp_path: Path
) -> None:
    """The gateway's config file outside the state dir (`--config`, $EXECHOST_CONFIG): read-only, and
    every directory above it that a command could rename is a mountpoint in the view."""
    conf_dir = tmp_path / "opconf"
    conf_dir.mkdir()
    config = conf_dir / "exechost.toml"
    config.write_text("# the operator's\n")
    out = _run(
        f"echo x >> {config}; mv {conf_dir} {tmp_path}/o2; mv {tmp_path} {tmp_path}.2; "
        f"mkdir -p {conf_dir}; echo forged > {config}; echo end",
        hostoutside.Outside(files=(str(config),)),
    )
    assert "end" in out
    assert config.read_text() == "# the operator's\n"
    assert not (tmp_path / "o2").exists() and not Path(f"{tmp_path}.2").exists()


@needs_bwrap
@pytest.mark.parametrize("where", ["home", "dot", "holds-path-entry", "project"])
def test_a_workdir_the_agent_names_in_the_home_is_not_writable(
    state_dir: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exec's default workdir is $HOME; an agent may name ~/.local/lib/…/site-packages, ~/tools (holding
    ~/tools/bin on PATH) or any plain directory as its workdir: none becomes writable (only hostWritable
    is), and the run is told which key to change."""
    home = Path.home()
    (home / ".local" / "x").mkdir(parents=True)
    (home / "tools" / "bin").mkdir(parents=True)
    (home / "proj").mkdir()
    monkeypatch.setenv("PATH", f"{home}/tools/bin:/usr/bin:/bin")
    named = {"dot": home / ".local" / "x", "holds-path-entry": home / "tools", "project": home / "proj"}
    workdir = named.get(where, home)
    outside = hostoutside.Outside(workdir=str(workdir))
    ops = hostview.view_args(str(state_dir), outside=outside)
    assert not [i for i, op in enumerate(ops) if op == "--bind" and ops[i + 1] == str(workdir)], ops
    _run(f"echo x > {workdir}/planted", outside)
    assert not (workdir / "planted").exists()
    note = hostroots.workdir_note(str(state_dir), outside)
    if where == "home":  # exec's default workdir: read-only as documented, no note on every run
        assert note is None
    else:
        assert note is not None and "hostWritable" in note, note
    listed = hostoutside.Outside(workdir=str(home / "proj" / "sub"), writable=(str(home / "proj"),))
    assert hostroots.workdir_note(str(state_dir), listed) is None


def test_host_writable_dirs_are_bound_writable_and_checked(state_dir: Path) -> None:
    home = Path.home()
    (home / ".cache").mkdir()
    ops = hostview.view_args(str(state_dir), outside=hostoutside.Outside(writable=("~/.cache",)))
    assert ["--bind", str(home / ".cache"), str(home / ".cache")] == ops[ops.index(str(home)) + 2 :][:3]
    (home / ".config" / "git").mkdir(parents=True)
    with pytest.raises(hostoutside.HostViewError, match=r"hostWritable names ~/\.config"):
        hostview.view_args(str(state_dir), outside=hostoutside.Outside(writable=("~/.config",)))


@pytest.mark.parametrize("value", ['["~"]', '["rel/dir"]', '["~/a/../.."]', '"~/x"', '["/"]'])
def test_host_writable_config_errors_name_file_key_and_line(state_dir: Path, value: str) -> None:
    path = state_dir / "config.toml"
    path.write_text(f'[tools.exec]\nask = "on-miss"\nhostWritable = {value}\n')
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "hostWritable" in text and str(path) in text and "3" in text, text


def test_host_writable_reaches_the_exec_config(state_dir: Path) -> None:
    path = state_dir / "config.toml"
    path.write_text('[tools.exec]\nhostWritable = ["~/.cache", "/srv/build"]\n')
    os.chmod(path, 0o600)
    assert load_config(path).exec.host_writable == ["~/.cache", "/srv/build"]


def test_a_path_entry_outside_the_home_that_any_but_root_can_change_is_dropped(
    state_dir: Path, tmp_path: Path
) -> None:
    """round 6 l's ~/bin/ssh, outside the home: a PATH directory an allowlisted writer can fill is no
    directory a host command (or its decision) finds programs in."""
    from engine.commands.hostenv import host_path

    home_bin = Path.home() / "bin"
    agent_bin = tmp_path / "bin"  # under /tmp, which everyone may write
    agent_bin.mkdir()
    assert host_path(f"{agent_bin}:{home_bin}:/usr/bin", [str(agent_bin)]) == f"{home_bin}:/usr/bin"
