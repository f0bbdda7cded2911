"""The env an autostarted gateway daemon gets: named keys of the starting client's env, never the rest. The
daemon serves every agent and the operator, so whichever client happened to start it (an agent's MCP
server, its harness's env) must not steer it: no key that moves the host view (EXECHOST_HOSTENTER,
EXECHOST_HOST_PRIVATE), no credential of that client, no API key its host runs would inherit."""

from __future__ import annotations

from collections.abc import Mapping

# What a process of the operator's account needs to find its files, programs, proxies and agents.
PLAIN = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TZ",
        "TERM",
        "LANG",
        "LANGUAGE",
        "TMPDIR",
        "SSH_AUTH_SOCK",  # node links log in through the operator's agent when a node names it
        "OPENCLAW_HOME",
        "OPENCLAW_STATE_DIR",
        "EXECHOST_CONFIG",
        "EXECHOST_HOST_HOME",  # the home host views protect, when HOME is not the account's (hostview)
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_CACHE_HOME",
        # the Docker engine the operator's sandboxes use (rootless Docker names it here)
        "DOCKER_HOST",
        "DOCKER_CONTEXT",
        "DOCKER_CONFIG",
        "DOCKER_CERT_PATH",
        "DOCKER_TLS_VERIFY",
        # the interpreter the client itself runs from (it chose sys.executable too: nothing more)
        "PYTHONPATH",
        "VIRTUAL_ENV",
        *(f"{p}_proxy" for p in ("http", "https", "no", "all", "ftp")),
        *(f"{p}_PROXY" for p in ("HTTP", "HTTPS", "NO", "ALL", "FTP")),
    }
)
PREFIXES = ("LC_",)
# The test suite's hooks (tests/conftest.py marks its run with TEST_MARK): passed only in a marked run.
# Not a boundary against a client that sets the mark itself; a boundary against every other key.
TEST_MARK = "EXECHOST_TEST_RUN"
TEST_HOOKS = frozenset(
    {
        TEST_MARK,
        "EXECHOST_HOST_PRIVATE",
        "EXECHOST_HOSTENTER",
        "EXECHOST_APPROVAL_TIMEOUT_MS",
        "EXECHOST_SESSION_HOLDERS",
        "EXECHOST_TEST_HOLD_SESSIONS",
        "EXECHOST_TEST_REBUILD_HELPERS",
        "PYTHONDONTWRITEBYTECODE",
        "COVERAGE_PROCESS_START",
        "COVERAGE_FILE",
    }
)


def daemon_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The keys of `environ` an autostarted daemon takes (PLAIN, LC_*, the test hooks in a marked run)."""
    hooks = TEST_MARK in environ
    return {
        k: v
        for k, v in environ.items()
        if k in PLAIN or k.startswith(PREFIXES) or (hooks and k in TEST_HOOKS)
    }
