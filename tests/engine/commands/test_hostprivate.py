"""Every agent's own /tmp (and the like) in its host view: engine.commands.hostprivate, through real
gateway runs. The suite's stand-in for /tmp is a dir of the test's own (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.commands import hostprivate
from engine.config.loader import ConfigError, load_config
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, write_config

pytestmark = needs_bwrap

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


def _shared() -> Path:
    return Path(os.environ[hostprivate.DEFAULT_ENV])


async def test_each_agent_has_its_own_and_the_operators_is_not_reachable(state_dir: Path) -> None:
    shared = _shared()
    (shared / "operators").write_text("OPERATOR-FILE\n")
    main = await attempt(state_dir, f"echo MAIN > {shared}/f; ls -a {shared}", config=FULL)
    assert main["status"] == "completed", main
    assert "operators" not in main["_text"], main
    ops = await attempt(state_dir, f"cat {shared}/f; ls -a {shared}", config=FULL, agent="ops")
    assert "MAIN" not in ops["_text"] and "operators" not in ops["_text"], ops
    assert not (shared / "f").exists()  # nothing lands in the host's
    again = await attempt(state_dir, f"cat {shared}/f", config=FULL)  # kept across runs of one agent
    assert "MAIN" in again["_text"], again
    top = Path(hostprivate.agent_dir(str(state_dir), "main"))
    assert (top.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o700 for p in top.iterdir())


async def test_a_workdir_in_a_private_dir_is_the_agents_own_copy(state_dir: Path) -> None:
    shared = _shared()
    made = await attempt(state_dir, f"mkdir -p {shared}/proj && echo OWN > {shared}/proj/f", config=FULL)
    assert made["status"] == "completed", made
    (shared / "proj").mkdir()  # the host's /tmp/proj, the operator's: never where the run is
    (shared / "proj" / "f").write_text("HOSTS\n")
    run = await attempt(
        state_dir,
        "pwd; cat f; python3 -c 'import os; print(os.getcwd())'; echo more > g",
        config=FULL,
        workdir=f"{shared}/proj",
    )
    assert run["status"] == "completed", run
    assert run["_text"].split() == [f"{shared}/proj", "OWN", f"{shared}/proj"], run["_text"]
    assert not (shared / "proj" / "g").exists()
    # another agent naming the same workdir gets its own (it has none: the $HOME fallback, with its warning)
    other = await attempt(state_dir, "pwd; cat f", config=FULL, agent="ops", workdir=f"{shared}/proj")
    assert "OWN" not in other["_text"] and "HOSTS" not in other["_text"], other


async def test_what_the_view_binds_under_a_private_dir_stays_bound(state_dir: Path) -> None:
    """The home (here under the stand-in's parent, as HOME is under /tmp in tests) and the state dir's
    cover are bound on top of the private copy: privatising /tmp's parent shows the home still."""
    root = state_dir.parent
    config = FULL + f'hostPrivate = ["{root}"]\n'
    (Path(os.environ["HOME"]) / "note").write_text("HOME-FILE\n")
    (state_dir / "secret").write_text("STATE-SECRET\n")
    run = await attempt(
        state_dir,
        f"cat $HOME/note; cat {state_dir}/secret; ls {root}",
        config=config,
        workdir=os.environ["HOME"],
    )
    assert "HOME-FILE" in run["_text"] and "STATE-SECRET" not in run["_text"], run


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('["tmp"]', "not an absolute directory"),
        ('["/"]', "is /"),
        ('["/tmp/../etc"]', "`..`"),
        ('"x"', "list"),
    ],
)
def test_host_private_is_checked(state_dir: Path, value: str, message: str) -> None:
    (state_dir / "config.toml").write_text(f"[tools.exec]\nhostPrivate = {value}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(state_dir / "config.toml")


def test_the_default_and_variables(tmp_path: Path) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir()
    env = {"XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path)}
    found = hostprivate.dests(None, env)
    assert str(runtime) in found and "/tmp" in found and "/" not in found
    assert hostprivate.dests(["$NOPE", "/nonexistent-dir"], env) == ()
    assert hostprivate.dests(None, {**env, hostprivate.DEFAULT_ENV: str(runtime)}) == (str(runtime),)
    odd = hostprivate.agent_dir("/s", "../x")
    assert os.path.dirname(odd) == "/s/hostprivate" and ".." not in odd


async def test_the_gateways_tmpdir_in_a_private_dir_is_there_in_the_agents_copy(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmpdir = _shared() / "op-tmp"  # the gateway's TMPDIR, a dir in /tmp the run's copy has not got
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    run = await attempt(state_dir, "mktemp", config=FULL)
    assert run["status"] == "completed" and run["_text"].startswith(f"{tmpdir}/tmp."), run
    assert not tmpdir.exists()


def test_the_accounts_runtime_dir_is_private_without_xdg_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    runtime = f"/run/user/{os.geteuid()}"
    monkeypatch.setattr(os.path, "isdir", lambda p: p == runtime)
    monkeypatch.setattr(os.path, "realpath", lambda p: p)
    assert hostprivate.dests(None, {}) == (runtime,)
    assert hostprivate.dests(["$XDG_RUNTIME_DIR"], {}) == (runtime,)
    assert hostprivate.dests([], {}) == ()


async def test_the_operators_call_naming_no_agent_has_its_own_places(state_dir: Path) -> None:
    """An operator's exec naming no agent is decided by main's policy in the operator's own /tmp copy
    (hostprivate.OPERATOR); one naming main acts for main, in main's."""
    shared = _shared()
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            own = await operator.request("exec", {"command": f"echo OWN > {shared}/f"})
            acting = await operator.request("exec", {"command": f"cat {shared}/f", "agentId": "main"})
            again = await operator.request("exec", {"command": f"cat {shared}/f"})
        finally:
            await operator.close()
    assert own["details"]["exitCode"] == 0, own
    assert "OWN" not in acting["text"], acting
    assert "OWN" in again["text"], again  # kept across the operator's own runs
    top = Path(hostprivate.agent_dir(str(state_dir), hostprivate.OPERATOR))
    assert list(top.rglob("f")) and (top.stat().st_mode & 0o777) == 0o700
    assert not list(Path(hostprivate.agent_dir(str(state_dir), "main")).rglob("f"))
