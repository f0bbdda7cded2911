"""The host view keeps what the gateway and the operator run by path: the programs their configs name
(engine.commands.configprograms) and the gateway's PATH dirs, present or not (fresh round 10 a)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.commands.pinned import pinned_view
from tests.helpers.bwrap import needs_bwrap


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    view = pinned_view(None, host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()


@needs_bwrap
def test_a_path_dir_that_is_a_dangling_link_is_made_where_it_points(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PATH names ~/bin-link -> /opt/tool/bin, not installed yet: the target is made and kept."""
    target = tmp_path / "opt" / "tool" / "bin"
    link = tmp_path / "tool-bin"
    link.symlink_to(target)
    monkeypatch.setenv("PATH", f"{link}:/usr/bin:/bin")
    _run(f"mkdir -p {target}; echo planted > {target}/git", tmp_path)
    assert target.is_dir() and not (target / "git").exists()


@needs_bwrap
def test_a_missing_program_an_ssh_proxy_command_names_is_not_made_by_a_run(
    state_dir: Path, tmp_path: Path
) -> None:
    """`ProxyCommand python3 /opt/team/proxy.py %h`, the script not there yet: made empty, read-only."""
    home = Path.home()
    script = tmp_path / "team" / "proxy.py"
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "config").write_text(f"Host *\n  ProxyCommand python3 {script} %h %p\n")
    done = _run(f"echo 'import os' > {script}; cat {script}; echo end", tmp_path)
    assert done.stdout.strip() == "end"
    assert script.read_text() == ""


@needs_bwrap
def test_the_linker_the_operators_cargo_config_names_is_read_only(state_dir: Path, tmp_path: Path) -> None:
    """`[target.*] linker = "/opt/team/ld"` in ~/.cargo/config.toml: the next cargo build runs it."""
    home = Path.home()
    linker = tmp_path / "team" / "ld"
    linker.parent.mkdir()
    linker.write_text('#!/bin/sh\nexec cc "$@"\n')
    (home / ".cargo").mkdir()
    (home / ".cargo" / "config.toml").write_text(f'[target.x86_64-unknown-linux-gnu]\nlinker = "{linker}"\n')
    done = _run(f"echo 'cat /etc/passwd' > {linker}; echo end", tmp_path)
    assert done.stdout.strip() == "end"
    assert "cc" in linker.read_text()
