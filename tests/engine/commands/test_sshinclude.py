"""What hostview names of the operator's ssh config is at least what asyncssh itself opens: each config
below is loaded by asyncssh's own parser, recording every file it parses, and compared (round 10 d)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from engine.commands import hosttrust

CASES = [
    {"config": '"Include" {x}\n'},
    {"config": "Include config.d/*\n", "config.d/.team": "Include {x}\n"},
    {"config": "Include config.d/team.conf # was {x}\n"},
    {"config": "Include config.d/**/*.conf\n", "config.d/team/a/b.conf": "Include {x}\n"},
    {"config": "Include={x}\n"},
    {"config": "Host other\n  Include {x}\n"},
]


def _asyncssh_parses(home: Path) -> set[str]:
    import asyncssh.config as sshconfig

    class Recorder(sshconfig.SSHClientConfig):
        read: ClassVar[list[str]] = []

        def parse(self, path: Path) -> None:
            Recorder.read.append(str(path))
            super().parse(path)

    args: Any = ("local", "user", "other", 22)
    Recorder.load(None, [home / ".ssh" / "config"], False, False, False, *args)
    return set(Recorder.read)


@pytest.mark.parametrize(
    "lines", CASES, ids=["quoted", "dotfile-glob", "comment", "recursive", "equals", "host"]
)
def test_every_file_asyncssh_parses_is_named(
    tmp_path: Path, lines: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # the home host views protect
    target = tmp_path / "dots" / "extra.conf"
    target.parent.mkdir()
    target.write_text("# the operator's\n")
    for name, text in lines.items():
        path = home / ".ssh" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(x=target))
    parsed = _asyncssh_parses(home)
    assert str(target) in parsed, parsed
    named = {str(Path(p)) for p in hosttrust.ssh_files(str(home))}
    kept = [d.rstrip("/") + "/" for d in hosttrust.ssh_dirs(str(home))]  # read-only whole, every file
    missed = {p for p in parsed if p not in named and not any(p.startswith(d) for d in kept)}
    assert not missed, missed
