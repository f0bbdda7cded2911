"""No directory inside a run's read-only layer is fixed in place by a bind of the host's (fresh round 16 a):
a layer puts every mount below it back on top, so a `--bind D D` there made D's tree the host's again."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.commands import homelayer, hostview


def test_a_directory_a_layer_holds_needs_no_bind() -> None:
    fixed = ["/opt/team", "/opt/team/tools", "/srv/a", "/tmp/x"]
    assert homelayer.outside_layers(fixed, ["/opt", "/usr"], []) == ["/srv/a", "/tmp/x"]
    assert homelayer.outside_layers(fixed, [], []) == fixed  # no layers (no helper): every one bound


def test_one_inside_what_is_put_back_over_its_layer_keeps_its_bind() -> None:
    """A writable root, a private dir, a cover or a host mount below the layer is put back as it is,
    possibly writable: a directory inside one can still be renamed, so it stays fixed."""
    fixed = ["/opt/w/a", "/opt/w", "/opt/m/b", "/opt/other"]
    kept = homelayer.outside_layers(fixed, ["/opt"], ["/opt/w", "/opt/m"])
    assert kept == ["/opt/w/a", "/opt/w", "/opt/m/b"]  # (one itself put back: bound as it was)
    # a host mount that is a layer of its own (innermost) holds what is in it read-only
    assert homelayer.outside_layers(["/opt/m/b"], ["/opt", "/opt/m"], ["/opt/m"]) == []


@pytest.fixture
def opt_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state dir in /opt, its directory fixed in place (a root gateway may rename in /opt)."""
    if not os.access("/opt", os.W_OK):
        pytest.skip("needs /opt writable (root)")
    team = Path(tempfile.mkdtemp(prefix="ehf-", dir="/opt"))
    home = Path(tempfile.mkdtemp(prefix="ehf-", dir="/tmp"))
    try:
        team.chmod(0o755)
        (team / "s").mkdir(mode=0o700)
        monkeypatch.setenv("OPENCLAW_STATE_DIR", str(team / "s"))
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))
        yield team / "s"
    finally:
        shutil.rmtree(team)
        shutil.rmtree(home)


def _binds_of(ops: list[str], path: str) -> list[str]:
    return [ops[i] for i in range(len(ops) - 2) if ops[i] == "--bind" and ops[i + 2] == path]


def test_the_view_binds_no_fixed_ancestor_inside_the_runs_layers(opt_state: Path) -> None:
    team = str(opt_state.parent)
    assert _binds_of(hostview.view_args(str(opt_state)), team) == ["--bind"]  # fixed: no layers
    assert _binds_of(hostview.view_args(str(opt_state), layers=["/opt"]), team) == []
    # a layer elsewhere leaves it bound
    assert _binds_of(hostview.view_args(str(opt_state), layers=["/usr"]), team) == ["--bind"]


def test_the_kept_views_operations_are_made_for_its_runs_layers(opt_state: Path) -> None:
    """run_layers (as kept_prefix finds them first) layers /opt: the kept view binds nothing there."""
    layers = hostview.run_layers(str(opt_state), kept=True)
    if "/opt" not in layers:
        pytest.skip("no helper, or /opt not a layer on this machine")
    ops = hostview.view_args(str(opt_state), sockets=False, layers=layers)
    assert _binds_of(ops, str(opt_state.parent)) == []
