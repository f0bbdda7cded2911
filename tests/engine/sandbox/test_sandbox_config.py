"""Sandbox config resolution, names, hash, workdir mapping, validation texts, env and registry (no Docker)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import map_workdir
from engine.sandbox.registry import Registry, RegistryEntry, RegistryError, now_ms
from engine.sandbox.settings import (
    config_hash,
    container_name,
    layout,
    resolve_settings,
    scope_key,
    slugify,
    state_id,
)
from engine.sandbox.validate import (
    SandboxSecurityError,
    sanitize_container_env,
    validate_binds,
    validate_network,
    validate_profiles,
)
from engine.tools.exec import sandbox_available as sandboxed


def cfg(text: str):  # type: ignore[no-untyped-def]
    return load_config_text(text)


def test_slug_and_container_name_match_openclaw() -> None:
    assert slugify("agent:main") == "agent-main-f331f052e4ed92dd414c5847bd1a9266"
    settings = resolve_settings(None, "main")
    # OpenClaw's slug, after this install's id (two installs on one engine never share a name).
    assert (
        container_name(settings, "agent:main")
        == f"openclaw-sbx-{state_id()}-agent-ma-f331f052e4ed92dd414c5847bd1a9266"
    )
    long = slugify("X" * 80 + "!!")
    assert long.startswith("x" * 32 + "-") and len(long) == 65
    assert slugify("---").startswith("session-")
    assert slugify("a/b") != slugify("a:b")  # the hash suffix keeps distinct keys apart


def test_scope_keys() -> None:
    assert scope_key("session", "ops", "chan:42") == "chan:42"
    assert scope_key("agent", "ops", "chan:42") == "agent:ops"
    assert scope_key("shared", "ops", "chan:42") == "shared"


def test_mode_non_main_uses_main_session_key() -> None:
    config = cfg('[agents.defaults.sandbox]\nmode = "non-main"\n')
    assert not sandboxed(config, "main", "agent:main:main")
    assert not sandboxed(config, "main", "main")
    assert sandboxed(config, "main", "telegram:group:7")
    assert sandboxed(cfg('[agents.defaults.sandbox]\nmode = "all"\n'), "main", "main")
    assert not sandboxed(cfg(""), "main", "x")
    # One rule everywhere (issue 13): session keys compare case-insensitively, whatever the caller.
    assert not sandboxed(config, "main", " Agent:Main:MAIN ")


def test_agent_overrides_and_shared_scope_ignores_agent_docker() -> None:
    text = """
[agents.defaults.sandbox]
mode = "all"
[agents.defaults.sandbox.docker]
image = "img:global"
binds = ["/srv/a:/a:ro"]
env = { A = "1" }
[[agents.list]]
id = "ops"
[agents.list.sandbox]
workspaceAccess = "rw"
[agents.list.sandbox.docker]
image = "img:ops"
binds = ["/srv/b:/b"]
env = { B = "2" }
[[agents.list]]
id = "team"
[agents.list.sandbox]
scope = "shared"
[agents.list.sandbox.docker]
image = "img:team"
"""
    config = cfg(text)
    ops = resolve_settings(config, "ops")
    assert ops.docker.image == "img:ops"
    assert ops.docker.binds == ("/srv/a:/a:ro", "/srv/b:/b")  # concatenated
    assert ops.docker.env == {"LANG": "C.UTF-8", "A": "1", "B": "2"}
    assert ops.workspace_access == "rw"
    team = resolve_settings(config, "team")
    assert team.scope == "shared" and team.docker.image == "img:global"
    # hardened defaults the config does not spell out
    assert ops.docker.read_only_root and ops.docker.network == "none" and ops.docker.cap_drop == ("ALL",)
    assert ops.docker.pids_limit and ops.docker.ulimits["nofile"][1] > 0


def test_layout_by_workspace_access(state_dir: Path) -> None:
    base = '[agents.defaults.sandbox]\nmode="all"\nworkspaceAccess="{}"\n'
    none = layout(resolve_settings(cfg(base.format("none")), "main"), "main", "s")
    assert none.workspace_dir == none.sandbox_workspace and none.agent_mount is None
    ro = layout(resolve_settings(cfg(base.format("ro")), "main"), "main", "s")
    assert ro.workspace_dir == ro.sandbox_workspace and ro.agent_mount == ro.agent_workspace
    rw = layout(resolve_settings(cfg(base.format("rw")), "main"), "main", "s")
    assert rw.workspace_dir == rw.agent_workspace and rw.agent_mount is None
    shared = layout(resolve_settings(cfg(base.format("none") + 'scope="shared"\n'), "main"), "main", "s")
    assert shared.sandbox_workspace == str(state_dir / "sandboxes" / "shared")  # never the whole root
    assert shared.name == f"openclaw-sbx-{state_id()}-shared"


def test_config_hash_tracks_effective_config() -> None:
    a = resolve_settings(cfg('[agents.defaults.sandbox.docker]\ntmpfs=["/tmp","/run"]\n'), "main")
    b = resolve_settings(cfg('[agents.defaults.sandbox.docker]\ntmpfs=["/run","/tmp"]\n'), "main")
    c = resolve_settings(cfg('[agents.defaults.sandbox.docker]\ntmpfs=["/tmp","/run"]\n'), "main")
    lay = layout(a, "main", "s")
    assert config_hash(a, lay) == config_hash(c, lay)
    assert config_hash(a, lay) != config_hash(b, lay)  # array order matters (reference §6.3)
    d = resolve_settings(
        cfg('[agents.defaults.sandbox.docker]\ntmpfs=["/tmp","/run"]\npidsLimit=64\n'), "main"
    )
    assert config_hash(d, lay) != config_hash(a, lay)


def test_workdir_mapping_and_escapes(tmp_path: Path) -> None:
    settings = resolve_settings(cfg('[agents.defaults.sandbox]\nmode="all"\nworkspaceAccess="ro"\n'), "main")
    lay = layout(settings, "main", "s")
    os.makedirs(os.path.join(lay.workspace_dir, "sub", "deep"))
    os.makedirs(lay.agent_workspace, exist_ok=True)
    os.symlink("/etc", os.path.join(lay.workspace_dir, "evil"))
    os.symlink("sub", os.path.join(lay.workspace_dir, "fine"))
    assert map_workdir(None, settings, lay) == ("/workspace", [])
    assert map_workdir("/workspace/sub/deep", settings, lay) == ("/workspace/sub/deep", [])
    assert map_workdir("sub", settings, lay) == ("/workspace/sub", [])
    assert map_workdir("fine", settings, lay) == ("/workspace/fine", [])
    assert map_workdir("/agent", settings, lay) == ("/agent", [])
    assert map_workdir(os.path.join(lay.workspace_dir, "sub"), settings, lay) == ("/workspace/sub", [])
    for bad in (
        "..",
        "../..",
        "/workspace/../etc",
        "/etc",
        "sub/../../x",
        "evil",
        "/workspace/evil",
        "missing",
    ):
        cwd, warnings = map_workdir(bad, settings, lay)
        assert cwd == "/workspace", bad
        assert warnings == [f'Warning: workdir "{bad}" is unavailable; using "/workspace".']


BLOCKED_TAIL = (
    "Mounting system directories, credential paths, or Docker socket paths into sandbox containers is not "
    "allowed. Use project-specific paths instead (e.g. /home/user/myproject)."
)


@pytest.mark.parametrize(
    ("bind", "blocked"),
    [
        ("/var/run/docker.sock:/var/run/docker.sock", "/var/run"),
        ("/run/docker.sock:/d.sock", "/run"),
        ("/etc:/x:ro", "/etc"),
        ("/etc/passwd:/x", "/etc"),
        ("/proc:/p", "/proc"),
        ("/proc/1/root:/p", "/proc"),
        ("/dev/sda:/d", "/dev"),
        ("//etc//:/x", "/etc"),
        ("/tmp/../etc:/x", "/etc"),
    ],
)
def test_blocked_bind_sources(bind: str, blocked: str) -> None:
    with pytest.raises(SandboxSecurityError) as err:
        validate_binds([bind])
    assert (
        str(err.value)
        == f'Sandbox security: bind mount "{bind}" targets blocked path "{blocked}". {BLOCKED_TAIL}'
    )


def test_bind_of_root_and_credentials(state_dir: Path) -> None:
    with pytest.raises(SandboxSecurityError, match='covers blocked path "/"'):
        validate_binds(["/:/host"])
    home = os.environ["HOME"]
    with pytest.raises(SandboxSecurityError, match=r'targets blocked path ".*/\.ssh"'):
        validate_binds([f"{home}/.ssh:/keys:ro"])
    with pytest.raises(SandboxSecurityError, match=r"\.aws"):
        validate_binds([f"{home}/.aws/credentials:/c"])


def test_symlinked_parent_escape_even_when_leaf_missing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link").symlink_to("/etc")
    bind = f"{root}/link/not-there-yet:/data"
    with pytest.raises(SandboxSecurityError) as err:
        validate_binds([bind], [str(root)])
    assert 'targets blocked path "/etc"' in str(err.value)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "out").symlink_to(outside)
    with pytest.raises(SandboxSecurityError, match="is outside allowed roots"):
        validate_binds([f"{root}/out/new/leaf:/data"], [str(root)])


def test_binds_outside_allowed_roots_and_overrides(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    validate_binds([f"{root}/sub:/data"], [str(root)])
    bind = "/srv/data:/data"
    with pytest.raises(SandboxSecurityError) as err:
        validate_binds([bind], [str(root)])
    assert str(err.value) == (
        f'Sandbox security: bind mount "{bind}" source "/srv/data" is outside allowed roots ({root}). '
        "Use a dangerous override only when you fully trust this runtime."
    )
    validate_binds([bind], [str(root)], allow_external=True)
    with pytest.raises(SandboxSecurityError) as err:
        validate_binds(["relative/path:/data"], [str(root)])
    assert "uses a non-absolute source path" in str(err.value)
    with pytest.raises(SandboxSecurityError, match="targets blocked path"):
        validate_binds(["/etc:/x"], [str(root)], allow_external=True)  # the override never opens /etc


@pytest.mark.parametrize(
    "target", ["/workspace", "/workspace/sub", "/agent", "/.exechost", "/.exechost-bin/x"]
)
def test_reserved_targets(tmp_path: Path, target: str) -> None:
    bind = f"{tmp_path}:{target}"
    with pytest.raises(SandboxSecurityError) as err:
        validate_binds([bind], [str(tmp_path)])
    assert "targets reserved container path" in str(err.value)
    assert "This can shadow OpenClaw sandbox mounts." in str(err.value)


def test_network_modes_and_profiles() -> None:
    validate_network("none")
    validate_network("bridge")
    for mode in ("host", "HOST", " Host "):
        with pytest.raises(SandboxSecurityError) as err:
            validate_network(mode)
        assert str(err.value).startswith(f'Sandbox security: network mode "{mode}" is blocked.')
    with pytest.raises(SandboxSecurityError, match="is blocked by default"):
        validate_network("container:abc")
    validate_network("container:abc", allow_namespace_join=True)
    with pytest.raises(SandboxSecurityError, match='seccomp profile "Unconfined" is blocked'):
        validate_profiles("Unconfined", None)
    with pytest.raises(SandboxSecurityError, match='apparmor profile "unconfined" is blocked'):
        validate_profiles(None, "unconfined")


def test_container_env_blocks_credentials_unless_explicit() -> None:
    env = {
        "LANG": "C.UTF-8",
        "OPENAI_API_KEY": "k",
        "GITHUB_TOKEN": "t",
        "DB_PASSWORD": "p",
        "BAD\x00": "x",
        "NUL": "a\x00b",
        "SKILL_API_KEY": "s",
    }
    out = sanitize_container_env(env, explicit=["SKILL_API_KEY"])
    assert out.env == {"LANG": "C.UTF-8", "SKILL_API_KEY": "s"}
    assert set(out.blocked) == {"OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "BAD\x00", "NUL"}
    assert out.warnings[-1].startswith("Blocked sensitive environment variables: ")


def test_exec_env_filter_keeps_host_secrets_out() -> None:
    from engine.sandbox.validate import filter_exec_env

    env = {
        "AWS_SECRET_ACCESS_KEY": "x",
        "MY_TOKEN": "ok",
        "PATH": "/opt/bin",
        "LD_PRELOAD": "/x.so",
        "FOO": "1",
        "1BAD": "x",
        "A-B": "x",
        "EXECHOST_SESSION": "spoof",
    }
    got = filter_exec_env(env, {"MY_TOKEN"})
    assert got.env == {"MY_TOKEN": "ok", "PATH": "/opt/bin", "FOO": "1"}
    assert sorted(got.blocked) == ["1BAD", "A-B", "AWS_SECRET_ACCESS_KEY", "EXECHOST_SESSION", "LD_PRELOAD"]
    assert got.warnings == [
        "Warning: sandbox exec dropped env keys: 1BAD, A-B, AWS_SECRET_ACCESS_KEY, EXECHOST_SESSION, "
        "LD_PRELOAD (credential-like keys pass only when agents.defaults.sandbox.docker.env names them)."
    ]


def test_registry_upsert_keeps_created_and_image(state_dir: Path) -> None:
    reg = Registry()
    reg.upsert(RegistryEntry("c1", "agent:a", 100, 100, "img:1", "h1"))
    reg.upsert(RegistryEntry("c1", "agent:a", 999, 500, "img:2", "h2"))
    (entry,) = reg.read()
    assert (entry.createdAtMs, entry.image, entry.lastUsedAtMs, entry.configHash) == (100, "img:1", 500, "h2")
    path = state_dir / "sandbox-registry.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert json.loads(path.read_text())["entries"][0]["containerName"] == "c1"


def test_registry_bad_file_is_never_replaced(state_dir: Path) -> None:
    path = state_dir / "sandbox-registry.json"
    path.write_text("{not json")
    reg = Registry()
    assert reg.read() == []  # lenient for list/prune
    with pytest.raises(RegistryError, match="Invalid sandbox registry format"):
        reg.upsert(RegistryEntry("c1", "k", 1, 1, "i"))
    assert path.read_text() == "{not json"


def _hammer(args: tuple[str, int]) -> None:
    state, n = args
    os.environ["OPENCLAW_STATE_DIR"] = state
    reg = Registry()
    for i in range(15):
        reg.upsert(RegistryEntry(f"c{n}-{i}", "k", now_ms(), now_ms(), "img"))
        reg.touch(f"c{n}-{i}")


def test_registry_concurrent_writers_lose_nothing(state_dir: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        pool.map(_hammer, [(str(state_dir), n) for n in range(4)])
    names = {e.containerName for e in Registry().read()}
    assert names == {f"c{n}-{i}" for n in range(4) for i in range(15)}


@pytest.mark.parametrize("uptime", [10.0, 1e6])
def test_prune_removes_idle_and_old_entries(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, uptime: float
) -> None:
    import asyncio
    import time

    # A freshly booted machine: time.monotonic() is below the 5-minute prune interval.
    clock = [uptime]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])

    from engine.sandbox.manager import SandboxManager

    reg = Registry()
    now = now_ms()
    reg.upsert(RegistryEntry("eh-test-idle-nonexistent", "k1", now - 1000, now - 25 * 3_600_000, "i"))
    reg.upsert(RegistryEntry("eh-test-old-nonexistent", "k2", now - 8 * 86_400_000, now, "i"))
    reg.upsert(RegistryEntry("eh-test-fresh-nonexistent", "k3", now - 1000, now, "i"))
    settings = resolve_settings(None, "main")
    mgr = SandboxManager()
    removed = asyncio.run(mgr.maybe_prune(settings))
    assert sorted(removed) == ["eh-test-idle-nonexistent", "eh-test-old-nonexistent"]
    assert [e.containerName for e in reg.read()] == ["eh-test-fresh-nonexistent"]
    reg.upsert(RegistryEntry("eh-test-idle2-nonexistent", "k4", now, now - 30 * 3_600_000, "i"))
    assert asyncio.run(mgr.maybe_prune(settings)) == []  # at most once per 5 minutes
    assert asyncio.run(mgr.maybe_prune(settings, force=True)) == ["eh-test-idle2-nonexistent"]


def test_tmpfs_over_control_mounts_is_refused() -> None:
    from engine.sandbox.validate import validate_docker

    text = '[agents.defaults.sandbox.docker]\ntmpfs = ["/tmp", "/.exechost"]\n'
    settings = resolve_settings(cfg(text), "main")
    with pytest.raises(SandboxSecurityError, match=r'tmpfs "/\.exechost" targets reserved container path'):
        validate_docker(settings.docker, [])
    settings = resolve_settings(cfg('[agents.defaults.sandbox.docker]\ntmpfs = ["/"]\n'), "main")
    with pytest.raises(SandboxSecurityError, match="reserved container path"):
        validate_docker(settings.docker, [])


def test_cli_explain_text_and_recreate_usage(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from runner.cli import main
    from runner.cli.sandboxtext import compact, format_list

    (state_dir / "config.toml").write_text('[agents.defaults.sandbox]\nmode = "non-main"\n')
    assert main(["sandbox", "explain", "--session", "telegram:group:7"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Effective sandbox:\n  agentId: main\n  sessionKey: telegram:group:7\n")
    assert "  runtime: sandboxed\n  mode: non-main\n" in out
    assert "Hint: sandbox mode is non-main; use main session key to run direct: agent:main:main" in out
    assert main(["sandbox", "explain", "--session", "agent:ops:main", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["agentId"], info["runtime"], info["scopeKey"]) == ("ops", "direct", "agent:ops")
    assert main(["sandbox", "recreate"]) == 2
    assert "Please specify --all, --session <key>, or --agent <id>" in capsys.readouterr().err
    assert main(["sandbox", "recreate", "--all", "--agent", "x"]) == 2
    assert "Please specify only one of: --all, --session, --agent" in capsys.readouterr().err
    assert format_list([]) == "No sandbox runtimes found."
    assert [compact(v) for v in (None, 5_000, 90_000, 7_200_000, 3 * 86_400_000)] == [
        "-",
        "5s",
        "1m",
        "2h",
        "3d",
    ]


def test_resolved_settings_and_layout_follow_what_they_are_made_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both are memoised (every sandboxed exec asks): a config changed in place, another state dir or HOME,
    another cwd or session key each give a fresh answer; the same inputs give the same object."""
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(tmp_path / "home"))  # the home host views protect
    monkeypatch.chdir(tmp_path)
    config = cfg('[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nworkspaceRoot = "ws"\n')
    first = resolve_settings(config, "main")
    assert resolve_settings(config, "main") is first
    assert first.workspace_root == str(tmp_path / "ws")
    lay = layout(first, "main", "s1")
    assert layout(first, "main", "s1") is lay
    assert layout(first, "main", "s2").scope_key == "s2"

    config.sandbox.docker.env["FOO"] = "bar"  # a config changed in place
    changed = resolve_settings(config, "main")
    assert changed.docker.env["FOO"] == "bar" and "FOO" not in first.docker.env
    config.sandbox.scope = "agent"
    assert resolve_settings(config, "main").scope == "agent"
    config.sandbox.scope = "session"

    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # a relative workspace_root follows the cwd
    assert resolve_settings(config, "main").workspace_root == str(tmp_path / "sub" / "ws")
    monkeypatch.chdir(tmp_path)

    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "b"))  # another install: defaults move
    defaults = resolve_settings(None, "main")
    assert defaults.workspace_root == str(tmp_path / "b" / "sandboxes")
    assert layout(changed, "main", "s1").agent_workspace == str(tmp_path / "b" / "workspace")
    assert lay.agent_workspace == str(tmp_path / "a" / "workspace")
    monkeypatch.setenv("HOME", str(tmp_path / "other"))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(tmp_path / "other"))  # the home host views protect
    config.sandbox.workspace_root = "~/boxes"
    assert resolve_settings(config, "main").workspace_root == str(tmp_path / "other" / "boxes")


def test_an_agents_workspace_made_under_the_32_bit_name_stays_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from engine.sandbox.settings import agent_workspace_dir

    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path))
    new = tmp_path / f"workspace-ops-{hashlib.sha256(b'ops').hexdigest()[:32]}"
    assert agent_workspace_dir("ops") == str(new)  # nothing yet: the 128-bit name
    legacy = tmp_path / f"workspace-ops-{hashlib.sha256(b'ops').hexdigest()[:8]}"
    legacy.mkdir()
    assert agent_workspace_dir("ops") == str(legacy)  # kept: agent ids are the operator's, not an agent's
    new.mkdir()
    assert agent_workspace_dir("ops") == str(new)
