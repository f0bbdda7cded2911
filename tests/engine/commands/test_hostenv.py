"""Host exec env sanitiser: reference §1.7 lists and exact texts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.commands.hostenv import (
    GIT_FORCED_CONFIG,
    PATH_MESSAGE,
    PATH_PREPEND_NODE_WARNING,
    apply_path_prepend,
    own_environ,
    sanitize_host_env,
)
from engine.results import ToolError

BASE = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/op",
    "LANG": "C.UTF-8",
    "OPENAI_API_KEY": "sk-pass-through",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "GITHUB_TOKEN": "ghp",
    "DATABASE_URL": "postgres://x",
    "LD_PRELOAD": "/tmp/x.so",
    "LD_LIBRARY_PATH": "/tmp",
    "DYLD_INSERT_LIBRARIES": "/tmp/x.dylib",
    "BASH_FUNC_ls%%": "() { id; }",
    "NODE_OPTIONS": "--require /tmp/x.js",
    "PYTHONPATH": "/tmp",
    "BASH_ENV": "/tmp/x.sh",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
    "HTTPS_PROXY": "http://proxy:3128",
    "KUBECONFIG": "/home/op/.kube/config",
    "EDITOR": "vim",
    "GIT_CONFIG_COUNT": "1",
}


def test_inherited_env_is_stripped_of_loader_and_credential_keys() -> None:
    result = sanitize_host_env(BASE)
    env = result.env
    for gone in (
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "DATABASE_URL",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "BASH_FUNC_ls%%",
        "NODE_OPTIONS",
        "PYTHONPATH",
        "BASH_ENV",
    ):
        assert gone not in env, gone
        assert gone in result.stripped
    # Pagers, editors and git's config overrides are forced for every host exec (issue 9 items 2-4).
    assert "EDITOR" in result.stripped and env["EDITOR"] == "false"
    assert env["GIT_CONFIG_COUNT"] == str(len(GIT_FORCED_CONFIG))
    for kept in ("PATH", "HOME", "LANG", "HTTPS_PROXY"):
        assert env[kept] == BASE[kept], kept
    # Issue 27 §1 (round 10 a): what is inherited is a list of what is allowed; a key on no list of
    # secrets (an API key, the operator's agent, a cluster's credentials) is not every agent's.
    for gone in ("OPENAI_API_KEY", "SSH_AUTH_SOCK", "KUBECONFIG"):
        assert gone not in env and gone in result.stripped, gone
    assert env["OPENCLAW_CLI"] == "1"
    assert "secret" not in repr(result)  # names only, never values
    # the operator's `inheritEnv` adds a key; one that loads code stays refused whatever is listed
    chosen = sanitize_host_env(BASE, inherit=("kubeconfig", "LD_PRELOAD")).env
    assert chosen["KUBECONFIG"] == BASE["KUBECONFIG"] and "LD_PRELOAD" not in chosen


def test_lowercase_spellings_are_matched_too() -> None:
    env = sanitize_host_env({"ld_preload": "x", "Node_Options": "y", "PATH": "/bin"}).env
    assert "ld_preload" not in env and "Node_Options" not in env


def test_safe_overrides_apply() -> None:
    env = sanitize_host_env(BASE, {"FOO": "1", "TERM": "xterm", "ProgramFiles(x86)": "C:\\x"}).env
    assert env["FOO"] == "1" and env["TERM"] == "xterm" and env["ProgramFiles(x86)"] == "C:\\x"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"PATH": "/tmp/evil"},
            "Security Violation: Custom 'PATH' variable is forbidden during host execution.",
        ),
        (
            {"Path": "/tmp/evil"},
            "Security Violation: Custom 'PATH' variable is forbidden during host execution.",
        ),
        (
            {"LD_PRELOAD": "/tmp/x.so"},
            "Security Violation: Environment variable 'LD_PRELOAD' is forbidden during host execution.",
        ),
        (
            {"NODE_OPTIONS": "--require x"},
            "Security Violation: Environment variable 'NODE_OPTIONS' is forbidden during host execution.",
        ),
        (
            {"HOME": "/tmp"},
            "Security Violation: Environment variable 'HOME' is forbidden during host execution.",
        ),
        (
            {"CLASSPATH": "/tmp/evil-classpath"},
            "Security Violation: Environment variable 'CLASSPATH' is forbidden during host execution.",
        ),
        (
            {"GIT_CONFIG_KEY_0": "core.pager"},
            "Security Violation: Environment variable 'GIT_CONFIG_KEY_0' is forbidden during host execution.",
        ),
        (
            {"GITHUB_TOKEN": "x"},
            "Security Violation: Environment variable 'GITHUB_TOKEN' is forbidden during host execution.",
        ),
        (
            {"DYLD_LIBRARY_PATH": "x", "PYTHONPATH": "y"},
            "Security Violation: blocked override keys: DYLD_LIBRARY_PATH, PYTHONPATH.",
        ),
        (
            {"LD_AUDIT": "x", "BAD-KEY": "y"},
            "Security Violation: blocked override keys: LD_AUDIT; "
            "invalid non-portable override keys: BAD-KEY.",
        ),
        ({"1X": "y"}, "Security Violation: invalid non-portable override keys: 1X."),
        (
            {"PATH": "/x", "BASH_ENV": "y"},
            "Security Violation: Custom 'PATH' variable is forbidden during host execution "
            "(blocked override keys: PATH, BASH_ENV).",
        ),
        (
            {"PATH": "/x", "A B": "y"},
            "Security Violation: Custom 'PATH' variable is forbidden during host execution "
            "(blocked override keys: PATH; invalid non-portable override keys: A B).",
        ),
    ],
)
def test_refused_overrides_use_reference_texts(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ToolError) as caught:
        sanitize_host_env(BASE, overrides)
    assert str(caught.value) == message


def test_path_override_allowed_only_when_not_blocked() -> None:
    assert PATH_MESSAGE.endswith("forbidden during host execution.")
    env = sanitize_host_env(BASE, {"PATH": "/opt/bin"}, block_path_overrides=False).env
    assert env["PATH"] == "/opt/bin"


def test_nul_in_override_value_is_refused() -> None:
    with pytest.raises(ToolError, match="invalid non-portable override keys: FOO"):
        sanitize_host_env(BASE, {"FOO": "a\x00b", "LD_PRELOAD": "x"})


def test_path_prepend() -> None:
    env = {"PATH": "/usr/bin"}
    assert apply_path_prepend(env, ["/opt/a", "/opt/b"], host="gateway") == []
    assert env["PATH"] == "/opt/a:/opt/b:/usr/bin"
    node_env = {"PATH": "/usr/bin"}
    assert apply_path_prepend(node_env, ["/opt/a"], host="node") == [PATH_PREPEND_NODE_WARNING]
    assert node_env["PATH"] == "/usr/bin"
    assert PATH_PREPEND_NODE_WARNING == (
        "Warning: tools.exec.pathPrepend is ignored for host=node. "
        "Configure PATH on the node host/service instead."
    )


def test_sanitised_env_really_stops_a_loader_variable() -> None:
    # A real child: BASH_ENV in the gateway's env would make bash source a file; sanitised, it does not.
    env = sanitize_host_env({**BASE, "BASH_ENV": "/dev/null/x", "PATH": "/usr/bin:/bin"}).env
    out = subprocess.run(
        ["bash", "-c", "echo ${BASH_ENV:-unset} ${LD_PRELOAD:-unset}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.stdout.strip() == "unset unset"


def test_the_kept_answer_for_our_own_env_follows_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's own environment is vetted once and kept (issue 19): any change to it — a new
    variable, a changed value, a removed one, a new one that must be stripped — gives the new answer."""
    first = sanitize_host_env(os.environ, None).env
    monkeypatch.setenv("LC_XH_TEST", "one")
    assert sanitize_host_env(os.environ, None).env["LC_XH_TEST"] == "one"
    monkeypatch.setenv("LC_XH_TEST", "two")
    assert sanitize_host_env(os.environ, None).env["LC_XH_TEST"] == "two"
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    result = sanitize_host_env(os.environ, None)
    assert "LD_PRELOAD" not in result.env and "LD_PRELOAD" in result.stripped
    # the operator's inheritEnv is part of what the kept answer is for
    monkeypatch.setenv("XH_TEST_KEPT", "k")
    assert "XH_TEST_KEPT" not in sanitize_host_env(os.environ, None).env
    assert sanitize_host_env(os.environ, None, inherit=("XH_TEST_KEPT",)).env["XH_TEST_KEPT"] == "k"
    assert "XH_TEST_KEPT" not in sanitize_host_env(os.environ, None).env
    monkeypatch.delenv("XH_TEST_KEPT")
    monkeypatch.delenv("LC_XH_TEST")
    monkeypatch.delenv("LD_PRELOAD")
    again = sanitize_host_env(os.environ, None)
    assert "LC_XH_TEST" not in again.env and again.env == first
    # What a caller does to its copy never reaches the kept answer.
    again.env["MUTATED"] = "x"
    assert "MUTATED" not in sanitize_host_env(os.environ, None).env


def test_the_kept_copy_of_our_environ_follows_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """own_environ (every policy decision's env) is decoded once and kept (issue 19): a new, changed or
    removed variable gives the new answer, and a caller's changes to its copy never reach the kept one."""
    first = own_environ()
    assert first == dict(os.environ)
    monkeypatch.setenv("XH_TEST_KEPT", "one")
    assert own_environ()["XH_TEST_KEPT"] == "one"
    monkeypatch.setenv("XH_TEST_KEPT", "two")
    assert own_environ()["XH_TEST_KEPT"] == "two"
    monkeypatch.delenv("XH_TEST_KEPT")
    copy = own_environ()
    assert copy == first
    copy["MUTATED"] = "x"
    assert "MUTATED" not in own_environ()


def test_a_decision_follows_a_changed_path_in_our_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A decision without an explicit env resolves against this process's PATH as it is now, not as it
    was when the kept copy was made."""
    from engine.config.loader import load_config_text
    from engine.policy.decision import evaluate

    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n')
    paths = []
    home = Path(os.environ["HOME"])  # PATH dirs under /tmp are dropped (hostenv.host_path); the home's stay
    for name in ("a", "b"):
        (home / name).mkdir()
        tool = home / name / "eh-kept-tool"
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
        monkeypatch.setenv("PATH", f"{home / name}:/usr/bin:/bin")
        d = evaluate("eh-kept-tool", config=config, cwd=str(tmp_path))
        paths.append(d.segments[0]["resolvedPath"])
    assert paths == [str(home / "a" / "eh-kept-tool"), str(home / "b" / "eh-kept-tool")]
