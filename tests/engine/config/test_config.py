"""config.toml: defaults, validation errors naming file/key/line, merges, tomlkit writes, the example file."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import tomlkit

from engine.config.loader import (
    config_path,
    key_lines,
    known_keys,
    load_config,
    load_config_text,
)
from engine.config.model import Config, ConfigError
from engine.config.write import set_config_value


def write(tmp: Path, text: str) -> Path:
    path = tmp / "config.toml"
    path.write_text(text)
    return path


def error_for(tmp: Path, text: str) -> ConfigError:
    path = write(tmp, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


# --------------------------------------------------------------------------- paths and defaults


def test_config_path_precedence(tmp_path: Path, state_dir: Path) -> None:
    env = {"OPENCLAW_STATE_DIR": str(state_dir)}
    assert config_path(env=env) == state_dir / "config.toml"
    assert config_path(env={**env, "EXECHOST_CONFIG": "/x/c.toml"}) == Path("/x/c.toml")
    assert config_path("/y/explicit.toml", env={**env, "EXECHOST_CONFIG": "/x/c.toml"}) == Path(
        "/y/explicit.toml"
    )
    assert config_path(env={"HOME": "/home/u"}).name == "config.toml"


def test_missing_file_is_all_defaults(state_dir: Path) -> None:
    cfg = load_config()
    assert not cfg.exists
    ex = cfg.exec
    assert (ex.host, ex.security, ex.ask, ex.ask_fallback, ex.node) == (None, None, None, None, None)
    assert ex.timeout_sec == 1800 and ex.background_ms == 10_000 and ex.cleanup_ms == 1_800_000
    assert ex.notify_on_exit is True and ex.notify_on_exit_empty_success is False
    assert ex.path_prepend == [] and ex.safe_bins is None and ex.safe_bin_profiles == {}
    assert ex.log_cap_bytes == 64 * 1024 * 1024
    assert cfg.elevated_enabled is False
    sb = cfg.sandbox
    assert (sb.mode, sb.scope, sb.workspace_access) == ("off", "agent", "none")
    assert sb.workspace_root == str(state_dir / "sandboxes")
    d = sb.docker
    assert d.image == "openclaw-sandbox:bookworm-slim" and d.read_only_root is True
    assert d.tmpfs == ["/tmp", "/var/tmp", "/run"] and d.network == "none" and d.cap_drop == ["ALL"]
    assert d.env == {"LANG": "C.UTF-8"} and d.user is None and d.binds == []
    assert (sb.prune.idle_hours, sb.prune.max_age_days) == (24, 7)
    assert cfg.agents == {} and cfg.nodes == {}


def test_env_var_selects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[tools.exec]\nhost = "gateway"\n')
    monkeypatch.setenv("EXECHOST_CONFIG", str(path))
    assert load_config().exec.host == "gateway"


def test_state_dir_file_is_default(state_dir: Path) -> None:
    (state_dir / "config.toml").write_text('[tools.exec]\nask = "always"\n')
    assert load_config().exec.ask == "always"


def test_required_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml", required=True)


def test_defaults_are_fresh_objects() -> None:
    a, b = load_config(), load_config()
    a.exec.path_prepend.append("/x")
    a.sandbox.docker.env["X"] = "1"
    assert b.exec.path_prepend == [] and "X" not in b.sandbox.docker.env


# --------------------------------------------------------------------------- errors: file, key, line


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = error_for(tmp_path, '# c\n\n[toolz.exec]\nhost = "gateway"\n')
    assert (err.key, err.line) == ("toolz", 3)
    assert err.file == str(tmp_path / "config.toml")
    assert str(err).startswith(f"{tmp_path / 'config.toml'}:3: toolz: unknown key")


def test_unknown_key_in_exec_suggests(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[tools.exec]\nhost = "gateway"\ntimeout_sec = 5\n')
    assert (err.key, err.line) == ("tools.exec.timeout_sec", 3)
    assert "did you mean 'timeoutSec'" in err.message


def test_unknown_key_in_nested_docker_table(tmp_path: Path) -> None:
    text = (
        '[agents.defaults.sandbox]\nmode = "all"\n\n'
        '[agents.defaults.sandbox.docker]\nimage = "x"\nnetwrok = "none"\n'
    )
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.defaults.sandbox.docker.netwrok", 6)


def test_unknown_key_in_inline_table_points_at_its_line(tmp_path: Path) -> None:
    text = '[agents.defaults.sandbox]\nmode = "all"\ndocker = { image = "x", bogus = 1 }\n'
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.defaults.sandbox.docker.bogus", 3)


def test_unknown_key_in_second_agent_entry(tmp_path: Path) -> None:
    text = (
        '[[agents.list]]\nid = "main"\ntools.exec.ask = "always"\n\n'
        '[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nsecurity = "full"\nhostt = "gateway"\n'
    )
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.list[1].tools.exec.hostt", 9)


def test_bad_enum_in_agent_dotted_key(tmp_path: Path) -> None:
    text = '[[agents.list]]\nid = "main"\n\n[[agents.list]]\nid = "ops"\ntools.exec.security = "none"\n'
    err = error_for(tmp_path, text)
    assert (err.key, err.line) == ("agents.list[1].tools.exec.security", 6)
    assert "invalid value 'none' (expected deny|allowlist|full)" in err.message


def test_bad_enum_values(tmp_path: Path) -> None:
    for text, key, line in (
        ('[tools.exec]\n\nask = "never"\n', "tools.exec.ask", 3),
        ('[tools.exec]\nhost = "ssh"\n', "tools.exec.host", 2),
        ('[tools.exec]\naskFallback = "maybe"\n', "tools.exec.askFallback", 2),
        ('[agents.defaults.sandbox]\nmode = "sometimes"\n', "agents.defaults.sandbox.mode", 2),
        ('[agents.defaults.sandbox]\nscope = "global"\n', "agents.defaults.sandbox.scope", 2),
        (
            '[agents.defaults.sandbox]\nworkspaceAccess = "write"\n',
            "agents.defaults.sandbox.workspaceAccess",
            2,
        ),
        ('[[agents.list]]\nid = "x"\n[agents.list.sandbox]\nmode = "on"\n', "agents.list[0].sandbox.mode", 4),
    ):
        err = error_for(tmp_path, text)
        assert (err.key, err.line) == (key, line), text
        assert "invalid value" in err.message


def test_wrong_types(tmp_path: Path) -> None:
    for text, key, line, fragment in (
        ('[tools.exec]\ntimeoutSec = "10"\n', "tools.exec.timeoutSec", 2, "an integer, got a string"),
        ('[tools.exec]\nnotifyOnExit = "yes"\n', "tools.exec.notifyOnExit", 2, "expected true or false"),
        ("[tools.exec]\nbackgroundMs = true\n", "tools.exec.backgroundMs", 2, "an integer, got a boolean"),
        ('[tools.exec]\npathPrepend = "/opt/bin"\n', "tools.exec.pathPrepend", 2, "a list of strings"),
        ('[tools.exec]\nsafeBins = ["wc", 3]\n', "tools.exec.safeBins", 2, "expected non-empty strings"),
        ("[tools.exec]\nhost = 1\n", "tools.exec.host", 2, "expected a string"),
        ("[tools]\nexec = 3\n", "tools.exec", 2, "expected a table"),
        ("[tools.elevated]\nenabled = 1\n", "tools.elevated.enabled", 2, "expected true or false"),
        (
            "[agents.defaults.sandbox.docker]\nenv = { A = 1 }\n",
            "agents.defaults.sandbox.docker.env.A",
            2,
            "expected a string",
        ),
        (
            '[agents.defaults.sandbox.docker]\nmemory = "lots"\n',
            "agents.defaults.sandbox.docker.memory",
            2,
            "invalid size",
        ),
        (
            '[agents.defaults.sandbox.docker]\ncpus = "2"\n',
            "agents.defaults.sandbox.docker.cpus",
            2,
            "expected a number",
        ),
        (
            "[agents.defaults.sandbox.prune]\nidleHours = -1\n",
            "agents.defaults.sandbox.prune.idleHours",
            2,
            "at least 0",
        ),
        ('[nodes.box]\nhost = "h"\nport = 70000\n', "nodes.box.port", 3, "at most 65535"),
        ("[tools.exec]\ntimeoutSec = 0\n", "tools.exec.timeoutSec", 2, "at least 1"),
        (
            "[tools.exec.safeBinProfiles]\nsort = { bogus = 1 }\n",
            "tools.exec.safeBinProfiles.sort.bogus",
            2,
            "unknown key",
        ),
        ("agents = 1\n", "agents", 1, "expected a table"),
        ("[agents]\nlist = 1\n", "agents.list", 2, "array of tables"),
    ):
        err = error_for(tmp_path, text)
        assert (err.key, err.line) == (key, line), text
        assert fragment in err.message, (text, err.message)


def test_structural_errors(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[[agents.list]]\ntools.exec.ask = "always"\n')
    assert (err.key, err.line) == ("agents.list[0]", 1) and "missing required key 'id'" in err.message
    err = error_for(tmp_path, '[[agents.list]]\nid = "a"\n[[agents.list]]\nid = "a"\n')
    assert (err.key, err.line) == ("agents.list[1].id", 4) and "duplicate" in err.message
    err = error_for(tmp_path, '[[agents.list]]\nid = "bad id!"\n')
    assert err.key == "agents.list[0].id" and "invalid agent id" in err.message
    err = error_for(tmp_path, "[nodes.box]\nport = 22\n")
    assert (err.key, err.line) == ("nodes.box", 1) and "missing required key 'host'" in err.message
    err = error_for(tmp_path, '[agents.defaults]\nsandbox = {}\nmodel = "x"\n')
    assert (err.key, err.line) == ("agents.defaults.model", 3)


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[tools.exec]\nhost = "gateway"\nask = \n')
    assert err.line == 3 and "invalid TOML" in err.message


def test_enum_values_are_exact_lowercase(tmp_path: Path) -> None:
    # Issue 9 item 21: "FULL" grants nothing in OpenClaw; here it is an error naming file, key and line.
    with pytest.raises(ConfigError, match=r"config.toml:3: tools.exec.security: invalid value 'FULL'"):
        load_config(write(tmp_path, '[tools.exec]\nhost = "gateway"\nsecurity = "FULL"\n'))
    with pytest.raises(ConfigError, match=r"config.toml:2: tools.exec.host: invalid value ' Gateway '"):
        load_config(write(tmp_path, '[tools.exec]\nhost = " Gateway "\n'))
    cfg = load_config(write(tmp_path, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\n'))
    assert (cfg.exec.host, cfg.exec.security) == ("gateway", "full")


def test_clamps(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[tools.exec]\nbackgroundMs = 5\ncleanupMs = 1\n"))
    assert (cfg.exec.background_ms, cfg.exec.cleanup_ms) == (10, 60_000)
    cfg = load_config(write(tmp_path, "[tools.exec]\nbackgroundMs = 999999\ncleanupMs = 999999999\n"))
    assert (cfg.exec.background_ms, cfg.exec.cleanup_ms) == (120_000, 10_800_000)


# --------------------------------------------------------------------------- merged views

MERGE = """
[tools.exec]
host = "gateway"
security = "allowlist"
safeBinProfiles = { sort = { booleanFlags = ["-r"] }, uniq = { booleanFlags = ["-c"] } }

[tools.elevated]
enabled = true

[agents.defaults.sandbox]
mode = "all"
[agents.defaults.sandbox.docker]
env = { LANG = "C.UTF-8", A = "1" }
binds = ["/data:/data:ro"]

[[agents.list]]
id = "ops"
tools.exec.security = "full"
tools.exec.safeBinProfiles = { sort = { booleanFlags = ["-n"] } }
tools.elevated.enabled = false
sandbox.workspaceAccess = "rw"
sandbox.docker.env = { A = "2", B = "3" }
sandbox.docker.binds = ["/src:/src"]
sandbox.prune.idleHours = 2

[[agents.list]]
id = "shared"
sandbox.scope = "shared"
sandbox.docker.image = "other"
sandbox.prune.idleHours = 1

[nodes.box]
host = "127.0.0.1"
port = 2222
identityFile = "~/.ssh/id"
"""


def test_exec_for_merges_agent_over_global(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MERGE))
    ops = cfg.exec_for("ops")
    assert (ops.host, ops.security) == ("gateway", "full")
    assert ops.safe_bin_profiles == {"sort": {"booleanFlags": ["-n"]}, "uniq": {"booleanFlags": ["-c"]}}
    assert cfg.exec_for("main").security == "allowlist"
    assert cfg.agents["ops"].exec == {
        "security": "full",
        "safe_bin_profiles": {"sort": {"booleanFlags": ["-n"]}},
    }
    assert cfg.elevated_enabled_for("main") is True and cfg.elevated_enabled_for("ops") is False


def test_sandbox_for_merges_per_reference(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MERGE))
    ops = cfg.sandbox_for("ops")
    assert ops.mode == "all" and ops.workspace_access == "rw"
    assert ops.docker.env == {"LANG": "C.UTF-8", "A": "2", "B": "3"}
    assert ops.docker.binds == ["/data:/data:ro", "/src:/src"]
    assert ops.prune.idle_hours == 2
    shared = cfg.sandbox_for("shared")
    assert shared.scope == "shared"
    assert shared.docker.image == "openclaw-sandbox:bookworm-slim" and shared.prune.idle_hours == 24
    assert cfg.sandbox_for("nobody").docker.binds == ["/data:/data:ro"]
    # The merged view is a copy: editing it never changes the loaded config.
    ops.docker.binds.append("/x:/x")
    assert cfg.sandbox.docker.binds == ["/data:/data:ro"]
    assert cfg.nodes["box"].port == 2222 and cfg.nodes["box"].identity_file == "~/.ssh/id"


# --------------------------------------------------------------------------- line scanner


def test_key_lines_skip_multiline_values() -> None:
    text = (
        '[tools.exec]\npathPrepend = [\n  "a",\n  "x = 1",\n]\nnode = """\nfake = 2\n"""\n'
        "'quoted key' = 3\nask = 'on-miss'  # trailing = comment\n"
    )
    lines = key_lines(text)
    assert lines["tools.exec.pathPrepend"] == 2
    assert lines["tools.exec.node"] == 6
    assert "tools.exec.x" not in lines and "tools.exec.fake" not in lines
    assert lines['tools.exec."quoted key"'] == 9
    assert lines["tools.exec.ask"] == 10


def test_error_after_multiline_array_has_right_line(tmp_path: Path) -> None:
    text = '[tools.exec]\npathPrepend = [\n  "a",\n  "b",\n]\nbogus = 1\n'
    assert error_for(tmp_path, text).line == 6


# --------------------------------------------------------------------------- writes


def test_set_config_value_keeps_comments_and_validates(tmp_path: Path) -> None:
    path = write(tmp_path, '# my settings\n[tools.exec]\n# keep me\nhost = "gateway"  # inline\n')
    cfg = set_config_value(path, "tools.exec.security", "allowlist")
    assert isinstance(cfg, Config) and cfg.exec.security == "allowlist"
    text = path.read_text()
    assert "# my settings" in text and "# keep me" in text and "# inline" in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    before = path.read_text()
    with pytest.raises(ConfigError) as info:
        set_config_value(path, "tools.exec.security", "sometimes")
    assert info.value.key == "tools.exec.security"
    assert path.read_text() == before
    with pytest.raises(ConfigError):
        set_config_value(path, "tools.exec.nonsense", 1)
    assert path.read_text() == before


def test_set_config_value_creates_tables_agents_and_removes(tmp_path: Path) -> None:
    path = tmp_path / "new" / "config.toml"
    set_config_value(path, "agents.defaults.sandbox.docker.network", "bridge")
    set_config_value(path, "agents.list[ops].tools.exec.ask", "always")
    set_config_value(path, "agents.list[ops].tools.exec.security", "full")
    cfg = set_config_value(path, "nodes.box.host", "127.0.0.1")
    assert cfg.sandbox.docker.network == "bridge"
    assert cfg.agents["ops"].exec == {"ask": "always", "security": "full"}
    assert cfg.nodes["box"].host == "127.0.0.1"
    cfg = set_config_value(path, "agents.list[ops].tools.exec.ask", None)
    assert cfg.agents["ops"].exec == {"security": "full"}
    assert load_config(path).agents["ops"].exec == {"security": "full"}
    with pytest.raises(ConfigError, match="not a valid dotted key"):
        set_config_value(path, "tools..exec", 1)


# --------------------------------------------------------------------------- config.example.toml

_SETTABLE = re.compile(r"^# ((?:\[\[?[A-Za-z0-9_.\"-]+\]\]?)|(?:[A-Za-z][A-Za-z0-9_.]* = .+))$")


# The example names the account and group the operator creates for agents (README, "Agents are
# principals"); the loader checks they exist, so the tests load it with ones every system has.
_ON_THIS_SYSTEM = {
    'user = "agent-ops"': 'user = "nobody"',
    'agentGroup = "exechost-agents"': 'agentGroup = "nogroup"',
}


def _here(text: str) -> str:
    for name, present in _ON_THIS_SYSTEM.items():
        text = text.replace(name, present)
    return text


def test_example_round_trips_and_loads(repo_root: Path) -> None:
    text = (repo_root / "config.example.toml").read_text()
    assert tomlkit.dumps(tomlkit.parse(text)) == text
    cfg = load_config(repo_root / "config.example.toml")
    defaults = load_config(repo_root / "does-not-exist.toml")
    assert cfg.exec == defaults.exec and cfg.sandbox == defaults.sandbox


def test_example_documents_every_key_with_its_default(repo_root: Path, tmp_path: Path) -> None:
    text = (repo_root / "config.example.toml").read_text()
    # Uncomment every settable line: the result must load, and name every key the loader knows.
    live = "\n".join(m.group(1) if (m := _SETTABLE.match(line)) else line for line in text.splitlines())
    cfg = load_config_text(_here(live), tmp_path / "live.toml")
    lines = key_lines(live)
    documented = {re.sub(r"\[\d+\]", "[]", k) for k in lines}
    documented |= {k.replace("nodes.buildbox.", "nodes.<name>.") for k in documented}
    inline = {"agents.defaults.sandbox.docker.env", "tools.exec.safeBinProfiles"}

    # Per-agent keys are the global ones again: documented once, at the global level.
    def global_form(key: str) -> str:
        key = key.replace("agents.list[].sandbox.", "agents.defaults.sandbox.")
        return key.replace("agents.list[].tools.", "tools.")

    missing = [k for k in known_keys() if k not in documented and global_form(k) not in documented | inline]
    assert "agents.list[].id" in documented
    assert missing == []
    # The commented values are the real defaults.
    ex = cfg.exec
    assert (ex.timeout_sec, ex.background_ms, ex.cleanup_ms, ex.log_cap_bytes) == (
        1800,
        10_000,
        1_800_000,
        64 * 1024 * 1024,
    )
    assert (ex.ask, ex.ask_fallback, ex.notify_on_exit, ex.path_prepend) == ("on-miss", "deny", True, [])
    default = load_config(tmp_path / "none.toml").sandbox
    sb = cfg.sandbox
    assert (sb.mode, sb.scope, sb.workspace_access) == (default.mode, default.scope, default.workspace_access)
    for name in ("image", "read_only_root", "tmpfs", "network", "cap_drop", "env", "pids_limit", "binds"):
        assert getattr(sb.docker, name) == getattr(default.docker, name), name
    assert sb.prune == default.prune
    assert cfg.agents["ops"].exec["security"] == "allowlist"
    assert cfg.nodes["buildbox"].port == 22


def test_every_key_position_reports_its_own_line(repo_root: Path, tmp_path: Path) -> None:
    # Rename each key of the fully uncommented example in turn: the error must point at exactly that line.
    text = _here((repo_root / "config.example.toml").read_text())
    live = [m.group(1) if (m := _SETTABLE.match(line)) else line for line in text.splitlines()]
    checked = 0
    for index, line in enumerate(live):
        m = re.match(r"^([A-Za-z][A-Za-z0-9_.]*?)([A-Za-z0-9_]+) = ", line)
        if m is None:
            continue
        broken = list(live)
        broken[index] = f"{m.group(1)}bogusKey = " + line[m.end() :]
        with pytest.raises(ConfigError) as info:
            load_config_text("\n".join(broken), tmp_path / "c.toml")
        assert info.value.line == index + 1, (line, str(info.value))
        assert info.value.key.endswith("bogusKey")
        checked += 1
    assert checked >= 45


def test_browser_keys_merge_per_agent_and_refuse_host_control(tmp_path: Path) -> None:
    from engine.sandbox.browser import effective_docker
    from engine.sandbox.settings import resolve_settings

    text = (
        "[agents.defaults.sandbox.browser]\nenabled = true\nheadless = true\n"
        "[agents.defaults.sandbox.docker]\nbinds = []\n"
        '[[agents.list]]\nid = "web"\n[agents.list.sandbox.browser]\nnetwork = "corp"\nbinds = []\n'
        '[[agents.list]]\nid = "solo"\n[agents.list.sandbox]\nscope = "shared"\n'
        "[agents.list.sandbox.browser]\nheadless = false\n"
    )
    cfg = load_config(write(tmp_path, text))
    web = resolve_settings(cfg, "web").browser
    assert web.enabled and web.headless and web.network == "corp" and web.binds == []
    assert resolve_settings(cfg, "main").browser.binds is None  # unset: the docker binds apply
    assert resolve_settings(cfg, "solo").browser.headless is True  # shared ignores agent overrides
    assert effective_docker(resolve_settings(cfg, "web")).network == "corp"
    err = error_for(tmp_path, "[agents.defaults.sandbox.browser]\nallowHostControl = true\n")
    assert err.key == "agents.defaults.sandbox.browser.allowHostControl" and err.line == 2
    assert "never drives a browser on the host" in err.message
    err = error_for(tmp_path, "[agents.defaults.sandbox.browser]\ncdpPort = 0\n")
    assert err.key == "agents.defaults.sandbox.browser.cdpPort" and "at least 1" in err.message


def test_sandbox_value_is_the_merged_views_field(tmp_path: Path) -> None:
    """The exec path reads single settings without building the merged view: the answer must be the same
    for an agent with its own settings, one in the shared scope and one with none."""
    import dataclasses

    cfg = load_config(write(tmp_path, MERGE))
    names = [f.name for f in dataclasses.fields(cfg.sandbox) if f.name not in ("docker", "browser", "prune")]
    assert {"mode", "node", "workspace_root", "scope"} <= set(names)
    for agent in ("ops", "shared", "nobody", "main"):
        merged = cfg.sandbox_for(agent)
        for name in names:
            assert cfg.sandbox_value(agent, name) == getattr(merged, name), (agent, name)
    # The agent's own settings are really read (not only the global ones).
    assert any(cfg.sandbox_value("ops", n) != cfg.sandbox_value("nobody", n) for n in names)
