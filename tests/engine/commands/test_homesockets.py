"""engine.commands.homesockets (from sock29): which of the operator's sockets in the home the host view
covers, found from the kernel's table of bound sockets (a file of that table's shape here), never by
walking the home."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import homesockets

HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n"


def _table(tmp: Path, *paths: str) -> str:
    row = "0000000000000000: 00000002 00000000 00010000 0001 01 {} {}\n"
    rows = [row.format(1000 + i, p) for i, p in enumerate(paths)]
    table = tmp / "unix"
    table.write_text(HEADER + "".join(rows))
    return str(table)


@pytest.fixture
def bound() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def _bind(path: Path, socks: list[socket.socket]) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    socks.append(s)
    return path


def test_every_socket_in_a_dir_holding_a_bound_one_is_found_whatever_its_name(
    tmp_path: Path, bound: list[socket.socket]
) -> None:
    """ssh binds a ControlPath at a temporary name and links it to its own: the table names the temporary
    one, the directory is read for every socket this account owns there."""
    home = tmp_path / "home"
    cm = home / ".cache" / "ssh"
    cm.mkdir(parents=True)
    temp = _bind(cm / "cm.tmp123", bound)
    os.link(temp, cm / "cm-node")
    os.unlink(temp)
    (cm / "notes").write_text("a file")
    table = _table(tmp_path, str(temp), "@/tmp/.X11-unix/X0")
    found = homesockets.home_sockets(str(home), [], table)
    assert found == [str(cm / "cm-node")]


def test_a_socket_outside_the_home_is_left(tmp_path: Path, bound: list[socket.socket]) -> None:
    """Outside the home /tmp and the like are each agent's own (hostprivate): not this module's."""
    home = tmp_path / "home"
    home.mkdir()
    other = _bind(tmp_path / "db.sock", bound)
    (tmp_path / "home2").mkdir()
    beside = _bind(tmp_path / "home2" / "x.sock", bound)  # a directory whose name starts as the home's
    table = _table(tmp_path, str(other), str(beside))
    assert homesockets.home_sockets(str(home), [], table) == []


def test_the_kept_dirs_keep_their_sockets(tmp_path: Path, bound: list[socket.socket]) -> None:
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)
    mine = _bind(work / "app.sock", bound)
    table = _table(tmp_path, str(mine))
    assert homesockets.home_sockets(str(home), [str(work)], table) == []
    assert homesockets.home_sockets(str(home), [], table) == [str(mine)]


def test_a_home_reached_through_a_link_is_matched_by_real_path(
    tmp_path: Path, bound: list[socket.socket]
) -> None:
    real = tmp_path / "real"
    (real / ".ssh").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    sock = _bind(tmp_path / "link" / ".ssh" / "cm", bound)  # bound by the link's name
    table = _table(tmp_path, str(sock))
    assert homesockets.home_sockets(str(real), [], table) == [str(real / ".ssh" / "cm")]


def test_the_real_table_lists_a_socket_bound_now(tmp_path: Path, bound: list[socket.socket]) -> None:
    """What changes the kept view's key: a socket bound now is in the kernel's table at once."""
    path = _bind(tmp_path / "now.sock", bound)
    assert str(path) in homesockets.bound_paths()
    assert homesockets.view_ops("/e", [str(path)]) == ["--ro-bind", "/e", str(path)]
