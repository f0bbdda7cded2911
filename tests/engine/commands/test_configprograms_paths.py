import shutil
from pathlib import Path

import pytest

from engine.commands import configprograms

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_every_path_valued_git_setting_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    conf = tmp_path / "gitconfig"
    conf.write_text(
        "[init]\n\ttemplateDir = /opt/team/templates\n[core]\n\texcludesFile = ~/x/ignore\n"
        f"[safe]\n\tdirectory = /srv/repo\n[user]\n\tname = op\n[a]\n\tb = {tmp_path}\n[c]\n\td = /\n"
    )
    found = configprograms.git_paths([str(conf)], str(home))
    assert "/opt/team/templates" in found
    assert str(home / "x" / "ignore") in found
    assert "/srv/repo" not in found  # compared, never opened
    assert str(tmp_path) not in found and "/" not in found  # holds the home; the root


@needs_git
def test_the_listed_paths_follow_the_files_bytes(tmp_path: Path) -> None:
    """git_paths' reading is cached by the file's bytes (every host view asks): a change is read again."""
    config = tmp_path / "gitconfig"
    config.write_text("[init]\n\ttemplateDir = /opt/one\n")
    assert configprograms.git_paths([str(config)], "/h") == ["/opt/one"]
    assert configprograms.git_known([str(config)]) is False  # git_programs has not read it yet
    configprograms.git_programs([str(config)], "/h")
    assert configprograms.git_known([str(config)])
    config.write_text("[init]\n\ttemplateDir = /opt/two\n")
    assert not configprograms.git_known([str(config)])
    assert configprograms.git_paths([str(config)], "/h") == ["/opt/two"]
