"""The programs the operator's trusted configs run, by the paths they name (issue 27 §1, fresh round 10 a):
the host view keeps each read-only as it keeps the configs themselves, or a run rewrites what the
gateway's next node connect (ssh `Match exec`, `ProxyCommand`) or the operator's next git (a credential
helper, handed their token; `core.sshCommand`, a pager, an editor, a diff or merge driver), npm
(`script-shell`) or cargo (a linker, a runner, `rustc-wrapper`) runs.

Found the way each tool reads them: git's values through git itself (`git config --file -`, cached by
the file's bytes, as hostview's includes are), ssh's by its keywords, npm's ini lines, cargo's TOML. A
value is a shell command line: every absolute (or `~/`) path in it is kept, not only its first word
(`ProxyCommand python3 /opt/team/proxy.py %h` runs the script), present or not (a missing one is made
empty by the view)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tomllib

from engine import sysbin

# git's keys whose values git runs (git-config(1)), matched case-insensitively on git's canonical names:
# `<section>.<subsection>.<key>` keys of any subsection.
GIT_KEYS = (
    r"^(credential(\..*)?\.helper|core\.(sshcommand|pager|editor|askpass|fsmonitor|gitproxy)"
    r"|sequence\.editor|diff\.external|diff\..*\.(command|textconv)|merge\..*\.driver"
    r"|(diff|merge)tool\..*\.(cmd|path)|filter\..*\.(clean|smudge|process)|gpg(\..*)?\.program"
    r"|pager\..*|alias\..*|web\.browser|browser\..*\.(cmd|path)|sendemail\.(sendmailcmd|smtpserver)"
    r"|uploadpack\.packobjectshook)$"
)

# ssh_config(5) keywords whose value is a command ssh runs locally, or a library it loads
SSH_KEYS = ("proxycommand", "localcommand", "knownhostscommand", "pkcs11provider", "securitykeyprovider")
_SSH_LINE = re.compile(r"^\s*(\w+)(?:\s*=\s*|\s+)(.*)$")
_MATCH_EXEC = re.compile(r"""\bexec(?:\s+|\s*=\s*)("(?:[^"]*)"|\S+)""", re.IGNORECASE)

# An absolute or home path inside a shell command line: after a start, a blank, a quote or an operator.
_PATH = re.compile(r"""(?:^|(?<=[\s'"=;|&(<>!`]))(~?/[^\s'";|&()<>`$%]+)""")

# (file, its bytes) -> the paths its command-valued keys name
_GIT: dict[tuple[str, bytes], tuple[str, ...]] = {}
# (path, bytes) -> git's `--list` of them, for git_paths: read again only when a file's bytes change (every
# host view asks; a git per config file per run otherwise)
_LISTED: dict[tuple[str, bytes], bytes] = {}


def paths_in(command: str, home: str) -> list[str]:
    """Every absolute path a shell command line names (`~/` expanded against `home`)."""
    found = []
    for word in _PATH.findall(command):
        path = os.path.join(home, word[2:]) if word.startswith("~/") else word
        if not os.path.isdir(path):  # a program is a file: a directory named is an argument's
            found.append(os.path.normpath(path))
    return found


def _read(path: str) -> bytes | None:
    """A config file's bytes; None for anything but a regular file. Opened without blocking: a FIFO at a
    config's path would hold the gateway's decision until someone wrote it (and take what npm reads)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # never opened: a FIFO's writer would take the open for its reader
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(1 << 20)
    except OSError:
        return None
    finally:
        os.close(fd)


def git_known(files: list[str]) -> bool:
    """Whether git_programs can answer from its cache (no git to run): every file read, none changed."""
    for path in files:
        data = _read(path)
        if data is not None and ((path, data) not in _GIT or (path, data) not in _LISTED):
            return False
    return True


def git_programs(files: list[str], home: str) -> list[str]:
    """The paths the command-valued keys of these git config files name (the global and system ones and
    what they include: hosttrust.git_configs, git_includes)."""
    found: list[str] = []
    for path in files:
        for program in _git_file(path, home):
            if program not in found:
                found.append(program)
    return found


def git_config_of(data: bytes, home: str, *query: str) -> bytes | None:
    """git's own reading of one config file's bytes (`git config --file - --no-includes --null QUERY`),
    neutral: no system or global config, no repository, so git parses these bytes and nothing more; None
    where there is no git."""
    git = sysbin.which("git")
    if git is None:
        return None
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    proc = subprocess.run(
        [git, "config", "--file", "-", "--no-includes", "--null", *query],
        input=data, capture_output=True, env=env, cwd=os.sep, check=False,
    )  # fmt: skip
    return proc.stdout


def _git_file(path: str, home: str) -> tuple[str, ...]:
    data = _read(path)
    if data is None:
        return ()
    cached = _GIT.get((path, data))
    if cached is not None:
        return cached
    found: list[str] = []
    out = git_config_of(data, home, "--get-regexp", GIT_KEYS)
    if out is not None:
        for record in out.split(b"\0"):
            key, sep, value = record.partition(b"\n")
            if sep and (
                not key.startswith(b"alias.") or value.startswith(b"!")
            ):  # an alias runs only as `!…`
                found += paths_in(os.fsdecode(value), home)
    result = tuple(dict.fromkeys(found))
    if len(_GIT) > 256:
        _GIT.clear()
    _GIT[(path, data)] = result
    _listed(path, data, home)  # what git_paths reads of the same bytes, so git_known answers for both
    return result


def ssh_programs(files: list[str], home: str) -> list[str]:
    """The paths the commands of these ssh config files name (hosttrust.ssh_files: ~/.ssh's entries and
    every file its config includes): `Match exec`, ProxyCommand, LocalCommand, KnownHostsCommand and the
    libraries ssh loads (PKCS11Provider, SecurityKeyProvider)."""
    found: list[str] = []
    for path in files:
        data = _read(path)
        if data is None or b"\0" in data[:4096]:
            continue  # not a config (a key, a socket's absence)
        for line in data.decode(errors="replace").splitlines():
            m = _SSH_LINE.match(line)
            if m is None:
                continue
            keyword, value = m.group(1).lower(), m.group(2)
            if keyword in SSH_KEYS:
                found += paths_in(value, home)
            elif keyword == "match":
                for command in _MATCH_EXEC.findall(value):
                    found += paths_in(command.strip('"'), home)
    return list(dict.fromkeys(found))


# npm's config keys whose value npm runs (npm-config(7)): `npm run`'s shell, `npm edit`'s editor, ...
NPM_KEYS = frozenset({"script-shell", "shell", "editor", "browser", "git", "viewer"})
_NPM_LINE = re.compile(r"^\s*([\w.-]+)\s*=\s*(.*?)\s*$")


def npm_programs(files: tuple[str, ...] | list[str], home: str) -> list[str]:
    """The paths the command-valued keys of these .npmrc files name (ini lines, `key = value`)."""
    found: list[str] = []
    for path in files:
        data = _read(path)
        for line in (data or b"").decode(errors="replace").splitlines():
            m = _NPM_LINE.match(line)
            if m and m.group(1).lower() in NPM_KEYS:
                found += paths_in(m.group(2).strip("\"'"), home)
    return list(dict.fromkeys(found))


# cargo's config keys whose value cargo runs (The Cargo Book, Configuration): by table, any target
_CARGO_BUILD = ("rustc", "rustc-wrapper", "rustc-workspace-wrapper", "rustdoc")
_CARGO_TARGET = ("linker", "runner", "ar")


def cargo_programs(files: tuple[str, ...] | list[str], home: str) -> list[str]:
    """The paths the program-valued keys of these cargo config files name: build.rustc and its wrappers,
    rustdoc, every target's linker and runner, and the credential providers."""
    found: list[str] = []
    for path in files:
        data = _read(path)
        try:
            doc = tomllib.loads((data or b"").decode(errors="replace"))
        except tomllib.TOMLDecodeError:
            continue  # cargo refuses it too: nothing runs
        values: list[object] = []
        build, target, registry = doc.get("build"), doc.get("target"), doc.get("registry")
        if isinstance(build, dict):
            values += [build.get(k) for k in _CARGO_BUILD]
        if isinstance(target, dict):
            values += [t.get(k) for t in target.values() if isinstance(t, dict) for k in _CARGO_TARGET]
        if isinstance(registry, dict):
            values += [registry.get("credential-provider"), registry.get("global-credential-providers")]
        registries, aliases = doc.get("registries"), doc.get("credential-alias")
        if isinstance(registries, dict):
            values += [r.get("credential-provider") for r in registries.values() if isinstance(r, dict)]
        if isinstance(aliases, dict):
            values += list(aliases.values())
        for value in values:
            for word in value if isinstance(value, list) else [value]:
                if isinstance(word, str):
                    found += paths_in(word, home)
    return list(dict.fromkeys(found))


def programs(
    git_files: list[str],
    ssh_files: list[str],
    home: str,
    npm_files: tuple[str, ...] | list[str] = (),
    cargo_files: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """Every program the operator's git, ssh, npm and cargo configs run, by the paths they name, present
    or not."""
    found = [
        *git_programs(git_files, home),
        *ssh_programs(ssh_files, home),
        *npm_programs(npm_files, home),
        *cargo_programs(cargo_files, home),
    ]
    return list(dict.fromkeys(found))


# git config values git compares paths against and never opens (a repository the operator trusts).
_GIT_COMPARED = frozenset({b"safe.directory"})


def git_paths(files: list[str], home: str, keep_out: tuple[str, ...] = ()) -> list[str]:
    """Every path a value of these git config files names, whatever its key (fresh round 11 a:
    `init.templateDir`, whose hooks the operator's next clone copies and runs): absolute, `~/…` or
    `%(prefix)/…`, files and directories alike. Never one that is `/`, world-writable, or holds the home
    or a path of `keep_out` (the state dir): binding it read-only would take those from every run."""
    git = sysbin.which("git")
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(git))) if git else "/usr"
    found: list[str] = []
    for path in files:
        data = _read(path)
        for record in (_listed(path, data, home) if data is not None else b"").split(b"\0"):
            key, sep, raw = record.partition(b"\n")
            if not sep or key.lower() in _GIT_COMPARED:
                continue
            value = os.fsdecode(raw)
            if value.startswith("%(prefix)/"):
                value = prefix + value[len("%(prefix)") :]
            elif value.startswith("~"):
                value = os.path.expanduser(value) if not value.startswith("~/") else home + value[1:]
            if not value.startswith(os.sep) or "\n" in value:
                continue
            value = os.path.normpath(value)
            if _too_wide(value, (home, *keep_out)):
                continue
            found.append(value)
    return list(dict.fromkeys(found))


def _listed(path: str, data: bytes, home: str) -> bytes:
    cached = _LISTED.get((path, data))
    if cached is None:
        cached = git_config_of(data, home, "--list") or b""
        if len(_LISTED) > 256:
            _LISTED.clear()
        _LISTED[(path, data)] = cached
    return cached


def _too_wide(path: str, held: tuple[str, ...]) -> bool:
    if path == os.sep:
        return True
    real = os.path.realpath(path)
    for p in held:
        for name in {p, os.path.realpath(p)}:
            if name == real or name.startswith(real.rstrip(os.sep) + os.sep):
                return True
    try:
        return os.path.isdir(real) and bool(os.stat(real).st_mode & stat.S_IWOTH)
    except OSError:
        return False
