"""What the gateway and the programs it trusts read outside the home's writable roots, found where they
find it: every such path is read-only in the host view, present or not, through every link on the way
(engine.commands.hostview; issue 27, fresh round 4 group A/B; rounds 6 l/m and 7 n: a list of protected
files in a writable home always missed the next one).

The trusted configs (git's global and system ones and what they include, npm's, cargo's, the shells' rc
files, every file ~/.ssh/config names), the programs those configs run, the trusted dirs (~/.ssh, the
gateway's import paths, its PATH), and each link hop and `..`-walked directory on the way to one of them.
"""

from __future__ import annotations

import os
import re

from engine.commands import configprograms, gatewaydirs, hostkeeper, importroots, sshinclude
from engine.commands.hostoutside import (
    NOTHING_OUTSIDE,
    HostViewError,
    Outside,
    creatable,
    home_dir,
    inside,
    shared,
)
from engine.statefs import state_dir

# Files the operator's shells run by themselves: at start (rc, profile, env) and when a login shell ends
# (~/.bash_logout is in Debian's /etc/skel; zsh reads ~/.zlogin after ~/.zshrc and ~/.zlogout at exit).
RC_FILES = (
    ".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
)  # fmt: skip


def git_configs(environ: dict[str, str] | None = None) -> list[str]:
    """The global and system git config files, as git finds them: ~/.gitconfig, the XDG one and
    /etc/gitconfig, and the files GIT_CONFIG_GLOBAL and GIT_CONFIG_SYSTEM name in the gateway's
    environment (git then reads those instead; fresh round 8 r)."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    found = [os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config"), "/etc/gitconfig"]
    for key in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        named = env.get(key)
        if named and os.path.isabs(named) and named != os.devnull:
            found.append(named)
    return found


def trusted_configs(environ: dict[str, str] | None = None) -> list[tuple[str, bool]]:
    """(path, bind even when missing): files the gateway trusts (gitvet reads the global and system git
    config, treecode the operator's npm and cargo config) or the operator runs (shell rc files). In the
    home they are read-only with it and no writable root may hold one; a missing one outside the home
    (an XDG_CONFIG_HOME elsewhere) is an empty read-only file when it may be made (it reads as no file) —
    never an rc file, where an empty ~/.bash_profile would hide ~/.profile from a login shell."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    always = [*git_configs(environ), os.path.join(home, ".npmrc")]
    cargo = [os.path.join(home, ".cargo", name) for name in ("config.toml", "config")]
    present = [p for p in cargo if os.path.lexists(p)]
    if not present and os.path.isdir(os.path.dirname(cargo[0])) and not scratch_cargo(environ):
        present = [cargo[0]]  # none yet: the one cargo would read first, made read-only
    rc = [os.path.join(home, name) for name in RC_FILES]
    ssh = ssh_files(home)
    return [(p, True) for p in always + present] + [(p, False) for p in rc] + [(p, True) for p in ssh]


_GLOB = re.compile(r"[*?\[]")


def ssh_files(home: str) -> list[str]:
    """What asyncssh reads as the operator's at every node connect, found where it finds it (fresh round
    8 r): every entry of ~/.ssh (a link there names a file elsewhere: a dotfiles checkout), and every
    file ~/.ssh/config includes, to depth 16 (`Include`, relative to ~/.ssh, `~` expanded), present or
    not; a glob's directory is a trusted dir (ssh_dirs)."""
    return _ssh_walk(home)[0]


def ssh_dirs(home: str) -> list[str]:
    """The directories an `Include` glob of ~/.ssh/config reads every file of: kept whole."""
    return _ssh_walk(home)[1]


def ssh_configs(home: str) -> list[str]:
    """~/.ssh/config and every file it includes (to depth 16), present or not, and ~/.ssh/known_hosts
    (and known_hosts2): what ssh in a host run reads that is not a credential, kept readable when
    private (engine.commands.homeprivate): host aliases resolve and hosts are verified, no key is read."""
    ssh = os.path.join(home, ".ssh")
    known = [os.path.join(ssh, n) for n in ("known_hosts", "known_hosts2")]
    return list(dict.fromkeys([*_ssh_walk(home)[2], *known]))


def _ssh_walk(home: str) -> tuple[list[str], list[str], list[str]]:
    ssh = os.path.join(home, ".ssh")
    try:
        files = [os.path.join(ssh, n) for n in sorted(os.listdir(ssh))]
    except OSError:
        return [], [], []
    dirs: list[str] = []
    todo = [(os.path.join(ssh, "config"), 0)]
    seen: set[str] = set()
    while todo:
        path, depth = todo.pop(0)
        if path in seen or depth > 16:
            continue
        seen.add(path)
        data = _read(path)
        for line in (data or b"").decode(errors="replace").splitlines():
            for word in sshinclude.include_words(line):
                inc = os.path.expanduser(word) if word.startswith("~") else word
                inc = inc if os.path.isabs(inc) else os.path.join(ssh, inc)
                if _GLOB.search(inc):
                    # the deepest directory above the first glob: asyncssh's glob walks every directory
                    # below it (`/dots/*/ssh.conf`, `**`), a new one a run makes among them (round 9 y)
                    fixed: list[str] = []
                    for part in inc.split(os.sep)[:-1]:
                        if _GLOB.search(part):
                            break
                        fixed.append(part)
                    dirs.append(os.sep.join(fixed) or os.sep)
                    todo += [(p, depth + 1) for p in sshinclude.globbed(inc)]
                else:
                    files.append(inc)
                    todo.append((inc, depth + 1))
    return list(dict.fromkeys(files)), list(dict.fromkeys(dirs)), list(seen)


def trusted_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """Directories the gateway itself reads to act, made read-only whole (what is created in them later is
    read too, so no file list could cover them): ~/.ssh (asyncssh reads its config, `Match exec` and
    `ProxyCommand` run programs, at every node connect; the keys and known_hosts that prove the nodes),
    everything the gateway's Python imports from (its code runs in every later gateway and session host),
    and the directories of the gateway's own PATH (the programs it runs by name: git, ssh; fresh round 8
    r: a Linuxbrew bin dir outside the home), but one every run may write already (`/tmp`) or `/`."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    found: list[str] = []
    ssh = os.path.join(home, ".ssh")
    if os.path.isdir(ssh):
        found.append(ssh)
    found += [d for d in ssh_dirs(home) if os.path.isdir(d) and not shared(os.path.realpath(d))]
    # an XDG config home outside the home is the operator's configs as ~/.config is (read-only with the
    # home): every tool's there (pip's index-url, systemd user units), not only git's (fresh round 8 r)
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) and not shared(os.path.realpath(xdg)):
        found.append(xdg)
    imports = [p for p in import_paths() if os.path.exists(p)]
    programs = [os.path.realpath(p) for p in env.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
    programs = [p for p in programs if os.path.isdir(p) and not shared(p)]
    for path in importroots.outermost(imports + programs):
        if path in imports and shared(path):
            raise HostViewError(
                f"the gateway's Python imports code from {path}, which every host run could write: start "
                "the gateway from its checkout (or with `python -P`), not from there"
            )
        if path not in found:
            found.append(path)
    return found


def import_paths() -> list[str]:
    """Where the gateway's Python finds code (engine.commands.importroots), with the host view's helper."""
    return importroots.import_paths(hostkeeper.helper_path())


def cargo_home(environ: dict[str, str] | None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cargo")


def scratch_cargo(environ: dict[str, str] | None) -> bool:
    """No ~/.cargo, or an empty one (the mountpoint an earlier view left): nothing of the operator's there,
    so the view puts a scratch one in its place. A command could otherwise make one, and its config would
    be the operator's to treecode and to every later cargo."""
    cargo = cargo_home(environ)
    if not os.path.lexists(cargo):
        return creatable(cargo)
    if os.path.islink(cargo) or not os.path.isdir(cargo):
        return False
    try:
        with os.scandir(cargo) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def link_hops(path: str, limit: int = 40, links: dict[str, bool] | None = None) -> list[str]:
    """Every link followed on the way from `path` to its file, in order, each named with a link-free
    directory (a link named by a link, a link on the directory part): re-pointing any one of them makes
    the path another file, so each is kept as the file is."""
    hops: list[str] = []
    resolved = os.sep
    pending = os.path.abspath(path).split(os.sep)[1:]
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        here = (resolved if resolved != os.sep else "") + os.sep + part
        known = links.get(here) if links is not None else None
        if known is None:
            known = os.path.islink(here)
            if links is not None:
                links[here] = known  # one lstat per name for a batch of paths
        if not known:
            resolved = here
            continue
        hops.append(here)
        if len(hops) > limit:
            break  # a loop: nothing reads through it
        try:
            target = os.readlink(here)
        except OSError:
            break
        if target.startswith(os.sep):
            resolved = os.sep
        pending = target.split(os.sep) + pending
    return hops


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except OSError:
        return None


# One git config file's include lines as git reads them, by (file, its bytes): git runs only when one
# of the files changed (the bytes are read on every view: 10 us; git itself takes ms).
_INCLUDES: dict[tuple[str, bytes], tuple[str, ...]] = {}


_INCLUDE_DEPTH = 10  # git's own limit on nested includes


def _includes_of(path: str, home: str) -> tuple[str, ...]:
    """The files one git config file includes (`include.path` and every `includeIf.*.path`, whatever
    the condition), as git reads the values (`--type=path`: `~` expanded), relative ones resolved
    against the including file's own name as git resolves them; present or not. And its absolute
    `core.hooksPath`: the hooks every later commit runs."""
    data = _read(path)
    if data is None:
        return ()
    key = (path, data)
    cached = _INCLUDES.get(key)
    if cached is not None:
        return cached
    found: list[str] = []
    out = configprograms.git_config_of(
        data, home, "--type=path", "--get-regexp", r"^(include(if\..*)?\.path|core\.hookspath)$"
    )
    if out is not None:
        for record in out.split(b"\0"):
            key_, sep, value = record.partition(b"\n")
            if not sep or not value:
                continue
            inc = os.fsdecode(value)
            if key_ == b"core.hookspath":
                # the operator's hooks, run by every commit (fresh round 8 r): kept as an include is (a
                # relative one is each repository's own, vetted with it)
                if os.path.isabs(inc):
                    found.append(inc)
                continue
            found.append(inc if os.path.isabs(inc) else os.path.join(os.path.dirname(path), inc))
    result = tuple(found)
    if len(_INCLUDES) > 256:
        _INCLUDES.clear()
    _INCLUDES[key] = result
    return result


def includes_known(environ: dict[str, str] | None = None) -> bool:
    """Whether git_includes can answer from its cache (every file on the way read, none changed): then
    no git runs, and an event loop may build the view's operations itself."""
    todo = [(p, 0) for p in git_configs(environ)]
    seen: set[str] = set()
    while todo:
        path, depth = todo.pop(0)
        if path in seen or depth > _INCLUDE_DEPTH:
            continue
        seen.add(path)
        data = _read(path)
        if data is None:
            continue
        cached = _INCLUDES.get((path, data))
        if cached is None:
            return False
        todo += [(inc, depth + 1) for inc in cached]
    return True


def git_includes(
    environ: dict[str, str] | None = None, configs: list[tuple[str, bool]] | None = None
) -> list[str]:
    """Every file the global and system git config include, and the files those include (to git's
    depth), present or not: git reads each as the operator's config, so each is kept as they are."""
    home = home_dir(environ)
    configs = trusted_configs(environ) if configs is None else configs
    roots = [p for p, _always in configs][: len(git_configs(environ))]  # git's global and system
    found: list[str] = []
    todo = [(p, 0) for p in roots]
    seen: set[str] = set()
    while todo:
        path, depth = todo.pop(0)
        if path in seen or depth > _INCLUDE_DEPTH:
            continue
        seen.add(path)
        for inc in _includes_of(path, home):
            if inc not in found:
                found.append(inc)
            todo.append((inc, depth + 1))
    return found


def config_programs(environ: dict[str, str] | None = None, includes: list[str] | None = None) -> list[str]:
    """The programs the operator's git, ssh, npm and cargo configs run (engine.commands.configprograms),
    outside the home (the home is read-only whole): kept read-only as the configs are (fresh round 10 a)."""
    home = home_dir(environ)
    includes = git_includes(environ) if includes is None else includes
    cargo = [os.path.join(home, ".cargo", name) for name in ("config.toml", "config")]
    found = configprograms.programs(
        [*git_configs(environ), *includes], ssh_files(home), home, [os.path.join(home, ".npmrc")], cargo
    )
    found += configprograms.git_paths([*git_configs(environ), *includes], home, (str(state_dir()),))
    return [p for p in dict.fromkeys(found) if not inside(os.path.realpath(p), home)]


def programs_known(environ: dict[str, str] | None = None) -> bool:
    """Whether config_programs can answer without running git; only after includes_known (its walk)."""
    return configprograms.git_known([*git_configs(environ), *git_includes(environ)])


def walked_dirs(paths: list[str]) -> list[str]:
    """For a path with `..` in it (`team/sub/../inc`), each directory the kernel walks before a `..`
    (`team/sub`): realpath keeps the file where `..` lands lexically when the directory is missing, but
    the kernel follows whatever is there by then, a link a run planted included. Kept as directories
    (made empty when missing), they resolve as the file was kept (fresh round 8 r)."""
    found: list[str] = []
    for path in paths:
        parts = path.split(os.sep)
        for at, part in enumerate(parts):
            if part == ".." and at > 1:
                walked = os.path.abspath(os.sep.join(parts[:at]))
                if walked != os.sep and walked not in found:
                    found.append(walked)
    return found


def trusted_files(
    state: str,
    environ: dict[str, str] | None = None,
    outside: Outside = NOTHING_OUTSIDE,
    includes: list[str] | None = None,
    dirs: list[str] | None = None,
    programs: list[str] | None = None,
) -> list[str]:
    """What the gateway or a program it trusts reads, by the names it reads them (present or not): the
    trusted configs, the git includes, the rc files, the trusted dirs, the state dir and what `outside`
    names (pathPrepend dirs, rootfs, config files, known_hosts among them)."""
    paths = [p for p, _always in trusted_configs(environ)]
    paths += walked_dirs(paths)  # an ssh Include with `..` (round 9 y)
    includes = git_includes(environ) if includes is None else includes
    programs = config_programs(environ, includes) if programs is None else programs
    paths += [*includes, *walked_dirs(includes), *programs, *walked_dirs(programs)]
    home = home_dir(environ)
    paths += [os.path.join(home, name) for name in RC_FILES]
    paths += [
        *(trusted_dirs(environ) if dirs is None else dirs),
        # a missing ssh Include glob directory (trusted_dirs keeps the present ones): no root may hold it
        *(d for d in ssh_dirs(home) if not os.path.lexists(d)),
        *import_paths(),
        state,
        *outside.covered,
        *outside.hidden,
        *outside.readonly,
        *outside.files,
    ]
    return list(dict.fromkeys(os.path.abspath(p) for p in paths))


def protected(
    state: str, environ: dict[str, str] | None = None, outside: Outside = NOTHING_OUTSIDE
) -> list[str]:
    """Every path the view keeps from the run's writes (resolved, present or not): trusted_files, every
    link on the way to each, and the PATH's directories (a program found there runs in the gateway's
    later commands). No writable root may hold one."""
    env = os.environ if environ is None else environ
    paths = trusted_files(state, environ, outside)
    links: dict[str, bool] = {}
    paths += [hop for p in list(paths) for hop in link_hops(p, links=links)]
    paths += [p for p in env.get("PATH", "").split(":") if p.startswith("/")]
    # the record of this account's gateways' state dirs (engine.commands.gatewaydirs): no run edits it
    paths.append(gatewaydirs.record_dir(home_dir(environ)))
    return sorted({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})
