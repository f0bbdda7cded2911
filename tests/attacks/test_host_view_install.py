"""Fresh round 8 q (attacker q's test, copied here): the host view kept engine/ and the venv read-only
(two dirnames up from hostview.py) and an allowlisted `tee` wrote the gateway's runner/ package, which the
next gateway, the operator's CLI and console import outside any view. Everything the gateway's Python
imports from is read-only in every view, read from the running interpreter; the variants below are places
no fixed list named: a sys.path dir outside the home, a dir a .pth file adds (missing until a run makes
it), a hostWritable dir below an import dir."""

from __future__ import annotations

import os
import secrets
import site
import subprocess
import sys
from pathlib import Path

import pytest

from engine.commands import hostoutside, hostroots, hosttrust, hostview
from engine.commands.pinned import pinned_view
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap


def _run(script: str, outside: hostoutside.Outside = hostoutside.NOTHING_OUTSIDE) -> str:
    view = pinned_view(None, host=True, outside=outside)
    try:
        argv = view.wrap(["/bin/sh", "-c", script])
        done = subprocess.run(argv, capture_output=True, text=True, check=False, pass_fds=view.fds)
    finally:
        view.close()
    return done.stdout + done.stderr


def _checkout_root() -> Path:
    return Path(hostview.__file__).resolve().parents[2]


@needs_bwrap
def test_the_checkout_root_console_and_the_interpreter_are_read_only(state_dir: Path) -> None:
    """The checkout root (first on the systemd unit's sys.path), console/, and the interpreter's own
    file and base prefix: a full run writes none of them."""
    name = f"zz_round8_{secrets.token_hex(6)}"
    targets = [
        _checkout_root() / f"{name}.py",
        _checkout_root() / "console" / f"{name}.py",
        Path(os.path.realpath(sys.base_prefix)) / name,
    ]
    script = (
        "; ".join(f"touch {t} 2>/dev/null" for t in targets) + f"; echo >> {os.path.realpath(sys.executable)}"
    )
    try:
        out = _run(script + " 2>&1; echo done")
        assert "done" in out, out
        assert [t for t in targets if t.exists()] == []
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


@needs_bwrap
def test_a_sys_path_dir_outside_the_home_is_read_only(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dir the gateway imports from that no fixed name covers (PYTHONPATH, a plugin dir)."""
    extra = tmp_path / "plugins"
    extra.mkdir()
    monkeypatch.syspath_prepend(str(extra))
    out = _run(f"echo x > {extra}/json.py 2>&1; echo done")
    assert "done" in out and not (extra / "json.py").exists(), out


@needs_bwrap
def test_a_missing_dir_a_pth_file_adds_is_made_and_read_only(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """site skips a .pth line's missing dir at start and imports from it once it exists: the view makes
    it (empty) and binds it read-only, so no run can make it first."""
    sitedir = tmp_path / "site"
    sitedir.mkdir()
    added = tmp_path / "added-later"
    (sitedir / "extra.pth").write_text(f"# a comment\nimport os\n{added}\n")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(sitedir)])
    assert str(added) in hosttrust.import_paths()
    out = _run(f"mkdir -p {added} && echo x > {added}/json.py 2>&1; echo done")
    assert "done" in out and not (added / "json.py").exists(), out
    out = _run(f"echo x > {sitedir}/evil.pth 2>&1; echo done")
    assert not (sitedir / "evil.pth").exists(), out


def test_a_host_writable_dir_inside_an_import_dir_is_refused(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hostWritable may hold no import dir (refused before) and may not be below one either: a module
    written there is imported as the rest of the dir is."""
    home = Path.home()
    lib = home / "lib"
    (lib / "proj").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(lib))
    with pytest.raises(hostoutside.HostViewError, match="hostWritable names"):
        hostroots.writable_roots(str(state_dir), outside=hostoutside.Outside(writable=(str(lib / "proj"),)))
    with pytest.raises(hostoutside.HostViewError, match="hostWritable names"):
        hostroots.writable_roots(str(state_dir), outside=hostoutside.Outside(writable=(str(home),)))


def test_an_import_dir_every_run_may_write_refuses_the_view(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import dir that is world-writable (or `/`) cannot be kept read-only without taking it from
    every run: the view is refused, naming it, rather than run with it writable."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.syspath_prepend(str(shared))
    with pytest.raises(hostoutside.HostViewError, match="imports code from"):
        hostview.view_args(str(state_dir))


def test_the_import_path_cache_follows_what_it_read(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """import_paths is cached by what it read: a .pth file added, then edited in place, and a sys.path
    entry added are each seen on the next call."""
    sitedir = tmp_path / "site"
    sitedir.mkdir()
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(sitedir)])
    before = hosttrust.import_paths()
    assert hosttrust.import_paths() == before
    (sitedir / "a.pth").write_text(f"{tmp_path / 'one'}\n")
    assert str(tmp_path / "one") in hosttrust.import_paths()
    (sitedir / "a.pth").write_text(f"{tmp_path / 'one'}\n{tmp_path / 'two'}\n")
    assert str(tmp_path / "two") in hosttrust.import_paths()
    monkeypatch.syspath_prepend(str(tmp_path / "three"))
    assert str(tmp_path / "three") in hosttrust.import_paths()


@needs_bwrap
async def test_the_gateways_import_path_outside_the_home_takes_no_sitecustomize(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attackR's test_the_gateways_import_path_outside_the_home_is_not_writable (fresh round 8 r): a
    PYTHONPATH dir outside the home, where an allowlisted `cp` planted a sitecustomize.py that the next
    gateway-side Python ran."""
    lib = tmp_path / "opt-lib"  # e.g. PYTHONPATH=/opt/team/lib (a `module load`), owned by the operator
    lib.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(lib))
    monkeypatch.syspath_prepend(str(lib))  # as the gateway started with that PYTHONPATH has it
    marker = tmp_path / "sitecustomize-ran"
    payload = tmp_path / "scratch" / "sitecustomize.py"
    payload.parent.mkdir()
    payload.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    plant = await attempt(state_dir, f"cp {payload} {lib}/", allow=[("/usr/bin/cp", None)])
    assert plant["status"] in ("completed", "failed"), plant
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ}, check=True)
    assert not marker.exists(), "the agent's code ran in the next gateway-side Python"


@needs_bwrap
async def test_the_gateways_path_dir_outside_the_home_is_read_only(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attackR's test_the_gateways_path_dir_outside_the_home_is_not_writable (fresh round 8 r): a dir on
    the gateway's own PATH outside the home (Linuxbrew's bin) was only dropped from host runs' PATH; an
    allowlisted `cp` put the agent's `git` first for the operator's next git."""
    tools = tmp_path / "linuxbrew" / "bin"
    tools.mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    payload = tmp_path / "scratch" / "git"
    payload.parent.mkdir()
    payload.write_text('#!/bin/sh\nexec /usr/bin/git "$@"\n')
    payload.chmod(0o755)
    plant = await attempt(state_dir, f"cp {payload} {tools}/git", allow=[("/usr/bin/cp", None)])
    assert plant["status"] in ("completed", "failed"), plant
    assert not (tools / "git").exists(), "the operator's next `git` is the agent's"
