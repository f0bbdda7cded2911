"""Every command run on the gateway host starts in a private mount namespace where the state dir is an
empty tmpfs, the gateway user's home is read-only as a whole but for the operator's `hostWritable` dirs
(never a directory the agent names), and what the gateway or a program it trusts reads outside the home is
read-only, present or not, through every link on the way (issue 27, fresh round 4 group A/B; rounds 6 l/m
and 7 n: a list of protected files in a writable home, or of writable workdirs, always missed the next one).

A check of the words a command names can always be walked around (a link, /proc/self/cwd, a response
file, a URL, a recursive walk, a file the program reads naming another); a path that is not in the
command's namespace cannot be named, walked, followed or raced into. The pinned view (engine.commands.
pinned) adds its own bwrap arguments after these: one bubblewrap per run. A run with nothing pinned
enters a view prepared once instead (engine.commands.hostkeeper: the same operations, kept).

Every run has a PID namespace of its own with its own /proc (issue 31): the gateway's and the session
hosts' /proc/<pid>/root, cwd and fd lead into the host's mount namespace, where the state dir is not
covered; in the run's /proc they do not exist. Every run has a /dev/pts of its own too (a devpts
instance, made by exechost-hostenter): another agent's terminal session and the operator's terminal are
in the host's, which no run can name; a terminal session's own terminal is made in the run's.
Every run of an agent joins its agent's network namespace first (engine.commands.hostnet: only `lo`,
egress through the sandboxes' proxy), unless the operator set hostNetwork = "host".

bwrap stays the parent of the command (it always forks and waits), in the command's process group: it is
started with ^C, ^\\ and ^Z ignored, so the terminal's and the session host's SIGINT/SIGQUIT/SIGTSTP reach
the command and leave bwrap waiting, and the command gets them back at their default (`env
--default-signal`). bwrap reports a command killed by signal n as exit 128+n, as a command's own `exit 130`
is reported, so a run in a bwrap of its own starts the helper's `status` mode (STATUS_WORDS) first: the
spawner fills its slot with a pipe and reads the command's own wait status there (engine.sessions.host_io.
status_pipe). Only a run with no helper is left to exit_status()'s guess (130/131 read as SIGINT/SIGQUIT).
A run in the kept view is told exactly (exechost-hostenter dies of the command's signal).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from engine import sysbin
from engine.commands import (
    bindsource,
    configprograms,
    dirshadow,
    homelayer,
    homeprivate,
    homesockets,
    hostkeeper,
    hostnet,
    hostprivate,
    importroots,
    otherroots,
    sshinclude,
)
from engine.statefs import state_dir

ENV = "/usr/bin/env"
CGROUPS = "/sys/fs/cgroup"  # read-only in every view (view_args)
# Signals a terminal (or an operator's ^C) sends: the command's, never bwrap's to die of.
_TERMINAL = "INT,QUIT,TSTP"
IGNORE = f"--ignore-signal={_TERMINAL}"
RESTORE = f"--default-signal={_TERMINAL}"
# Every run's own PID namespace and /proc, and its own IPC namespace: SysV shared memory, semaphores and
# message queues are in no directory a view can cover, and one agent's segment was every run's to attach
# (fresh round 10 a). The kept view's runs get theirs from exechost-hostenter.
# The run's /dev: bwrap's own (null, zero, full, random, urandom, tty; /dev/fd and the std links; a
# shm dir, its agent's own bound there by hostprivate), then the devpts the run was given (exechost-
# hostenter's: capped, its own) bound back over bwrap's. What is allowed, not a list of what is refused:
# the host's devtmpfs held every node the gateway's account opens by a group or a seat ACL (kvm, disk,
# video, audio, the webcam, a FIDO key), each an allowlisted `cat`'s (fresh round 13 b).
DEV_OPS = ("--dev", "/dev", "--dev-bind", "/dev/pts", "/dev/pts")
PID_OPS = ("--unshare-pid", "--unshare-ipc", "--proc", "/proc")
# A wrapped run with no status pipe whose command died of one of these is reported as that signal (bwrap
# says 128+n); with one, the command's own status is read (engine.sessions.host_io, the same words).
_REPORTED = (signal.SIGINT, signal.SIGQUIT)
STATUS_WORDS = ("status", "-")
INSTALL_HINT = (
    "gateway-host commands run with the state dir hidden, which needs bubblewrap: install it "
    '(apt-get install bubblewrap), or set [tools.exec] hostView = "none" to run them without it'
)


@dataclass(frozen=True)
class Outside:
    """What the gateway holds outside the state dir, named by its config (the caller's: this layer reads
    no config): files no host command may read (the nodes' SSH identity files: whoever holds one speaks
    to that node as the gateway), directories no host command may change (the agents' socket's: one
    agent's `rm` would take it from every other), directories covered whole as the state dir is (the
    sandbox workspace roots: every agent's sandbox files, wherever the operator put them), files the
    gateway reads to decide (its config file, a seccomp profile, known_hosts files: read-only, made empty
    when missing), directories whose programs run later (every pathPrepend dir and bwrap rootfs, in
    `readonly`), the home's directories the operator lets host commands write (`[tools.exec]
    hostWritable`; every agent's in `writable_anywhere`), and the run's own workdir (only for
    workdir_note: it is never made writable)."""

    hidden: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()
    covered: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    workdir: str | None = None
    # every agent's `hostWritable` (the config's): another agent's runs may rename in its dirs
    writable_anywhere: tuple[str, ...] = ()
    # the `tasks` file of the agent's pids cgroup its runs join first (engine.sandbox.bwraplimits)
    join_tasks: str | None = None
    # (source, destination): the agent's own /tmp, /var/tmp, ... (engine.commands.hostprivate)
    private: tuple[tuple[str, str], ...] = ()
    # the workdir as the run names it, when it is in the agent's private copy (its host path is there)
    chdir: str | None = None
    # whose network namespace the run joins (engine.commands.hostnet: the agent's own, kept); None: the
    # host's ([tools.exec] hostNetwork = "host")
    net_agent: str | None = None


NOTHING_OUTSIDE = Outside()


class HostViewError(Exception):
    """A gateway-host run cannot be given its view: it is refused."""


def bwrap_path() -> str | None:
    return sysbin.which("bwrap")


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
    if not present and os.path.isdir(os.path.dirname(cargo[0])) and not _scratch_cargo(environ):
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


def _creatable(path: str) -> bool:
    """Whether bwrap (as this user) could make `path` as a mountpoint: the nearest existing directory
    above it is writable. What this user cannot create, its commands cannot either."""
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent):
        if os.path.lexists(parent):
            return False  # a file or a dangling link on the way: nothing to create
        parent = os.path.dirname(parent)
    return bool(parent) and os.access(parent, os.W_OK)


def _empty_file(state: str) -> str:
    """An empty regular file to bind over a missing config (not /dev/null: a device node on a nodev
    filesystem cannot be opened, and git then refuses to run). In the state dir, made once; bwrap reads
    bind sources from outside the view, where the state dir is not covered."""
    path = os.path.join(state, "hostview-empty")
    if not os.path.isfile(path) or os.path.getsize(path):
        # A temp name of its own: views are built in several threads at once, and a shared `.tmp` name
        # was renamed away from under a second builder (a chance failure of concurrent first runs).
        fd, temp = tempfile.mkstemp(dir=state, prefix=".hostview-empty.")
        try:
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
        os.replace(temp, path)
    return path


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
    found += [d for d in ssh_dirs(home) if os.path.isdir(d) and not _shared(os.path.realpath(d))]
    # an XDG config home outside the home is the operator's configs as ~/.config is (read-only with the
    # home): every tool's there (pip's index-url, systemd user units), not only git's (fresh round 8 r)
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) and not _shared(os.path.realpath(xdg)):
        found.append(xdg)
    imports = [p for p in import_paths() if os.path.exists(p)]
    programs = [os.path.realpath(p) for p in env.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
    programs = [p for p in programs if os.path.isdir(p) and not _shared(p)]
    for path in importroots.outermost(imports + programs):
        if path in imports and _shared(path):
            raise HostViewError(
                f"the gateway's Python imports code from {path}, which every host run could write: start "
                "the gateway from its checkout (or with `python -P`), not from there"
            )
        if path not in found:
            found.append(path)
    return found


def _shared(path: str) -> bool:
    """`/`, or a directory every user may write: no view can keep it read-only without taking it from
    every run."""
    return path == os.sep or (os.path.isdir(path) and bool(os.stat(path).st_mode & 0o002))


def import_paths() -> list[str]:
    """Where the gateway's Python finds code (engine.commands.importroots), with the host view's helper."""
    return importroots.import_paths(hostkeeper.helper_path())


def _under(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top + os.sep)


def _cargo_home(environ: dict[str, str] | None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cargo")


def _scratch_cargo(environ: dict[str, str] | None) -> bool:
    """No ~/.cargo, or an empty one (the mountpoint an earlier view left): nothing of the operator's there,
    so the view puts a scratch one in its place. A command could otherwise make one, and its config would
    be the operator's to treecode and to every later cargo."""
    cargo = _cargo_home(environ)
    if not os.path.lexists(cargo):
        return _creatable(cargo)
    if os.path.islink(cargo) or not os.path.isdir(cargo):
        return False
    try:
        with os.scandir(cargo) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def home_dir(environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.realpath(env.get("HOME") or os.path.expanduser("~"))


# The home host views protect when it is not the account's own (tests, a service account whose HOME is
# set on purpose): it must name $HOME itself (home_refused).
HOST_HOME_ENV = "EXECHOST_HOST_HOME"


def home_refused(environ: dict[str, str] | None = None) -> str | None:
    """Why a gateway must not start with this $HOME; None when it may. Every view protects $HOME (read-only,
    the operator's private files hidden, its sockets unreachable): a $HOME that is not the account's home
    (its passwd entry, where its login shell, ssh and desktop read, and ~/.openclaw) left that one
    writable and unhidden to every host run (fresh round 13 b: a client that autostarted the daemon chose
    HOME). Refused, unless the operator named $HOME in EXECHOST_HOST_HOME."""
    env = os.environ if environ is None else environ
    home = env.get("HOME")
    try:
        own = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None  # no passwd entry: $HOME is the only home there is
    if not home or not own or os.path.realpath(home) == os.path.realpath(own):
        return None
    named = env.get(HOST_HOME_ENV)
    if named and os.path.realpath(named) == os.path.realpath(home):
        return None
    return (
        f"HOME is {home}, not this account's home {own} (its passwd entry): host runs would find {own} "
        f"writable and its private files readable. Start the gateway with HOME={own}, or set "
        f"{HOST_HOME_ENV}={home} to say that {home} is the home host views protect."
    )


def _inside(path: str, root: str) -> bool:
    """`path` is `root` or below it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


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
    return [p for p in dict.fromkeys(found) if not _inside(os.path.realpath(p), home)]


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
    return sorted({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})


def writable_roots(
    state: str, environ: dict[str, str] | None = None, outside: Outside = NOTHING_OUTSIDE
) -> list[str]:
    """The directories of the home bound back writable: the operator's `hostWritable` ones and nothing
    else (never a directory the agent names: any directory of the home may hold what something reads).
    Outside the home everything is writable as before but what is protected: nothing to bind there."""
    try:
        return _writable_roots(state, environ, outside)
    except OSError as exc:  # a name mid-exchange (a link one moment, a directory the next)
        raise HostViewError(
            f"[tools.exec] hostWritable: {exc} changed while it was checked; refused"
        ) from None


def _writable_roots(state: str, environ: dict[str, str] | None, outside: Outside) -> list[str]:
    home = home_dir(environ)
    roots: list[str] = []
    listed = [
        os.path.realpath(os.path.expanduser(g)) for g in (*outside.writable, *outside.writable_anywhere)
    ]
    listed = [r for r in listed if _inside(r, home)]
    for given in outside.writable:
        named = os.path.abspath(os.path.expanduser(given))
        # A name that leads through a link in a dir some agent may write is that agent's to point (round
        # 8 r: a missing ~/work/cache made a link to ~/.bashrc.d, which the next view bound writable).
        # A link outside the home in a directory commands may change (not `/`: a gateway that may write
        # `/` gives its commands the system anyway) is one a run could have made as well.
        planted = [
            h
            for h in link_hops(named)
            if any(_inside(h, r) and h != r for r in listed)
            or (not _inside(h, home) and os.path.dirname(h) != os.sep and _changeable(os.path.dirname(h)))
        ]
        if planted:
            raise HostViewError(
                f"[tools.exec] hostWritable names {given}, reached through the link {planted[0]}, in a "
                "directory host commands may write (one of them may have made it): name the directory itself"
            )
        root = otherroots.resolve(given)  # as every other agent's view resolves it to cover it
        if not _inside(root, home) or not os.path.isdir(root):
            continue  # outside the home it is writable already; a missing one has nothing to write
        # A root holding a protected path, or inside one (a trusted dir is read whole: a root in ~/.ssh
        # gives an `Include config.d/*` the agent's Match exec; a root in a pathPrepend dir, its programs).
        holds = (
            [home]
            if root == home
            else [
                p
                for p in protected(state, environ, outside)
                if _inside(p, root) or (_inside(root, p) and os.path.isdir(p))
            ]
        )
        # and none may be inside what is kept whole: a file made there is read as the rest is
        holds += [d for d in _kept_whole(state, environ, outside) if _inside(root, d)]
        # bwrap mounts a root at its path, found by name: a root below another agent's (not below one of
        # this agent's: then it is not bound again) is in a directory whose names that agent's runs can
        # exchange for a link while this view is made, and the mount would land where the link points
        outer = [
            r
            for r in map(os.path.realpath, map(os.path.expanduser, outside.writable_anywhere))
            if r != root and _inside(root, r)
        ]
        own = {os.path.realpath(os.path.expanduser(w)) for w in outside.writable}
        if outer and not own.intersection(outer):
            raise HostViewError(
                f"[tools.exec] hostWritable names {given}, which is inside another agent's hostWritable "
                f"{outer[0]}: that agent's runs can exchange it for a link while this agent's view is made; "
                "give this agent the outer directory too, or keep the two apart"
            )
        if holds:
            raise HostViewError(
                f"[tools.exec] hostWritable names {given}, which holds or is inside {holds[0]} (the home "
                "directory, or a file or directory the gateway or the operator's shells trust, or a link on "
                "the way to one): name a directory that holds none and is inside none"
            )
        roots.append(root)
    return roots


def _kept_whole(state: str, environ: dict[str, str] | None, outside: Outside) -> list[str]:
    """The directories kept whole (read-only or covered), resolved: a writable root may not be below one."""
    dirs = [*trusted_dirs(environ), *import_paths(), state, *outside.readonly, *outside.covered]
    return [os.path.realpath(d) for d in dirs if os.path.realpath(d) != os.sep]


def workdir_note(state: str, outside: Outside) -> str | None:
    """A warning for a run whose workdir is in the home but under no `hostWritable` dir (it writes
    nothing in the home), naming what to change; None outside the home, under a listed dir, or for the
    home itself (exec's default workdir, read-only as documented: no note on every run)."""
    if outside.workdir is None or outside.chdir is not None:
        return None  # none, or in the agent's own private copy (writable)
    cwd = os.path.realpath(outside.workdir)
    if not _inside(cwd, home_dir()) or cwd == home_dir():
        return None
    try:
        if any(_inside(cwd, r) for r in writable_roots(state, None, outside)):
            return None
    except HostViewError:
        return None  # refused at the spawn, with its own message
    return (
        f"The workdir {outside.workdir} is in the home but under no [tools.exec] hostWritable directory: "
        "in the host view the home is read-only but for the hostWritable dirs, so this command writes "
        'nothing in the home; add its project directory to hostWritable, or set hostView = "none"'
    )


def _changeable(directory: str) -> bool:
    """Whether a host command could rename an entry of `directory`: the gateway's user may write it (a
    root gateway: any), or group or others may (/tmp)."""
    try:
        st = os.stat(directory)
    except OSError:
        return False
    return os.access(directory, os.W_OK) or bool(st.st_mode & 0o022)


def _fixed_ancestors(paths: list[str], home: str) -> list[str]:
    """The directories above `paths` a host command could rename (their parent is changeable), outermost
    first: each is bound over itself, so it is a mountpoint in the view and no rename moves it (a
    protected file's directory renamed away would leave its path to a directory the command makes).
    Inside the read-only home no name can change: none needed there."""
    found: set[str] = set()
    for path in paths:
        here = os.path.dirname(path)
        while here != os.sep and here:
            if os.path.isdir(here) and not _inside(here, home) and _changeable(os.path.dirname(here)):
                found.add(here)
            here = os.path.dirname(here)
    return sorted(found, key=lambda d: (d.count(os.sep), d))


def _made(path: str, *, directory: bool) -> None:
    """A missing protected path outside the home made now, by the gateway, empty (a directory 0700, a
    file 0600, created exclusively: never over what is there), with its missing parents (0700), so it is
    bound read-only like a present one: an empty PATH dir finds nothing, an empty rootfs runs nothing,
    an empty known_hosts trusts no key and an empty config sets nothing. bwrap never makes a mountpoint
    on the host; what this user cannot create, its commands cannot either."""
    if os.path.exists(path):
        return
    path = os.path.realpath(path)  # a dangling link's target: made where the link points
    if os.path.lexists(path) or not _creatable(path):
        return
    with contextlib.suppress(FileExistsError):
        os.makedirs(path if directory else os.path.dirname(path), mode=0o700, exist_ok=True)
        if not directory:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))


def _hop_dirs(trusted: list[str], state: str, home: str) -> list[str]:
    """The directories outside the home holding a link on the way to a trusted file: each is bound
    read-only (a link that is no mountpoint is re-pointed by a rename in its directory). Not `/` (a
    gateway that may write `/` gives its commands the system anyway); a world-writable one (/tmp) is
    refused: binding it read-only would take it from every run."""
    found: list[str] = []
    links: dict[str, bool] = {}
    for path in trusted:
        for hop in link_hops(path, links=links):
            parent = os.path.dirname(hop)
            if parent == os.sep or _inside(parent, home) or _under(parent, state) or parent in found:
                continue
            if not _changeable(parent):
                continue
            if os.stat(parent).st_mode & 0o002:
                raise HostViewError(
                    f"{path} is reached through the link {hop}, in a directory every run may change "
                    f"({parent}): point the gateway's configuration at the file itself"
                )
            found.append(parent)
    return found


def _dangling_rc_dirs(home: str) -> list[str]:
    """For an rc file that is a link to a missing file outside the home (a dotfiles checkout not written
    yet), the nearest directory there is of the target: kept read-only, so no run makes the file the
    operator's next login runs (fresh round 8 r). The file is never made: an empty ~/.bash_profile would
    hide ~/.profile. Not `/` nor a world-writable dir, which no view can keep."""
    found: list[str] = []
    for name in RC_FILES:
        path = os.path.join(home, name)
        if not os.path.islink(path) or os.path.exists(path):
            continue
        here = os.path.dirname(os.path.realpath(path))
        while here != os.sep and not os.path.isdir(here):
            here = os.path.dirname(here)
        if here != os.sep and not _inside(here, home) and not _shared(here) and here not in found:
            found.append(here)
    return found


def view_args(
    state: str,
    environ: dict[str, str] | None = None,
    outside: Outside = NOTHING_OUTSIDE,
    *,
    sockets: bool = True,
    layered_home: bool = False,
) -> list[str]:
    """The bwrap operations of the host view: the home read-only as a whole, then the `hostWritable`
    dirs bound back writable over it; the gateway's own inputs read-only, the state dir covered (after
    them: a state dir inside the install is still covered), the trusted configs and git includes
    read-only (a link's target outside the home too, and the directory of every link outside the home on
    the way), what the gateway holds outside the state dir (`outside`) hidden or read-only (made empty
    first when missing), and every directory above a protected path or the home that a command could
    rename fixed in place first. `sockets`: each socket of the home covered (engine.commands.homesockets),
    for a run's own bwrap; a kept view's runs see the home through a layer of their own instead, where no
    socket connects (engine.commands.homelayer). `layered_home`: the home is that layer already, made
    before bwrap (exechost-hostenter own-pts), read-only with every mount below it: not bound again (a
    bind of it, from the host, would cover the layer), and no socket of it covered."""
    sockets = sockets and not layered_home
    home = home_dir(environ)
    roots = writable_roots(state, environ, outside)
    configs = trusted_configs(environ)
    includes = git_includes(environ, configs)
    programs = config_programs(environ, includes)
    files = [*outside.files, *includes, *programs]
    # the git includes' and the trusted configs' (an ssh `Include dir/sub/../x`: round 9 y)
    walked = walked_dirs([*includes, *programs, *(p for p, _always in configs)])
    for d in [*outside.readonly, *walked]:
        if not _inside(os.path.realpath(d), home) and not _under(d, state):
            _made(d, directory=True)
    # An ssh Include glob's directory is read whole at every node connect, present or not: a missing one
    # outside the home is made now, empty, and kept read-only as a present one is (trusted_dirs), or a run
    # could make it and put a `Match exec` in it for the gateway (fresh round 10 a).
    for d in ssh_dirs(home):
        if not _inside(os.path.realpath(d), home) and not _under(d, state) and not os.path.lexists(d):
            _made(d, directory=True)
    _make_import_paths(home, state)
    _make_path_dirs(home, state, environ)
    for path in files:
        if not _inside(os.path.realpath(path), home) and not _under(path, state):
            _made(path, directory=False)
    # every other agent's hostWritable dirs, covered (engine.commands.otherroots)
    tdirs = trusted_dirs(environ)
    others = _other_roots(state, environ, outside, tdirs, configs)
    if any(not os.path.lexists(r) for r in others):
        named = [os.path.abspath(os.path.expanduser(w)) for w in outside.writable_anywhere]
        otherroots.make_missing(roots, others, home, named)
    private_first, private_last = hostprivate.ops(outside.private, home)
    args: list[str] = [*private_first]
    if home != os.sep and os.path.isdir(home) and not layered_home:
        args += ["--ro-bind", home, home]
    shadow, shadowed = dirshadow.shadow_ops(
        _shadowed_dirs(home, state, roots, outside), {os.path.realpath(p) for p in outside.hidden}
    )
    for root in roots:
        if not any(other != root and _inside(root, other) for other in roots):
            # one below another is writable with it, and bound over it would be by a name the outer
            # root's runs can exchange for a link (its source is by fd: view_by_fd; its place is not)
            args += ["--bind", root, root]
    hop_dirs = _hop_dirs(trusted_files(state, environ, outside, includes, tdirs, programs), state, home)
    hop_dirs += [d for d in _dangling_rc_dirs(home) if d not in hop_dirs]
    for d in [*tdirs, *outside.readonly, *hop_dirs, *walked]:
        if os.path.exists(d) and not _under(d, state) and not _inside(os.path.realpath(d), home):
            args += ["--ro-bind", os.path.realpath(d), d]
    args += ["--tmpfs", state]
    for root in outside.covered:
        if not _under(root, state) and _cover_root(root):
            args += ["--tmpfs", os.path.realpath(root)]
    hidden_ops: list[str] = []  # after the covers: one of a directory above would show the file again
    for path in outside.hidden:
        if os.path.dirname(os.path.realpath(path)) in shadowed:
            continue  # absent from its directory's cover
        _refuse_uncoverable_key(path, home)
        if os.path.exists(path) and not _under(path, state):
            hidden_ops += ["--ro-bind", os.path.realpath(_empty_file(state)), path]
    if _scratch_cargo(environ):
        # for the view's cargo caches, where no config can be written; the host keeps an empty directory,
        # the mountpoint (made here: in the view the home is read-only by then)
        cargo = _cargo_home(environ)
        os.makedirs(cargo, exist_ok=True)
        args += ["--tmpfs", cargo]
        for name in ("config.toml", "config"):
            args += ["--ro-bind", os.path.realpath(_empty_file(state)), os.path.join(cargo, name)]
    bound: list[str] = [home, state, *roots]
    for path, always in configs:
        if always and not _inside(os.path.realpath(path), home):
            _made(path, directory=False)  # an XDG_CONFIG_HOME elsewhere: empty reads as no config
        if os.path.exists(path):
            real = os.path.realpath(path)
            if not _inside(real, home):  # in the home: read-only with it
                # at its real name: bwrap resolves an absolute link in a destination outside the new
                # root (it fails), and every name for the file is read-only with one bind
                args += ["--ro-bind", real, real]
            bound += [os.path.realpath(path)]
    for path in files:
        if os.path.exists(path) and not _under(path, state) and not _inside(os.path.realpath(path), home):
            args += ["--ro-bind", os.path.realpath(path), os.path.realpath(path)]
            bound += [os.path.realpath(path)]
    # The cgroup hierarchies read-only: the run joined its agent's pids group before the view (exechost-
    # hostenter `join`), and every group's `tasks` and `pids.max` are the gateway uid's files: a run could
    # leave its group, fill another agent's or lift the caps (fresh round 9 y). The kernel's mount, by name.
    if os.path.isdir(CGROUPS) and not os.path.islink(CGROUPS):
        args += ["--ro-bind", CGROUPS, CGROUPS]
    # the operator's sockets in the home, none connectable (engine.commands.homesockets): after the
    # shadows, whose subdirectories are bound from the host as they are; one directly in a shadowed dir is
    # not there already
    keep = [state, *roots, *outside.readonly, *outside.covered, *others]  # others': covered whole
    socks = homesockets.home_sockets(os.path.realpath(home), keep) if sockets else []
    socket_ops = homesockets.view_ops(
        os.path.realpath(_empty_file(state)), [s for s in socks if os.path.dirname(s) not in shadowed]
    )
    # what the operator keeps from other accounts, kept from the run (engine.commands.homeprivate): after
    # the shadows and the sockets' covers (a cover over a directory hides what was bound in it), before
    # the agent's private dirs (outside the home)
    found = home_private(state, environ, outside, roots, includes)
    hide = homeprivate.view_ops(os.path.realpath(_empty_file(state)), found)
    # other agents' roots after every other operation on the home (a cover is the last word at its place;
    # what was bound below it is hidden with it), none already hidden whole as private to the operator
    covers = otherroots.ops(roots, [r for r in others if not homeprivate.below(r, set(found.dirs))])
    # last: a read-only bind of a directory above one (a trusted dir, a link's) would show it again
    args += [*shadow, *hidden_ops, *socket_ops, *hide, *covers, *private_last]
    # what the decision trusts is the host's, never the agent's private copy (fresh round 10 c)
    path_dirs = [d for d in (environ or os.environ).get("PATH", "").split(":") if d.startswith(os.sep)]
    args += hostprivate.protect(
        outside.private,
        home,
        [*(p for p, _always in configs), *files],
        [*tdirs, *outside.readonly, *hop_dirs, *walked, *path_dirs],
        os.path.realpath(_empty_file(state)),
    )
    if outside.chdir is not None:
        args += ["--chdir", outside.chdir]
    bound += [*tdirs, *outside.readonly, *outside.hidden, *outside.covered, *hop_dirs, *walked, *others]
    fixed = _fixed_ancestors([os.path.abspath(p) for p in bound], home)
    fix = [op for d in fixed for op in ("--bind", os.path.realpath(d), d)]
    return ["--dev-bind", "/", "/", *DEV_OPS, *fix, *args]


def _other_roots(
    state: str,
    environ: dict[str, str] | None,
    outside: Outside,
    tdirs: list[str] | None = None,
    configs: list[tuple[str, bool]] | None = None,
) -> list[str]:
    """Every other agent's hostWritable dirs this view covers (engine.commands.otherroots): none under the
    state dir, a covered root or the agent's private dirs; none outside the home holding what every run
    needs (the state dir, the trusted, import and PATH dirs, the helper, the agent's private dirs)."""
    env = os.environ if environ is None else environ

    def needed() -> list[str]:
        path_dirs = [p for p in env.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
        helper = hostkeeper.helper_path()
        return [
            state,
            *(trusted_dirs(environ) if tdirs is None else tdirs),
            *import_paths(),
            *path_dirs,
            *([helper] if helper is not None else []),
            *(p for p, _always in (trusted_configs(environ) if configs is None else configs)),
            *outside.readonly,
            *outside.files,
            *(dest for _source, dest in outside.private),
        ]

    skip = [state, *outside.covered, *(dest for _source, dest in outside.private)]
    return otherroots.others(outside.writable, outside.writable_anywhere, home_dir(environ), skip, needed)


def home_private(
    state: str,
    environ: dict[str, str] | None,
    outside: Outside,
    roots: list[str],
    includes: list[str],
) -> homeprivate.Found:
    """What the view hides of the home as private to the operator (engine.commands.homeprivate), with
    what it keeps readable on purpose: git's configs and their includes (the operator's own git in a
    host run reads its identity, url rewrites and hooks path as the gateway's vetting does), ssh's config,
    its includes and known_hosts (no key), the PATH and import dirs (their programs run), the ssh
    Include glob dirs, the hostWritable dirs (the operator's grant) and the pathPrepend dirs; the state
    dir and the covered sandbox roots are covered already."""
    home = home_dir(environ)
    if home == os.sep or not os.path.isdir(home):
        return homeprivate.Found()
    env = os.environ if environ is None else environ
    files = [*git_configs(environ), *includes, *ssh_configs(home)]
    path_dirs = [p for p in env.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
    dirs = [*import_paths(), *path_dirs, *ssh_dirs(home), *roots, *outside.readonly]
    if _scratch_cargo(environ):
        dirs.append(_cargo_home(environ))  # the view's scratch ~/.cargo, made over it
    never = [home, state, *outside.covered]
    return homeprivate.find(
        home,
        [os.path.realpath(p) for p in files],
        [os.path.realpath(p) for p in dirs],
        tuple(os.path.realpath(p) for p in never),
    )


def _shadowed_dirs(home: str, state: str, roots: list[str], outside: Outside) -> list[str]:
    """The directories shown as a read-only copy of their entries (engine.commands.dirshadow): each one
    holding a hidden file (a node's key: a rename in it then changes nothing in a running view) or socket,
    and ~/.ssh (a ControlMaster socket there is the node's account). Not the home, `/` or a shared
    directory, none holding the home, the state dir or a writable root and none inside a writable root: a
    hidden file there keeps its own bind."""
    found = [os.path.dirname(os.path.realpath(p)) for p in outside.hidden if os.path.lexists(p)]
    ssh = os.path.realpath(os.path.join(home, ".ssh"))
    if os.path.isdir(ssh):
        found.append(ssh)
    keep: list[str] = []
    for d in dict.fromkeys(found):
        if d in (home, os.sep) or not os.path.isdir(d) or _shared(d) or _under(d, state):
            continue
        if _inside(home, d) or _inside(os.path.realpath(state), d):
            continue
        if any(_inside(r, d) or _inside(d, r) for r in roots):
            continue
        keep.append(d)
    return keep


def _refuse_uncoverable_key(path: str, home: str) -> None:
    """A key file directly in the home, in `/` or in a directory holding the home can only have a bind of
    its own, attached to its dentry: rotated by a rename or rm + write, the new key shows in every running
    view (fresh round 9 y). Such a directory cannot be covered (every run needs it), so the view is refused
    with what to change, as for a key below a hostWritable dir."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return  # a socket (an agent's) or a missing key: nothing to read
    where, home = os.path.dirname(real), os.path.realpath(home)
    if where in (home, os.sep) or _inside(home, where):
        raise HostViewError(
            f"{path}: a node's login key directly in {where} cannot be hidden from host commands for good "
            "(a key rotated there by rename would show in every running view): move it into a directory of "
            "its own, such as ~/.ssh/ or ~/.config/exechost/keys/, and set nodes.<name>.identityFile there"
        )


def _make_import_paths(home: str, state: str) -> None:
    """A missing place the gateway's Python would import from (a .pth line's dir, a sys.path entry
    gone) made empty now, outside the home and below no present one (the home is read-only whole), so
    it is bound read-only like the rest: no run can make it and put code there for the next gateway."""
    paths = import_paths()
    missing = [p for p in paths if not os.path.lexists(p) and not _inside(p, home)]
    if not missing:
        return  # the common case: one lstat each
    present = [p for p in paths if os.path.exists(p)]
    for path in missing:
        if not _under(path, state) and not any(_inside(path, p) for p in present):
            _made(path, directory=True)


def _make_path_dirs(home: str, state: str, environ: dict[str, str] | None) -> None:
    """A missing directory of the gateway's PATH outside the home (a tool's bin dir named before the tool
    is installed) made empty now, so trusted_dirs keeps it read-only as a present one: a run could make it
    and put a `git` there ahead of /usr/bin for the gateway and the operator (fresh round 10 a)."""
    env = os.environ if environ is None else environ
    for path in env.get("PATH", "").split(os.pathsep):
        # a missing one, or a dangling link: its target
        missing = path.startswith(os.sep) and not os.path.exists(path)
        if missing and not _inside(os.path.realpath(path), home) and not _under(path, state):
            _made(path, directory=True)


VIEW_ATTEMPTS = 3  # a view whose sources vanish under it is made again, this many times at most


def view_by_fd(
    state: str, environ: dict[str, str] | None = None, outside: Outside = NOTHING_OUTSIDE
) -> tuple[list[str], tuple[int, ...]]:
    """view_args with every bind's source an fd opened now along its resolved path, no link followed, and
    checked on that fd (engine.commands.bindsource): what was checked is what bwrap mounts, whatever a run
    exchanges meanwhile. The fds are the caller's to pass to bwrap and close. HostViewError when a source
    moved or became a link since it was resolved."""
    return _by_fd(lambda: view_args(state, environ, outside))


def own_view_by_fd(
    state: str, outside: Outside, layers: list[str]
) -> tuple[list[str], tuple[int, ...], list[str]]:
    """view_by_fd for a run's own bwrap started by own-pts with `layers` (run_layers), and own-pts' words:
    the layers no bind of the view needs from inside, and the sources bwrap binds from inside them
    (engine.commands.homelayer.own_words)."""
    home = home_dir()
    words: list[str] = []

    def make() -> list[str]:
        kept = list(layers)
        while True:
            ops = view_args(state, None, outside, layered_home=home in kept)
            fewer, carried = homelayer.own_words(ops, kept)
            if fewer == kept:
                words[:] = [*kept, *(f"+{c}" for c in carried)]
                return ops
            kept = fewer

    ops, fds = _by_fd(make)
    return ops, fds, words


def _by_fd(make: Callable[[], list[str]]) -> tuple[list[str], tuple[int, ...]]:
    for attempt in range(VIEW_ATTEMPTS):
        try:
            ops = make()
        except OSError as exc:  # a run exchanged a directory on the way while its names were resolved
            raise HostViewError(
                f"{exc.filename}: {exc.strerror} while the host view was made; refused"
            ) from None
        try:
            return bindsource.by_fd(ops)
        except FileNotFoundError:
            # something listed a moment ago is gone (a socket closed, a container's dir removed by another
            # run's end): the view is made again from what is there now; a name exchanged for a link is not
            if attempt + 1 < VIEW_ATTEMPTS:
                continue
            raise HostViewError(
                f"the host view's sources kept vanishing while it was made ({VIEW_ATTEMPTS} tries); refused"
            ) from None
        except OSError as exc:
            raise HostViewError(
                f"{exc.filename}: {exc.strerror} while the host view was made (a directory exchanged for a "
                "link?); refused"
            ) from None
    raise AssertionError("unreachable")


def _cover_root(root: str) -> bool:
    """Whether `root` (a sandbox workspace root) can be covered: made now when missing, as the sandbox
    would make it (0700), so a host command can neither find one made later in a view kept from before,
    nor plant a link there first. Never the whole filesystem."""
    if os.path.realpath(root) == os.sep:
        return False
    if not os.path.lexists(root) and _creatable(root):
        os.makedirs(root, mode=0o700, exist_ok=True)
    return os.path.isdir(root)


def kept_prefix(
    state: str, bwrap: str, *, make: bool = True, outside: Outside = NOTHING_OUTSIDE
) -> tuple[list[str], tuple[int, ...], dict[str, str]] | None:
    """The words that run a command in this state dir's kept view, the fds they name (the caller's to
    pass and close) and the env the run needs (its egress proxy's), the keeper and the agent's network
    namespace made or re-made here when `make` (blocking a few ms); None when there is no helper, or no
    keeper ready and `make` is false."""
    helper = hostkeeper.helper_path()
    known = includes_known() and programs_known() and homeprivate.known(home_dir())
    if helper is None or (not make and not known) or outside.chdir is not None:
        # git would have to be asked: the caller's thread does it (make=True); a workdir in a private
        # dir is reached by bwrap's --chdir, in a view of the run's own
        return None
    holder = _net_holder(state, helper, outside, make=make)
    if holder is False:  # not up (or not to be had): a thread makes it, or the run takes its own bwrap
        return None
    ops = view_args(state, outside=replace(outside, workdir=None), sockets=False)
    slot = hostkeeper.slot(state, outside.private[0][0] if outside.private else None)
    # A gateway that is not root: its kept view is made inside the agent's network namespace's user
    # namespace, which its runs join first (engine.commands.hostnet); a new one, a new view.
    inner = holder if holder is not None and holder.user is not None else None
    key = (*hostkeeper.view_key(bwrap, helper, state, ops), _ns_id(inner) if inner is not None else None)
    keeper = hostkeeper.current(key, slot)
    if keeper is None and make:
        outer = inner.words(helper) if inner is not None else None
        try:
            keeper = hostkeeper.ensure(key, slot, bwrap, helper, ops, outer)
        finally:
            for fd in outer[1] if outer is not None else ():
                os.close(fd)
    layers = run_layers(state, outside, kept=True)
    entered = keeper.enter(helper, layers) if keeper is not None else None  # None: stopped meanwhile
    if entered is None:
        return None
    net = holder.words(helper) if holder is not None else ([], ())
    if net is None:
        for fd in entered[1]:
            os.close(fd)
        return None
    env = holder.env if holder is not None else {}
    return [*net[0], *entered[0]], (*net[1], *entered[1]), dict(env)


def _ns_id(holder: hostnet.Holder) -> int:
    return os.fstat(holder.ns).st_ino if holder.ns >= 0 else -1


def _net_holder(
    state: str, helper: str, outside: Outside, *, make: bool
) -> hostnet.Holder | Literal[False] | None:
    """The agent's kept network namespace (None: the run keeps the host's); False when it is not up and
    `make` is false, or cannot be made (a helper older than `netkeep`): the run then takes a bwrap of its
    own in a namespace of its own (net_ops), never the host's network in its place."""
    if outside.net_agent is None:
        return None
    holder = hostnet.current(state, outside.net_agent)
    if holder is None and make:
        holder = hostnet.ensure(state, outside.net_agent, helper)
    return False if holder is None else holder


def net_prefix(state: str, outside: Outside) -> tuple[list[str], tuple[int, ...], dict[str, str]]:
    """For a run's own bwrap: the words (first of all, before bwrap) that put it in its agent's network
    namespace, their fds and the env the run needs; made here when missing (blocking). Empty when the run
    keeps the host's network, or when there is no namespace to join (net_ops then gives it one)."""
    helper = hostkeeper.helper_path()
    if outside.net_agent is None or helper is None:
        return [], (), {}
    holder = _net_holder(state, helper, outside, make=True)
    words = holder.words(helper) if holder else None
    if not holder or words is None:
        return [], (), {}
    return words[0], words[1], dict(holder.env)


def net_ops(outside: Outside, joined: list[str]) -> tuple[str, ...]:
    """bwrap's own network namespace (only `lo`) for a run of an agent whose kept one it could not join
    (`joined` empty: no helper, or one too old to hold it): cut off, its servers answering no later run."""
    return ("--unshare-net",) if outside.net_agent is not None and not joined else ()


def run_layers(state: str, outside: Outside = NOTHING_OUTSIDE, *, kept: bool) -> list[str]:
    """The directories a run sees through an overlay made for it (engine.commands.homelayer): none
    without the helper. For a run's own bwrap (`kept` false) not the home when a private dir holds it:
    that dir's bind, made by bwrap after the layer, would cover it (the home is bound from the host then,
    its sockets covered one by one: engine.commands.homesockets)."""
    if hostkeeper.helper_path() is None:
        return []
    home = home_dir()
    private = [dest for _source, dest in outside.private]
    writable = [os.path.realpath(os.path.expanduser(w)) for w in outside.writable]
    # another agent's root is covered in the view: no layer of its own (a mount the host has there)
    others = _other_roots(state, None, outside)
    found = homelayer.layers(home, [state, *outside.covered, *private, *others], writable)
    if not kept and any(_inside(home, os.path.realpath(d)) for d in private):
        found = [d for d in found if d != home]
    return found


def head(bwrap: str, net: list[str] | None = None, layers: list[str] | None = None) -> list[str]:
    """The words before bwrap's operations: bwrap itself ignores the terminal's signals, and starts (with
    the helper) in a mount namespace whose /dev/pts is a devpts of its own, and where each layer of
    `layers` (own_view_by_fd's words) is an overlay made for the run, which its view copies: the run
    reaches no terminal but its own, and no socket in those directories (engine/commands/hostenter.c,
    own-pts); in its agent's network namespace first when `net` (net_prefix) says so."""
    helper = hostkeeper.helper_path()
    own_pts = [helper, "own-pts", hostkeeper.NO_PTY, *(layers or ()), "--"] if helper is not None else []
    return [ENV, IGNORE, *(net or []), *own_pts, bwrap]


def tail() -> list[str]:
    """The words after `--`: the command gets the terminal's signals back at their defaults (and, with
    the helper, its cwd is checked there: engine.commands.pinned.PinnedView.check_cwd)."""
    helper = hostkeeper.helper_path()
    if helper is None:
        return [ENV, RESTORE]
    return [helper, *STATUS_WORDS, "--", helper, "check-cwd", hostkeeper.NO_CWD, "--"]


def pid_ops() -> tuple[str, ...]:
    """PID_OPS for a run's own bwrap: with the helper, its `status` mode (tail) is the namespace's pid 1
    (`--as-pid-1`: it reaps, as bwrap's reaper would) and holds nothing of the run's open before the
    command starts, so the command is pid 2 with parent 1, as in the kept view."""
    return (*PID_OPS, "--as-pid-1") if hostkeeper.helper_path() is not None else PID_OPS


def joined(prefix: list[str] | tuple[str, ...], outside: Outside) -> list[str]:
    """`prefix` with the agent's pids cgroup joined first (exechost-hostenter `join`), when it has one:
    after `env`'s signal words for a run's own bwrap (is_wrapped still knows it), before all else in the
    kept view."""
    helper = hostkeeper.helper_path()
    if not outside.join_tasks or helper is None:
        return list(prefix)
    join = [helper, "join", outside.join_tasks, "--"]
    if is_wrapped(prefix):
        return [*prefix[:2], *join, *prefix[2:]]
    return [*join, *prefix]


def is_wrapped(args: object) -> bool:
    return isinstance(args, (list, tuple)) and len(args) > 2 and args[0] == ENV and args[1] == IGNORE


def exit_status(args: object, code: int) -> tuple[int | None, str | None]:
    """`code` (os.waitstatus_to_exitcode) as (exit code, signal name), with a wrapped run's 128+n for
    SIGINT/SIGQUIT read as the signal bwrap could not report: for a run whose status pipe told nothing
    better (engine.sessions.host_io.status_exit is read first)."""
    if code < 0:
        try:
            return None, signal.Signals(-code).name
        except ValueError:
            return None, f"SIG{-code}"
    if is_wrapped(args) and code - 128 in _REPORTED:
        return None, signal.Signals(code - 128).name
    return code, None


def refuse_hidden_cwd(cwd: str | None, state: str, outside: Outside = NOTHING_OUTSIDE) -> None:
    """A cwd inside the state dir, or a covered sandbox workspace root, would not exist in the view:
    refused rather than run elsewhere. A cwd that cannot be resolved now (a link being exchanged under it)
    is refused too: a clear refusal, never an exception out of the handler."""
    if not cwd:
        return
    try:
        _refuse_hidden_cwd(cwd, state, outside)
    except OSError as exc:
        raise HostViewError(f"{cwd} cannot be resolved now ({exc.strerror or exc}); nothing ran") from None


def _refuse_hidden_cwd(cwd: str, state: str, outside: Outside) -> None:
    if outside.chdir is not None:
        return  # the agent's own private copy (engine.commands.hostprivate), run at the path it names
    if _under(cwd, state):
        raise HostViewError(f"{cwd} is inside the state dir, which gateway-host commands cannot see")
    for root in outside.covered:
        if os.path.realpath(root) != os.sep and _under(cwd, root):
            raise HostViewError(
                f"{cwd} is inside {root} (a sandbox workspace root, or the Docker engine's client keys), "
                "which gateway-host commands cannot see"
            )
    own = [otherroots.resolve(w) for w in outside.writable]
    hidden = otherroots.hidden_at(os.path.realpath(cwd), own, _other_roots(state, None, outside))
    if hidden is not None:
        raise HostViewError(
            f"{cwd} is inside {hidden}, another agent's [tools.exec] hostWritable dir, which this agent's "
            "host commands cannot see"
        )
