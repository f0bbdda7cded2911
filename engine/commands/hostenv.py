"""Host exec environment: strip loader and credential variables, refuse dangerous overrides (§1.7)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import pathtrust
from engine.commands import proxyenv
from engine.commands.analysis import names
from engine.results import ToolError

# Rejected when inherited and when requested: they load code into whatever the command starts.
BLOCKED_EVERYWHERE_KEYS = names(
    "NODE_OPTIONS NODE_PATH PYTHONHOME PYTHONPATH PERL5LIB PERL5OPT RUBYLIB RUBYOPT BASH_ENV ENV BROWSER "
    "GIT_EDITOR GIT_EXTERNAL_DIFF GIT_DIR GIT_WORK_TREE GIT_COMMON_DIR GIT_EXEC_PATH GIT_INDEX_FILE "
    "GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_NAMESPACE GIT_SEQUENCE_EDITOR "
    "GIT_TEMPLATE_DIR GIT_SSL_NO_VERIFY GIT_SSL_CAINFO GIT_SSL_CAPATH CC CXX CARGO_BUILD_RUSTC "
    "CARGO_BUILD_RUSTC_WRAPPER RUSTC_WRAPPER CMAKE_C_COMPILER CMAKE_CXX_COMPILER SHELL SHELLOPTS PS4 "
    "GCONV_PATH IFS SSLKEYLOGFILE JAVA_OPTS JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS "
    "PYTHONBREAKPOINT DOTNET_STARTUP_HOOKS DOTNET_ADDITIONAL_DEPS GLIBC_TUNABLES MAVEN_OPTS MAKEFLAGS "
    "MFLAGS SBT_OPTS GRADLE_OPTS ANT_OPTS HGRCPATH EXINIT VIMINIT MYVIMRC GVIMINIT LUA_INIT LUA_INIT_5_1 "
    "LUA_INIT_5_2 LUA_INIT_5_3 LUA_INIT_5_4 EMACSLOADPATH RUBYSHELL GIT_HOOK_PATH SVN_EDITOR SVN_SSH "
    "BZR_EDITOR BZR_SSH BZR_PLUGIN_PATH SUDO_ASKPASS JULIA_EDITOR CONFIG_SITE CONFIG_SHELL "
    "CMAKE_TOOLCHAIN_FILE CATALINA_OPTS CORECLR_PROFILER HELM_PLUGINS PACKER_PLUGIN_PATH "
    "VAGRANT_VAGRANTFILE ERL_AFLAGS ERL_FLAGS ERL_ZFLAGS ELIXIR_ERL_OPTIONS R_ENVIRON R_PROFILE "
    "R_ENVIRON_USER R_PROFILE_USER HOSTALIASES"
)
BLOCKED_PREFIXES = ("DYLD_", "LD_", "BASH_FUNC_")
# The gateway's own variables never reach a command: a daemon started by an agent's client (its MCP server
# autostarts it) inherited that client's EXECHOST_AGENT_TOKEN, and every other agent's command then read it.
GATEWAY_OWN_PREFIXES = ("EXECHOST_",)

# Rejected when requested through `env`; stripped when inherited unless listed as allowed below.
BLOCKED_OVERRIDE_ONLY_KEYS = names(
    # home and config
    "HOME ZDOTDIR XDG_CONFIG_HOME XDG_CONFIG_DIRS GRADLE_USER_HOME "
    # git
    "GIT_SSH GIT_SSH_COMMAND GIT_PROXY_COMMAND GIT_ASKPASS SSH_ASKPASS GIT_PAGER "
    # pagers, editors, shells
    "PAGER MANPAGER LESSOPEN LESSCLOSE EDITOR VISUAL FCEDIT SUDO_EDITOR PROMPT_COMMAND HISTFILE PERL5DB "
    "PERL5DBCMD OPENSSL_CONF OPENSSL_ENGINES PYTHONSTARTUP WGETRC CURL_HOME CLASSPATH "
    # proxies and TLS
    "HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY NODE_TLS_REJECT_UNAUTHORIZED NODE_EXTRA_CA_CERTS "
    "SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE "
    # docker
    "DOCKER_HOST DOCKER_TLS_VERIFY DOCKER_CERT_PATH DOCKER_CONTEXT "
    # package registries
    "PIP_INDEX_URL PIP_PYPI_URL PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE PIP_FIND_LINKS PIP_TRUSTED_HOST UV_INDEX "
    "UV_INDEX_URL UV_PYTHON UV_EXTRA_INDEX_URL UV_DEFAULT_INDEX GOPROXY GOFLAGS GONOSUMCHECK GONOSUMDB "
    "GONOPROXY GOPRIVATE GOENV GOPATH BUN_CONFIG_REGISTRY YARN_RC_FILENAME DENO_DIR COMPOSER_HOME "
    # compiler flags
    "CFLAGS CXXFLAGS LDFLAGS CPPFLAGS CGO_CFLAGS CGO_LDFLAGS CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH "
    "OBJC_INCLUDE_PATH LIBRARY_PATH RUSTFLAGS CARGO_HOME "
    # language runtimes
    "GEM_HOME GEM_PATH BUNDLE_GEMFILE LUA_PATH LUA_CPATH VIRTUAL_ENV PYTHONUSERBASE PHPRC PHP_INI_SCAN_DIR "
    "CORECLR_PROFILER_PATH "
    # cloud credential files and tool config
    "KUBECONFIG AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE AWS_WEB_IDENTITY_TOKEN_FILE "
    "GOOGLE_APPLICATION_CREDENTIALS AZURE_AUTH_LOCATION ANSIBLE_CONFIG TF_CLI_CONFIG_FILE HELM_HOME "
    # credentials
    "AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SECURITY_TOKEN AZURE_CLIENT_ID "
    "AZURE_CLIENT_SECRET AZURE_TENANT_ID DATABASE_URL GH_TOKEN GITHUB_TOKEN GITLAB_TOKEN MONGODB_URI "
    "NODE_AUTH_TOKEN NPM_TOKEN REDIS_URL SSH_AUTH_SOCK SYSTEMROOT WINDIR"
)
BLOCKED_OVERRIDE_PREFIXES = ("GIT_CONFIG_", "NPM_CONFIG_", "CARGO_REGISTRIES_", "TF_VAR_", "ANSIBLE_")

# Kept when inherited (the operator's own machine setup) while still refused as overrides.
ALLOWED_INHERITED_OVERRIDE_ONLY_KEYS = names(
    "HOME SSH_AUTH_SOCK HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY NODE_TLS_REJECT_UNAUTHORIZED "
    "NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE KUBECONFIG DOCKER_HOST "
    "DOCKER_CONTEXT DOCKER_CERT_PATH DOCKER_TLS_VERIFY AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE "
    "AWS_WEB_IDENTITY_TOKEN_FILE GOOGLE_APPLICATION_CREDENTIALS AZURE_AUTH_LOCATION PAGER MANPAGER GIT_PAGER "
    "HISTFILE ZDOTDIR GRADLE_USER_HOME XDG_CONFIG_HOME XDG_CONFIG_DIRS"
)

# Keys a common tool reads as code to run or a path to write (issue 9): refused as overrides, stripped when
# inherited. Families by prefix/suffix, since tools keep adding members (GIT_TRACE_*, *_PAGER, *_EDITOR).
CODE_KEY_PREFIXES = (
    "GIT_",
    "LESS",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "BASH_",
    "LUA_",
    "TCL",
    "GUILE_",
    "RSYNC_",
    "SYSTEMD_",
    "MALLOC_",
    "ZSH",
    "KSH_",
    "JULIA_",
    "IRB",
    "GEM_",
    "BUNDLE_",
)
CODE_KEY_SUFFIXES = ("PAGER", "EDITOR", "HISTFILE", "_HISTORY", "RSH", "_OPTIONS", "_OPTS")
CODE_KEYS = names(
    "EDITOR VISUAL PAGER MANOPT MANPATH MANROFFOPT TAR_OPTIONS MAKEFILES AWKPATH AWKLIBPATH PSQLRC INPUTRC "
    "IPYTHONDIR SCREENRC TMUX_TMPDIR SQLITE_HISTORY MYSQL_HISTFILE GZIP BZIP BZIP2 XZ_OPT XZ_DEFAULTS "
    "ZSTD_NBTHREADS GREP_OPTIONS"
)
# Harmless members of those families an agent may set.
CODE_KEY_ALLOWED = names(
    "GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_AUTHOR_DATE GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL "
    "GIT_COMMITTER_DATE GIT_TERMINAL_PROMPT GIT_FLUSH GIT_OPTIONAL_LOCKS NODE_ENV PYTHONUNBUFFERED "
    "PYTHONDONTWRITEBYTECODE PYTHONIOENCODING PYTHONHASHSEED PYTHONUTF8 LESSCHARSET"
)

# Set for every host exec, over anything inherited or requested: no pager or editor can be started
# (their shell escapes, `!cmd` in less or `:!cmd` in vi, run anything), and git ignores the code hooks
# a repository's own config can name (a sandbox with workspaceAccess="rw" can write that config).
FORCED_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESSSECURE": "1",
    "EDITOR": "false",
    "VISUAL": "false",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
}
GIT_FORCED_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("core.gitProxy", ""),
    ("protocol.ext.allow", "never"),
    # No `diff.external` here: an empty one is a program named "" to git, and every `git diff` of a change
    # died. A repository's own is not inert (gitvet asks), the global config is read-only in the host view,
    # and GIT_EXTERNAL_DIFF is no inert env key.
    ("core.alternateRefsCommand", ""),
    # Never run git inside a submodule unasked: git reads the index again after the spawn's re-vet, so a
    # gitlink added in between named a repository nobody vetted, and status ran its filter there. With
    # these, status and diff compare only the commit a gitlink records (no `git status` in the
    # submodule's work tree), no summary or inline diff runs there, and fetch, pull, checkout, … do not
    # recurse unless the argv asks (and such an argv asks: gitvet). Child gits keep this config.
    ("diff.ignoreSubmodules", "dirty"),
    ("status.submoduleSummary", "false"),
    ("diff.submodule", "short"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
)


def git_config_env() -> dict[str, str]:
    """GIT_CONFIG_COUNT/KEY/VALUE: command-line scope, so they win over any repository's own config."""
    return dict(_GIT_CONFIG_ENV)


def _git_config_env() -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(GIT_FORCED_CONFIG))}
    for index, (key, value) in enumerate(GIT_FORCED_CONFIG):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


_GIT_CONFIG_ENV = _git_config_env()


def is_code_key(key: str) -> bool:
    """A variable some common tool runs as code or writes to as a path (GIT_TRACE, LESS, PAGER, …)."""
    upper = key.upper()
    if upper in CODE_KEY_ALLOWED:
        return False
    return upper in CODE_KEYS or upper.startswith(CODE_KEY_PREFIXES) or upper.endswith(CODE_KEY_SUFFIXES)


# Issue 27 §3: the only env keys an agent may set on a command that runs without an ask (allowlist, safe
# bin, allow-always, grant). They name a locale, a time zone, a terminal's size or colour wishes, or data a
# commit records: no program reads them as code or as a place to find code. Any other key makes the
# command ask, however harmless it looks, since tools keep adding hooks (GNUMAKEFLAGS=--eval,
# PYENV_HOOK_PATH, RUSTUP_TOOLCHAIN=<dir>); the operator adds keys with `tools.exec.inertEnv`.
INERT_ENV_KEYS = names(
    "LANG LANGUAGE LC_ALL LC_CTYPE LC_COLLATE LC_MESSAGES LC_MONETARY LC_NUMERIC LC_TIME LC_PAPER LC_NAME "
    "LC_ADDRESS LC_TELEPHONE LC_MEASUREMENT LC_IDENTIFICATION TZ TERM COLUMNS LINES NO_COLOR FORCE_COLOR "
    "CLICOLOR CLICOLOR_FORCE GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_AUTHOR_DATE GIT_COMMITTER_NAME "
    "GIT_COMMITTER_EMAIL GIT_COMMITTER_DATE"
)


# An inert key is inert only with a value of its own grammar: a locale name, a zone name, a terminal name,
# a number. glibc reads a locale or message catalogue from a path a value names (`LANGUAGE=../../tmp/x`
# made `ls` print the agent's .mo strings as its printf formats), a zone file from `TZ=/path`, ncurses a
# terminfo entry from a TERM with a slash. Values are allowed by shape, never refused by pattern.
_LOCALE = r"(?:C|POSIX|[A-Za-z]{2,3}(?:_[A-Za-z]{2,3})?)(?:\.[A-Za-z0-9_-]+)?(?:@[A-Za-z0-9_-]+)?"
_ZONE_PART = r"[A-Za-z0-9_+-]+"
_INERT_VALUE = {
    "LANG": re.compile(f"(?:{_LOCALE})?"),
    "LANGUAGE": re.compile(f"(?:{_LOCALE})?(?::{_LOCALE})*"),
    # A zone name under the system's zoneinfo (`Europe/Paris`, `:UTC`) or a POSIX rule (`EST5EDT,M3.2.0`,
    # `<+03>-3`): no leading slash, no `..`, so no file outside the system's zone directory.
    "TZ": re.compile(rf":?(?:{_ZONE_PART}(?:/{_ZONE_PART})*|[A-Za-z0-9<>+,.:-]*)"),
    "TERM": re.compile(r"[A-Za-z0-9_.+-]*"),
    # A terminal's size, at most 999: GNU ls -C sizes its column table in the square of COLUMNS/3, and
    # COLUMNS=999999 over 10,000 files asked for more than 512 MiB from an allowlisted `ls` (fresh round
    # 17 a); 999 columns is 0.4 MB there, and wider than any real terminal.
    "COLUMNS": re.compile(r"[0-9]{0,3}"),
    "LINES": re.compile(r"[0-9]{0,3}"),
}


def inert_value(key: str, value: str) -> bool:
    """Whether `value` has the shape an inert key's value has (keys without a grammar take any value)."""
    upper = key.upper()
    grammar = _INERT_VALUE.get("LANG" if upper.startswith("LC_") else upper)
    if grammar is None:
        return True
    if upper == "TZ" and ".." in value:
        return False
    return grammar.fullmatch(value) is not None


def foreign_env_keys(overrides: Mapping[str, str] | None, extra: Sequence[str] = ()) -> list[str]:
    """The keys of `overrides` that are not inert (INERT_ENV_KEYS with a value of its grammar, plus the
    operator's `extra`): each one makes a command that would run unasked ask instead."""
    operator = {k.upper() for k in extra}
    return sorted(
        k
        for k, v in (overrides or {}).items()
        if str(k).upper() not in operator
        and (str(k).upper() not in INERT_ENV_KEYS or not inert_value(str(k), str(v)))
    )


def inert_env_problem(key: str) -> str | None:
    """Why an operator's `inertEnv` entry cannot be inert: not a variable name, PATH, or a key refused
    on every host exec anyway (it would never reach the command)."""
    if not _PORTABLE_KEY.fullmatch(key):
        return f"{key!r} is not an environment variable name"
    if key.upper() == "PATH" or is_blocked_override(key):
        return f"{key} is refused on every host exec (it loads code, credentials or a search path)"
    return None


def inherit_env_problem(key: str) -> str | None:
    """Why an operator's `inheritEnv` entry can never reach a host run: not a variable name, or a key
    refused on inheritance whatever is listed (it loads code, or is the gateway's own)."""
    if not _PORTABLE_KEY.fullmatch(key):
        return f"{key!r} is not an environment variable name"
    if is_blocked_inherited(key):
        return f"{key} is never inherited by a host run (it loads code or is the gateway's own)"
    return None


_PORTABLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WINDOWS_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_()]*")  # `ProgramFiles(x86)`

PATH_MESSAGE = "Security Violation: Custom 'PATH' variable is forbidden during host execution."
PATH_PREPEND_NODE_WARNING = (
    "Warning: tools.exec.pathPrepend is ignored for host=node. "
    "Configure PATH on the node host/service instead."
)


@dataclass
class SanitizedEnv:
    env: dict[str, str]
    warnings: list[str]
    stripped: list[str] = field(default_factory=list)  # inherited keys dropped (names only, never values)


def is_blocked_everywhere(key: str) -> bool:
    upper = key.upper()
    return upper in BLOCKED_EVERYWHERE_KEYS or upper.startswith(BLOCKED_PREFIXES)


@functools.lru_cache(maxsize=4096)  # asked of every inherited key on every host exec; answers never change
def is_blocked_inherited(key: str) -> bool:
    upper = key.upper()
    if upper.startswith(GATEWAY_OWN_PREFIXES):
        return True
    if is_blocked_everywhere(upper) or (is_code_key(upper) and upper not in FORCED_ENV):
        return True
    return upper in BLOCKED_OVERRIDE_ONLY_KEYS and upper not in ALLOWED_INHERITED_OVERRIDE_ONLY_KEYS


def is_blocked_override(key: str) -> bool:
    upper = key.upper()
    return (
        is_blocked_everywhere(upper)
        or upper in BLOCKED_OVERRIDE_ONLY_KEYS
        or upper.startswith(BLOCKED_OVERRIDE_PREFIXES)
        or is_code_key(upper)
    )


# Issue 27 §1: what a host run inherits from the gateway's environment is a list of what is allowed, not
# of credentials refused: whatever else the gateway was started with (an agent's harness autostarting it
# passes its own model API key; the operator's shell, its cloud tokens) is every agent's otherwise, and no
# list of secret names is ever complete (ANTHROPIC_API_KEY, HF_TOKEN, VAULT_TOKEN, PGPASSWORD: round 10
# a). These say where things are and how to talk: the operator adds keys with `tools.exec.inheritEnv`.
INHERITED_KEYS = names(
    "PATH HOME USER LOGNAME LANG LANGUAGE TZ TERM COLORTERM COLUMNS LINES NO_COLOR FORCE_COLOR CLICOLOR "
    "CLICOLOR_FORCE TMPDIR TMP TEMP SHLVL HOSTNAME XDG_CONFIG_HOME XDG_CONFIG_DIRS XDG_DATA_HOME "
    "XDG_DATA_DIRS XDG_CACHE_HOME XDG_STATE_HOME XDG_RUNTIME_DIR HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY "
    "SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS JAVA_HOME GOROOT "
    "RUSTUP_HOME DEBIAN_FRONTEND CI"
)
INHERITED_PREFIXES = ("LC_",)


def inherited_allowed(key: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a host run keeps this key of the gateway's environment (INHERITED_KEYS, a locale key, or
    the operator's `inheritEnv`), never one refused on inheritance anyway."""
    upper = key.upper()
    listed = upper in INHERITED_KEYS or upper.startswith(INHERITED_PREFIXES) or upper in extra
    return listed and not is_blocked_inherited(key)


def _filter_inherited(
    base: Mapping[str, str], extra: frozenset[str] = frozenset()
) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    stripped: list[str] = []
    for key, value in base.items():
        if not inherited_allowed(key, extra) or "\x00" in key or "\x00" in value or "=" in key or not key:
            stripped.append(key)
        else:
            env[key] = proxyenv.without_userinfo(key, value, extra)
    return env, stripped


_own_env: tuple[object, dict[str, str], list[str]] | None = None
_environ: tuple[tuple[Any, ...], dict[str, str]] | None = None


def own_environ() -> dict[str, str]:
    """A copy of this process's environment. `dict(os.environ)` decodes every key and value on each call
    (~60 µs, on every policy decision); the decoded dict is kept until the raw environment changes, which
    its raw items, compared in C, tell."""
    global _environ
    raw = getattr(os.environ, "_data", None)
    if not isinstance(raw, dict):
        return dict(os.environ)
    fingerprint = tuple(raw.items())
    if _environ is None or _environ[0] != fingerprint:
        _environ = (fingerprint, dict(os.environ))
    return dict(_environ[1])


def _inherited(base: Mapping[str, str], extra: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """What survives of `base`; for this process's own environment (every gateway exec) the answer is kept
    until the environment or the operator's `inheritEnv` changes. Its raw items are compared each time (a
    few µs, in C) instead of decoding and vetting every variable again (~75 µs per exec)."""
    global _own_env
    raw = getattr(base, "_data", None) if base is os.environ else None
    if not isinstance(raw, dict):
        return _filter_inherited(base, extra)
    fingerprint = (tuple(raw.items()), extra)
    if _own_env is None or _own_env[0] != fingerprint:
        env, stripped = _filter_inherited(base, extra)
        _own_env = (fingerprint, env, stripped)
    return _own_env[1], list(_own_env[2])


def sanitize_host_env(
    base: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
    *,
    block_path_overrides: bool = True,
    inherit: Sequence[str] = (),
) -> SanitizedEnv:
    """The env a host command runs with (of `base`, only what INHERITED_KEYS and the operator's `inherit`
    allow); ToolError with the reference's texts on a refused override."""
    inherited, stripped = _inherited(base, frozenset(k.upper() for k in inherit))
    env = dict(inherited)
    blocked: list[str] = []
    invalid: list[str] = []
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            invalid.append(str(key))
        elif not (_PORTABLE_KEY.fullmatch(key) or _WINDOWS_KEY.fullmatch(key)):
            invalid.append(key)
        elif key.upper() == "PATH":
            if block_path_overrides:
                blocked.append(key)
        elif is_blocked_override(key):
            blocked.append(key)
        elif "\x00" in value:
            invalid.append(key)  # execve cannot carry it; refusing beats truncating silently
    _raise_for(blocked, invalid)
    for key, value in (overrides or {}).items():
        env[key] = value
    env.update(FORCED_ENV)
    env.update(_GIT_CONFIG_ENV)
    env["OPENCLAW_CLI"] = "1"
    if "PATH" in env:
        env["PATH"] = host_path(env["PATH"])
    return SanitizedEnv(env, [], stripped)


def _raise_for(blocked: list[str], invalid: list[str]) -> None:
    if not blocked and not invalid:
        return
    path_blocked = any(key.upper() == "PATH" for key in blocked)
    if path_blocked and len(blocked) == 1 and not invalid:
        raise ToolError(PATH_MESSAGE)
    if len(blocked) == 1 and not invalid:
        raise ToolError(
            f"Security Violation: Environment variable '{blocked[0]}' is forbidden during host execution."
        )
    details = []
    if blocked:
        details.append(f"blocked override keys: {', '.join(blocked)}")
    if invalid:
        details.append(f"invalid non-portable override keys: {', '.join(invalid)}")
    suffix = "; ".join(details)
    if path_blocked:
        raise ToolError(
            f"Security Violation: Custom 'PATH' variable is forbidden during host execution ({suffix})."
        )
    raise ToolError(f"Security Violation: {suffix}.")


def host_path(value: str, prepend: Sequence[str] = ()) -> str:
    """The PATH a host command runs (and is decided) with: `prepend` then `value`, absolute entries only,
    and only directories no host command can change. An empty or relative entry is a directory execvp
    finds relative to the cwd — the agent's tree — so a program run by name (tar's decompressor, make's
    shell, git's ssh) could come from there; the same for a directory outside the home that this user
    (and so any allowlisted writer) can change. The home is read-only in the host view: its entries stay
    (engine.commands.hostview refuses a hostWritable dir that holds a PATH or pathPrepend entry)."""
    home = os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))
    entries: list[str] = []
    # A pathPrepend dir is searched as the directory it resolves to now: the view binds that one read-only
    # (engine.tools.exec_host.program_dirs), and a link to it is no longer followed at each lookup.
    resolved = [os.path.realpath(p) if p.startswith("/") else p for p in prepend]
    for entry in [*resolved, *value.split(":")]:
        if entry.startswith("/") and entry not in entries and _unchangeable(entry, home):
            entries.append(entry)
    return ":".join(entries)


def prepend_left_out(prepend: Sequence[str]) -> list[str]:
    """The warnings for `pathPrepend` dirs host_path leaves out of PATH: the operator configured them, and a
    program that is then not found must not be the only sign of it."""
    home = os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))
    return [
        f"Warning: pathPrepend dir {entry} is not on PATH: "
        + (
            "it is not an absolute path."
            if not entry.startswith("/")
            else "an account other than root may change it or a directory above it, and a host command "
            "must not find programs there; move it under a root-owned directory or the home."
        )
        for entry in prepend
        if entry and ":" not in entry and not (entry.startswith("/") and _unchangeable(entry, home))
    ]


def _unchangeable(entry: str, home: str) -> bool:
    real = os.path.realpath(entry)
    in_home = home != os.sep and (real == home or real.startswith(home + os.sep))
    while not os.path.lexists(real) and real != os.sep:  # missing: whoever may make it
        real = os.path.dirname(real)
    return in_home or pathtrust.only_root_changes(real)


def apply_path_prepend(env: dict[str, str], path_prepend: list[str], *, host: str) -> list[str]:
    """Prepend `tools.exec.pathPrepend` on the gateway; host=node ignores it with the reference warning."""
    entries = [p for p in path_prepend if p and ":" not in p]
    if not entries:
        return []
    if host == "node":
        return [PATH_PREPEND_NODE_WARNING]
    env["PATH"] = host_path(env.get("PATH", ""), entries)
    return []
