"""The gateway tells whether /proc hides one account's processes from another (runner.gateway.procvisible)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.gateway import procvisible

LINE = "22 27 0:21 / /proc rw,relatime - proc proc {}\n"


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw", False),
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=2,gid=4", True),
        ("rw,hidepid=0", False),
        ("rw,subset=pid", False),
    ],
)
def test_hidepid_is_read_from_the_proc_mounts_options(tmp_path: Path, options: str, hides: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" + LINE.format(options))
    assert procvisible.hides_processes(str(info)) is hides


def test_no_proc_mount_hides_nothing(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert procvisible.proc_options(str(info)) is None
    assert not procvisible.hides_processes(str(info))


def test_this_machines_proc_is_read() -> None:
    assert procvisible.proc_options() is not None
