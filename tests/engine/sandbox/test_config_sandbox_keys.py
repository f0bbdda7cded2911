"""Sandbox docker keys of reference §6.1/§6.6: load, validate (file/key/line), merge, reach the settings."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from engine.config.loader import load_config, load_config_text
from engine.config.model import ConfigError
from engine.config.schema import (
    BUSYBOX_SANDBOX_IMAGE,
    DEFAULT_BROWSER_IMAGE,
    DEFAULT_SANDBOX_IMAGE,
    RESERVED_WORKDIRS,
)
from engine.config.write import set_config_value
from engine.sandbox import admin, map_workdir
from engine.sandbox import supervisor as sv
from engine.sandbox.settings import (
    AGENT_MOUNT,
    DEFAULT_IMAGE,
    config_hash,
    container_name,
    layout,
    resolve_settings,
    state_id,
)
from engine.sandbox.validate import SandboxSecurityError, validate_docker

REPO = Path(__file__).resolve().parents[3]
DOCKER = "[agents.defaults.sandbox.docker]\n"

FULL = """
[agents.defaults.sandbox]
mode = "all"

[agents.defaults.sandbox.docker]
containerPrefix = "corp-sbx-"
workdir = "/srv/work"
memory = "512m"
memorySwap = "1g"
ulimits = { nofile = "1024:2048", nproc = 256, stack = { soft = 8388608, hard = 16777216 } }
dns = ["10.1.2.3", "fd00::53"]
extraHosts = ["db.internal:10.1.2.4", "gw:host-gateway"]
dangerouslyAllowReservedContainerTargets = true
dangerouslyAllowExternalBindSources = true
dangerouslyAllowContainerNamespaceJoin = true

[[agents.list]]
id = "ops"
sandbox.docker.workdir = "/ops"
sandbox.docker.ulimits = { nproc = 64, core = "0:1" }
sandbox.docker.dns = ["10.9.9.9"]
sandbox.docker.dangerouslyAllowExternalBindSources = false

[[agents.list]]
id = "team"
sandbox.scope = "shared"
sandbox.docker.containerPrefix = "team-"
"""


def write(tmp: Path, text: str) -> Path:
    path = tmp / "config.toml"
    path.write_text(text)
    return path


def error_for(tmp: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp, text))
    return info.value


def test_defaults_reach_the_effective_settings(tmp_path: Path) -> None:
    d = resolve_settings(load_config(tmp_path / "none.toml"), "main").docker
    assert (d.image, d.container_prefix, d.workdir) == (
        "openclaw-sandbox:bookworm-slim",
        "openclaw-sbx-",
        "/workspace",
    )
    assert d.ulimits == {"nofile": (4096, 8192), "core": (0, 0)}
    assert (d.memory, d.memory_swap, d.dns, d.extra_hosts) == (None, None, (), ())
    assert d.dangerously_allow_reserved_container_targets is False
    assert d.dangerously_allow_external_bind_sources is False
    assert d.dangerously_allow_container_namespace_join is False
    assert resolve_settings(None, "main").docker == d  # built-in defaults are the config's


def test_every_new_key_loads_and_reaches_the_settings(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    d = resolve_settings(cfg, "main").docker
    assert d.container_prefix == "corp-sbx-" and d.workdir == "/srv/work"
    assert (d.memory, d.memory_swap) == ("512m", "1g")
    # Merged over the defaults by name: core stays bounded.
    assert d.ulimits == {
        "nofile": (1024, 2048),
        "core": (0, 0),
        "nproc": (256, 256),
        "stack": (8388608, 16777216),
    }
    assert d.dns == ("10.1.2.3", "fd00::53")
    assert d.extra_hosts == ("db.internal:10.1.2.4", "gw:host-gateway")
    assert d.dangerously_allow_reserved_container_targets is True
    assert d.dangerously_allow_external_bind_sources is True
    assert d.dangerously_allow_container_namespace_join is True


def test_per_agent_overrides_and_shared_scope(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    ops = resolve_settings(cfg, "ops").docker
    assert ops.workdir == "/ops" and ops.container_prefix == "corp-sbx-"
    # ulimits merge per name (agent over global over defaults); dns is replaced, not concatenated.
    assert ops.ulimits == {
        "nofile": (1024, 2048),
        "core": (0, 1),
        "nproc": (64, 64),
        "stack": (8388608, 16777216),
    }
    assert ops.dns == ("10.9.9.9",)
    assert ops.dangerously_allow_external_bind_sources is False  # an agent may also opt back out
    assert ops.dangerously_allow_container_namespace_join is True
    team = resolve_settings(cfg, "team")
    assert team.docker.container_prefix == "corp-sbx-"  # scope=shared ignores agent docker overrides
    assert container_name(team, "shared") == f"corp-sbx-{state_id()}-shared"
    # The loaded config is never changed through a merged view.
    cfg.sandbox_for("ops").docker.ulimits["nofile"] = (1, 1)
    cfg.sandbox_for("main").docker.dns.append("1.1.1.1")
    assert cfg.sandbox.docker.ulimits["nofile"] == (1024, 2048) and cfg.sandbox.docker.dns == [
        "10.1.2.3",
        "fd00::53",
    ]


def test_prefix_and_workdir_shape_names_layout_and_workdir_mapping(tmp_path: Path) -> None:
    settings = resolve_settings(load_config(write(tmp_path, FULL)), "main")
    lay = layout(settings, "main", "s")
    assert lay.name == f"corp-sbx-{state_id()}-agent-main-f331f052e4ed92dd414c5847bd1a9266"
    assert map_workdir(None, settings, lay) == ("/srv/work", [])
    os.makedirs(os.path.join(lay.workspace_dir, "sub"))
    assert map_workdir("/srv/work/sub", settings, lay) == ("/srv/work/sub", [])
    assert map_workdir("/workspace", settings, lay)[0] == "/srv/work"  # not the workdir any more: fallback
    # The longest prefix allowed still leaves the slug's hash suffix whole, so scope keys never collide.
    longest = "p" * 22
    named = resolve_settings(load_config_text(DOCKER + f'containerPrefix = "{longest}"\n'), "main")
    name = container_name(named, "x" * 80)
    assert len(name) <= 63 and name.endswith(hashlib.sha256(b"x" * 80).hexdigest()[:32])


def test_new_keys_change_the_config_hash(tmp_path: Path) -> None:
    base = resolve_settings(load_config_text(""), "main")
    lay = layout(base, "main", "s")
    for extra in (
        'dns = ["10.0.0.1"]',
        'extraHosts = ["a:10.0.0.1"]',
        "ulimits = { nproc = 10 }",
        'memory = "1g"\nmemorySwap = "2g"',
        "dangerouslyAllowContainerNamespaceJoin = true",
    ):
        changed = resolve_settings(load_config_text(DOCKER + extra + "\n"), "main")
        assert config_hash(changed, lay) != config_hash(base, lay), extra


def test_pool_size_reaches_the_settings_and_never_the_hashes(tmp_path: Path) -> None:
    from engine.sandbox.browser import browser_hash, browser_layout
    from engine.sandbox.pool import pool_key

    base = resolve_settings(load_config_text(""), "main")
    assert base.docker.pool == 1
    cfg = load_config_text(DOCKER + 'pool = 3\n[[agents.list]]\nid = "ops"\nsandbox.docker.pool = 0\n')
    three, off = resolve_settings(cfg, "main"), resolve_settings(cfg, "ops")
    assert (three.docker.pool, off.docker.pool) == (3, 0)
    lay = layout(base, "main", "s")
    assert config_hash(three, lay) == config_hash(base, lay) == config_hash(off, lay)
    blay = browser_layout(base, "main", "s")
    assert browser_hash(three, blay) == browser_hash(base, blay)
    assert pool_key(three, {}) == pool_key(base, {}) and pool_key(off, {}) is None
    rw = resolve_settings(load_config_text('[agents.defaults.sandbox]\nworkspaceAccess = "rw"\n'), "main")
    assert pool_key(rw, {}) is None  # the agent's own workspace is mounted: never pooled


def test_dangerous_opt_ins_reach_validation(tmp_path: Path) -> None:
    outside = tmp_path / "data"
    outside.mkdir()
    roots = [str(tmp_path / "ws")]
    refusing = DOCKER + f'network = "container:abc"\nbinds = ["{outside}:/data:ro"]\n'
    d = resolve_settings(load_config_text(refusing), "main").docker
    with pytest.raises(SandboxSecurityError, match="outside allowed roots"):
        validate_docker(d, roots)
    opted = refusing + "dangerouslyAllowExternalBindSources = true\n"
    with pytest.raises(SandboxSecurityError, match="container:abc"):
        validate_docker(resolve_settings(load_config_text(opted), "main").docker, roots)
    opted += "dangerouslyAllowContainerNamespaceJoin = true\n"
    validate_docker(resolve_settings(load_config_text(opted), "main").docker, roots)
    # System paths stay blocked whatever the opt-ins say.
    etc = opted.replace(f"{outside}:/data:ro", "/etc:/data:ro")
    with pytest.raises(SandboxSecurityError, match="blocked path"):
        validate_docker(resolve_settings(load_config_text(etc), "main").docker, roots)
    reserved = opted.replace(f"{outside}:/data:ro", f"{outside}:/workspace/x")
    with pytest.raises(SandboxSecurityError, match="reserved container path"):
        validate_docker(resolve_settings(load_config_text(reserved), "main").docker, roots)
    allowed = reserved + "dangerouslyAllowReservedContainerTargets = true\n"
    validate_docker(resolve_settings(load_config_text(allowed), "main").docker, roots)


BAD = [
    ("containerPrefix", "5", "expected a string, got an integer"),
    ("containerPrefix", '"-sbx"', "invalid container name prefix"),
    ("containerPrefix", '"a/b-"', "invalid container name prefix"),
    ("containerPrefix", '"' + "p" * 23 + '"', "at most 22 characters"),
    ("workdir", "true", "expected a string, got a boolean"),
    ("workdir", '"work"', "absolute, normalised"),
    ("workdir", '"/a/../b"', "absolute, normalised"),
    ("workdir", '"/work/"', "absolute, normalised"),
    ("workdir", '"/"', "is reserved"),
    ("workdir", '"/proc/x"', "is reserved"),
    ("workdir", '"/agent"', "is reserved"),
    ("workdir", '"/.exechost"', "is reserved"),
    ("workdir", '"/w:rw"', "invalid character"),
    ("memorySwap", "true", "expected a size"),
    ("memorySwap", '"lots"', "invalid size"),
    ("memorySwap", "0", "must be positive"),
    ("memorySwap", "-2", "must be positive"),
    ("ulimits", "5", "expected a table of ulimits, got an integer"),
    ("ulimits", '["nofile"]', "expected a table of ulimits, got a list"),
    ("ulimits", "{ bogus = 1 }", "unknown ulimit"),
    ("ulimits", '{ nofile = "a:b" }', "invalid ulimit"),
    ("ulimits", '{ nofile = "100" }', "invalid ulimit"),
    ("ulimits", "{ nofile = -2 }", "non-negative integer or -1"),
    ("ulimits", "{ nofile = true }", "non-negative integer or -1"),
    ("ulimits", "{ nofile = 1.5 }", "non-negative integer or -1"),
    ("ulimits", "{ nofile = { soft = 10, hard = 5 } }", "soft limit 10 exceeds hard limit 5"),
    ("ulimits", '{ nofile = "-1:5" }', "exceeds hard limit"),
    ("ulimits", "{ nofile = { soft = 1, max = 2 } }", "expected { soft = N, hard = N }"),
    ("dns", '"10.0.0.1"', "expected a list of strings, got a string"),
    ("dns", '["dns.example"]', "invalid IP address"),
    ("dns", "[53]", "expected non-empty strings"),
    ("extraHosts", '["db"]', 'expected "name:ip"'),
    ("extraHosts", '["db:not-an-ip"]', 'expected "name:ip"'),
    ("extraHosts", '["bad host:10.0.0.1"]', 'expected "name:ip"'),
    ("extraHosts", '{ db = "10.0.0.1" }', "expected a list of strings, got a table"),
    ("pool", "-1", "must be at least 0"),
    ("pool", "17", "at most 16"),
    ("pool", '"2"', "expected an integer"),
    ("dangerouslyAllowReservedContainerTargets", '"true"', "expected true or false, got a string"),
    ("dangerouslyAllowExternalBindSources", "1", "expected true or false, got an integer"),
    ("dangerouslyAllowContainerNamespaceJoin", '"yes"', "expected true or false, got a string"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD)
def test_bad_values_name_file_key_and_line(tmp_path: Path, key: str, value: str, message: str) -> None:
    err = error_for(tmp_path, f'# header\n{DOCKER}image = "x:y"\n{key} = {value}\n')
    assert err.file == str(tmp_path / "config.toml")
    assert err.key.startswith(f"agents.defaults.sandbox.docker.{key}")
    assert err.line == 4
    assert message in err.message, str(err)
    assert str(err).startswith(f"{tmp_path / 'config.toml'}:4: agents.defaults.sandbox.docker.{key}")


@pytest.mark.parametrize(("key", "value", "message"), BAD[::4])
def test_bad_values_in_an_agent_entry(tmp_path: Path, key: str, value: str, message: str) -> None:
    text = f'[[agents.list]]\nid = "a"\n\n[[agents.list]]\nid = "b"\nsandbox.docker.{key} = {value}\n'
    err = error_for(tmp_path, text)
    assert err.key.startswith(f"agents.list[1].sandbox.docker.{key}") and err.line == 6
    assert message in err.message


def test_unlimited_and_table_forms(tmp_path: Path) -> None:
    text = DOCKER + 'memorySwap = -1\nulimits = { nofile = -1, nproc = "10:-1", core = { hard = 0 } }\n'
    d = resolve_settings(load_config_text(text), "main").docker
    assert d.memory_swap == -1
    assert d.ulimits == {"nofile": (-1, -1), "nproc": (10, -1), "core": (0, 0)}


def test_memory_swap_needs_and_exceeds_memory(tmp_path: Path) -> None:
    err = error_for(tmp_path, DOCKER + 'memorySwap = "1g"\n')
    assert err.key == "agents.defaults.sandbox.docker.memorySwap" and err.line == 2
    assert "needs memory" in err.message
    err = error_for(tmp_path, DOCKER + 'memory = "2g"\nmemorySwap = "1g"\n')
    assert (err.line, err.message) == (3, "must be at least memory (2g)")
    load_config(write(tmp_path, DOCKER + 'memory = "1g"\nmemorySwap = 1073741824\n'))  # equal: no swap
    # An agent's memory may break the global memorySwap: the error names the agent's own key.
    text = (
        DOCKER
        + 'memory = "1g"\nmemorySwap = "2g"\n'
        + '[[agents.list]]\nid = "big"\nsandbox.docker.memorySwap = "512m"\n'
    )
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.list[0].sandbox.docker.memorySwap", 6)


def test_bind_over_a_custom_workdir_is_refused(tmp_path: Path) -> None:
    text = DOCKER + 'workdir = "/srv/work"\nbinds = ["/data:/srv/work/sub:ro"]\n'
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.defaults.sandbox.docker.binds", 3)
    assert 'targets the sandbox workdir "/srv/work"' in err.message
    err = error_for(
        tmp_path,
        DOCKER
        + 'binds = ["/data:/srv/work"]\n[[agents.list]]\nid = "o"\nsandbox.docker.workdir = "/srv/work"\n',
    )
    assert err.key == "agents.defaults.sandbox.docker.binds" and "/srv/work" in err.message
    load_config(write(tmp_path, text + "dangerouslyAllowReservedContainerTargets = true\n"))
    load_config(write(tmp_path, DOCKER + 'workdir = "/srv/work"\nbinds = ["/data:/srv/workshop"]\n'))


def test_set_config_value_refuses_a_string_boolean(tmp_path: Path) -> None:
    path = write(tmp_path, "# keep me\n")
    key = "agents.defaults.sandbox.docker.dangerouslyAllowExternalBindSources"
    with pytest.raises(ConfigError, match="expected true or false"):
        set_config_value(path, key, "true")
    assert path.read_text() == "# keep me\n"
    cfg = set_config_value(path, "agents.defaults.sandbox.docker.ulimits", {"nproc": "100:200"})
    assert cfg.sandbox.docker.ulimits["nproc"] == (100, 200)
    assert set_config_value(path, key, True).sandbox.docker.dangerously_allow_external_bind_sources is True


def test_reserved_workdirs_match_the_sandbox_mounts() -> None:
    assert {AGENT_MOUNT, sv.CTL_MOUNT, sv.BIN_MOUNT} <= set(RESERVED_WORKDIRS)


def test_default_image_name_is_honest_everywhere() -> None:
    assert DEFAULT_IMAGE == DEFAULT_SANDBOX_IMAGE == "openclaw-sandbox:bookworm-slim"
    dockerfile = (REPO / "engine" / "sandbox" / "Dockerfile").read_text()
    assert BUSYBOX_SANDBOX_IMAGE in dockerfile and "FROM scratch" in dockerfile
    assert admin.setup_flavour(DEFAULT_SANDBOX_IMAGE) == "debian"
    assert admin.setup_target(None, "busybox") == BUSYBOX_SANDBOX_IMAGE  # never a busybox under a Debian name
    seed = (REPO / "engine" / "sandbox" / "Dockerfile.debian").read_text()
    assert "FROM debian:bookworm-slim" in seed and 'LABEL exechost.image="debian"' in seed
    assert 'LABEL exechost.image="busybox"' in dockerfile and admin.SETUP_LABEL == (
        "exechost.image",
        "busybox",
    )
    example = (REPO / "config.example.toml").read_text()
    assert f'# image = "{DEFAULT_SANDBOX_IMAGE}"' in example
    assert f'# image = "{DEFAULT_BROWSER_IMAGE}"' in example


def test_cli_setup_help_and_explain_show_the_keys(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    assert DEFAULT_SANDBOX_IMAGE in capsys.readouterr().out
    (state_dir / "config.toml").write_text(FULL)
    assert main(["sandbox", "explain", "--json"]) == 0
    docker = json.loads(capsys.readouterr().out)["docker"]
    assert docker["containerPrefix"] == "corp-sbx-" and docker["workdir"] == "/srv/work"
    assert docker["memorySwap"] == "1g" and docker["dns"] == ["10.1.2.3", "fd00::53"]
    assert docker["extraHosts"] == ["db.internal:10.1.2.4", "gw:host-gateway"]
    assert docker["ulimits"]["nproc"] == "256:256"
    assert docker["dangerouslyAllowExternalBindSources"] is True
    assert main(["sandbox", "explain", "--agent", "ops"]) == 0
    out = capsys.readouterr().out
    assert "dns: 10.9.9.9" in out and "memorySwap: 1g" in out
    assert "⚠️  dangerouslyAllowContainerNamespaceJoin = true" in out
    assert "dangerouslyAllowExternalBindSources = true" not in out
