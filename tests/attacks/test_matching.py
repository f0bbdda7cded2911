"""Issue 9 items 8, 15, 16, 18–21: matching rules an agent could bend to run what nobody allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import ExecHostError
from tests.attacks.harness import ALLOWLIST, attempt, refused, tool
from tests.helpers.gateway import cli, write_config


async def test_empty_arg_pattern_means_no_arguments(state_dir: Path, tmp_path: Path) -> None:
    """Item 8: `--arg-pattern ''` stored no pattern, so `touch ANYTHING` ran."""
    marker = tmp_path / "pwned"
    write_config(state_dir, ALLOWLIST)
    args = ("allowlist", "add", "/usr/bin/touch", "--agent", "main", "--arg-pattern", "")
    added = cli(state_dir, "approvals", *args)
    assert added.returncode == 0, added.stderr
    details = await attempt(state_dir, f"touch {marker}", workdir=str(tmp_path))
    assert refused(details) and not marker.exists()
    # What the README promises: with no arguments it is allowed.
    done = await attempt(state_dir, "true", allow=[("/usr/bin/true", "")])
    assert done["status"] == "completed"


async def test_jq_is_refused_as_a_safe_bin_at_config_load(state_dir: Path) -> None:
    """Item 15, issue 18 part 5: `jq -n '$ ENV.X'` read the environment (only `$ENV` was blocked). jq is a
    language whose reach grows with each release, so OpenClaw no longer treats it as a safe bin and neither
    do we: the config that names it is refused (file, key, line), so no gateway runs on it."""
    config = ALLOWLIST + 'safeBins = ["jq", "head"]\n'
    for program in ("$ ENV.SECRET_X", "$ENV.SECRET_X", "$__loc__", "$ #c\nENV", "env.SECRET_X"):
        with pytest.raises(
            ExecHostError, match=r"config.toml:5: .*safeBins.*'jq' runs code .* never be a safe bin"
        ):
            await attempt(state_dir, f"jq -n '{program}'", config=config, env={"SECRET_X": "hunter2"})


async def test_path_globs_are_case_sensitive(state_dir: Path, tmp_path: Path) -> None:
    """Item 16: `/tools/*` matched `/TOOLS/evil.sh` on a case-sensitive file system."""
    marker = tmp_path / "pwned"
    tool(tmp_path / "tools" / "ok.sh")
    evil = tool(tmp_path / "TOOLS" / "evil.sh", f"#!/bin/sh\ntouch {marker}\n")
    details = await attempt(state_dir, str(evil), allow=[(f"{tmp_path}/tools/*", None)])
    assert refused(details) and not marker.exists()


async def test_tilde_is_the_operators_home_not_the_processes(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 18: `~` in a pattern followed whatever $HOME the gateway (or command) had."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("OPENCLAW_HOME", str(tmp_path / "operator"))
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(tmp_path / "elsewhere"))  # the home host views protect
    evil = tool(tmp_path / "elsewhere" / "bin" / "run", f"#!/bin/sh\ntouch {marker}\n")
    details = await attempt(state_dir, str(evil), allow=[("~/bin/run", None)])
    assert refused(details) and not marker.exists()
    mine = tool(tmp_path / "operator" / "bin" / "run")
    # The operator vouches that `run` takes no code from its tree (the gateway's cwd is writable).
    tree_safe = ALLOWLIST + 'treeSafe = ["run"]\n'
    assert (await attempt(state_dir, str(mine), config=tree_safe))["status"] == "completed"


async def test_safe_bins_never_follow_or_expand(state_dir: Path, tmp_path: Path) -> None:
    """Item 19: `tail -f` never ends and `${…}` in a quoted argument must ask."""
    for command in ("tail -f", "tail -F", "tail --follow=name", "tr a '${HOME}'", "head -n '${X}'"):
        details = await attempt(state_dir, command)
        assert refused(details), (command, details)


async def test_shells_can_never_be_safe_bins(state_dir: Path, tmp_path: Path) -> None:
    """Item 19: a shell or interpreter configured as a safe bin would run any code unasked (the config
    is refused, naming file, key and line, so no gateway runs on it)."""
    marker = tmp_path / "pwned"
    for name in ("bash", "sh", "python3", "perl", "node", "xargs"):
        with pytest.raises(ExecHostError, match=rf"'{name}' runs code .* can never be a safe bin"):
            config = ALLOWLIST + f'safeBins = ["{name}"]\n'
            await attempt(state_dir, f"{name} -c 'touch {marker}'", config=config)
    assert not marker.exists()


async def test_nohup_is_not_a_transparent_wrapper(state_dir: Path, tmp_path: Path) -> None:
    """Item 20: `nohup` writes nohup.out into the cwd; unwrapping it hid a write nobody allowed."""
    details = await attempt(state_dir, "nohup true", allow=[("/usr/bin/true", None)], workdir=str(tmp_path))
    assert refused(details)
    assert not (tmp_path / "nohup.out").exists()


async def test_uppercase_enums_grant_nothing(state_dir: Path, tmp_path: Path) -> None:
    """Item 21: `security = "FULL"` was accepted and granted full."""
    marker = tmp_path / "pwned"
    for config in (
        '[tools.exec]\nhost = "gateway"\nsecurity = "FULL"\nask = "off"\n',
        '[tools.exec]\nhost = "gateway"\nsecurity = "Full"\nask = "off"\n',
        '[tools.exec]\nhost = "gateway"\nsecurity = " full"\nask = "off"\n',
    ):
        with pytest.raises(ExecHostError, match=r"config\.toml:3: tools\.exec\.security: invalid value"):
            await attempt(state_dir, f"touch {marker}", config=config)
    assert not marker.exists()
    # In the approvals file an invalid value is masked (never the broader neighbour), and kept.
    (state_dir / "exec-approvals.json").write_text(
        '{"version": 1, "defaults": {"security": "deny"}, "agents": {"main": {"security": "FULL"}}}'
    )
    (state_dir / "exec-approvals.json").chmod(0o600)
    full = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
    with pytest.raises(ExecHostError, match=r"exec denied: host=gateway security=deny"):
        await attempt(state_dir, f"touch {marker}", config=full)
    assert not marker.exists()
    assert '"FULL"' in (state_dir / "exec-approvals.json").read_text()
