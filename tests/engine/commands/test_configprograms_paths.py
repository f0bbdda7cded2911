from pathlib import Path

from engine.commands import configprograms


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
