"""The container engines' state dirs every host view covers (engine.tools.enginestate)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.tools import enginestate


def test_the_engines_own_data_root_is_covered() -> None:
    """The dir the engine on the local socket reports (`docker info`'s DockerRootDir) is among them, read
    from its process, not assumed."""
    from engine.sandbox import docker_ops

    try:
        root = docker_ops.client().info()["DockerRootDir"]
    except Exception as exc:  # (no engine here: nothing to compare)
        pytest.skip(f"no Docker engine: {exc}")
    if not os.path.isdir(root):
        pytest.skip(f"{root} is not reachable by this account")
    assert os.path.realpath(root) in enginestate.state_dirs()


def test_a_rootless_engines_dirs_in_the_home_are_covered_and_the_home_never(tmp_path: Path) -> None:
    (tmp_path / ".local/share/docker").mkdir(parents=True)
    (tmp_path / ".local/share/containers").mkdir(parents=True)
    found = enginestate.state_dirs({"HOME": str(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert str(tmp_path / ".local/share/docker") in found
    assert str(tmp_path / ".local/share/containers") in found
    assert str(tmp_path) not in found and "/" not in found
    assert all(os.path.isdir(d) for d in found)  # (missing ones are never made)


def test_the_daemons_flags_are_read_as_go_flags_read_them() -> None:
    argv = ["dockerd", "--data-root", "/srv/a", "--exec-root=/srv/run", "-g", "/srv/b", "--config-file", "/c"]
    names = {"--data-root": "data-root", "-g": "data-root", "--exec-root": "exec-root", "--config-file": "cf"}
    assert enginestate._flags(argv, names) == {"data-root": "/srv/b", "exec-root": "/srv/run", "cf": "/c"}


@pytest.mark.skipif(os.geteuid() != 0, reason="makes bind mounts")
@pytest.mark.parametrize("known", ["source", "bind"])
def test_an_engine_dir_under_a_second_name_is_covered_by_its_mounts(tmp_path: Path, known: str) -> None:
    """By the mount table's device and root, not the name (fresh round 17 a): the engine's disk bound
    under the operator's own name (`known` = source: the engine's name is the tree, the bind another), and
    the common recipe, a bigger disk's dir bound at the engine's name (`known` = bind: the dir under the
    bigger disk's own name holds the same files); a dir that is merely alike is not covered."""
    import ctypes
    import subprocess

    data, bound, alike = tmp_path / "data", tmp_path / "bound", tmp_path / "alike"
    for d in (data, bound, alike):
        d.mkdir()
    (data / "containers").mkdir()
    subprocess.run(["mount", "--bind", str(data), str(bound)], check=True)
    try:
        named = str(data) if known == "source" else str(bound)
        other = str(bound) if known == "source" else str(data)
        names = enginestate._other_names([named])
        assert other in names, names
        assert str(alike) not in names and named not in names, names
    finally:
        ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(str(bound)), 2)


def test_a_mount_points_escapes_are_decoded() -> None:
    assert enginestate._unescape("/srv/my\\040docker\\134x") == "/srv/my docker\\x"
