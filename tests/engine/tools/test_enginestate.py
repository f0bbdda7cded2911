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


# The cache of the names the mount table gives (enginestate._Aliases): each scenario runs in a mount
# namespace of its own (unshare --propagation private), so another test's mounts cannot fire the kernel's
# event between two calls here and every "kept" below is exact (and /run, /var/lib hidden: `_env`).
def _in_own_namespace(scenario: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[3])
    code = f"from tests.engine.tools import test_enginestate as t; t.{scenario}({str(tmp_path)!r})"
    env = {**os.environ, "PYTHONPATH": root}
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _run(*argv: str) -> None:
    import subprocess

    subprocess.run(argv, check=True)


def _env(tmp: Path) -> dict[str, str]:
    """The scenario's environment: its engine dirs in its own home, and the machine's hidden (empty tmpfs
    over /run and /var/lib, in this namespace only), so another test's containers starting (/run/runc made)
    do not change the dirs found between two calls here."""
    for shared in ("/run", "/var/lib"):
        _run("mount", "-t", "tmpfs", "tmpfs", shared)
    return {"HOME": str(tmp / "h"), "DOCKER_HOST": "unix:///nonexistent.sock"}


def _kept(env: dict[str, str]) -> tuple[str, ...]:
    """state_dirs, asserting it was answered from the cache (the mount table not read again)."""
    fills = enginestate._ALIASES.fills
    found = enginestate.state_dirs(env)
    assert enginestate._ALIASES.fills == fills, "nothing changed, yet the mount table was read again"
    return found


def _bind_and_tmpfs(tmp: str) -> None:
    t = Path(tmp)
    env, engine, bound = _env(t), t / "h/.local/share/docker", t / "bound"
    engine.mkdir(parents=True)
    bound.mkdir()
    first = enginestate.state_dirs(env)
    assert str(engine) in first and str(bound) not in first
    assert _kept(env) == first
    _run("mount", "--bind", str(engine), str(bound))  # (a second name for the engine's records)
    # a forked child asking too (it shares the fd's open file, whose poll state is the kernel's once-only
    # event): it must not take the parent's event
    pid = os.fork()
    if pid == 0:
        try:
            enginestate.state_dirs(env)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    second = enginestate.state_dirs(env)
    assert str(bound) in second, second
    assert _kept(env) == second
    _run("mount", "-t", "tmpfs", "tmpfs", str(bound))  # (mounted over: that name no longer shows them)
    assert str(bound) not in enginestate.state_dirs(env)
    _run("umount", str(bound))
    assert str(bound) in enginestate.state_dirs(env)
    _run("umount", str(bound))
    assert str(bound) not in enginestate.state_dirs(env)
    # a dir made between two calls, with no mount at all: by its name, at the next call
    (t / "h/.local/share/containers").mkdir()
    assert str(t / "h/.local/share/containers") in enginestate.state_dirs(env)


def _rename_the_points_parent(tmp: str) -> None:
    t = Path(tmp)
    env, engine, old, new = _env(t), t / "h/.local/share/docker", t / "m/a", t / "m/b"
    engine.mkdir(parents=True)
    (old / "bound").mkdir(parents=True)
    _run("mount", "--bind", str(engine), str(old / "bound"))
    assert str(old / "bound") in enginestate.state_dirs(env)
    assert str(old / "bound") in _kept(env)
    os.rename(old, new)  # (no mount event: only the mount point's name changed)
    found = enginestate.state_dirs(env)
    assert str(new / "bound") in found and str(old / "bound") not in found, found
    (old / "bound").mkdir(parents=True)  # (a plain dir made under the old name: not the engine's)
    found = enginestate.state_dirs(env)
    assert str(new / "bound") in found and str(old / "bound") not in found, found


def _rename_the_sources_parent(tmp: str) -> None:
    t = Path(tmp)
    env, engine, src = _env(t), t / "h/.local/share/docker", t / "src"
    engine.mkdir(parents=True)
    (src / "docker").mkdir(parents=True)
    _run("mount", "--bind", str(src / "docker"), str(engine))  # (a disk's dir bound at the engine's name)
    assert str(src / "docker") in enginestate.state_dirs(env)
    assert str(src / "docker") in _kept(env)
    os.rename(src, t / "src2")  # (no mount event: the bind's root is another name now)
    found = enginestate.state_dirs(env)
    assert str(t / "src2/docker") in found and str(src / "docker") not in found, found


@pytest.mark.skipif(os.geteuid() != 0, reason="makes mounts in a mount namespace of its own")
@pytest.mark.parametrize(
    "scenario", ["_bind_and_tmpfs", "_rename_the_points_parent", "_rename_the_sources_parent"]
)
def test_the_cached_names_see_what_changed_between_two_calls(tmp_path: Path, scenario: str) -> None:
    """The mount table is read once and kept until the kernel says it changed (a bind made, a tmpfs over
    it, each unmounted); the names it gives are kept until one no longer resolves to what it did (a mount
    point's parent renamed, a bind's source dir renamed: no mount event for either); a dir made is seen by
    its name; and a forked child asking does not take the parent's event."""
    _in_own_namespace(scenario, tmp_path)
