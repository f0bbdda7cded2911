"""The bwrap operations and words every gateway-host run starts in: a private mount namespace where the
state dir is an empty tmpfs, the home read-only but for its writable roots (engine.commands.hostroots), and
what the gateway or a program it trusts reads kept read-only (engine.commands.hosttrust).

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
import signal
import tempfile
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from engine import sysbin
from engine.commands import (
    bindsource,
    dirshadow,
    homelayer,
    homeprivate,
    homesockets,
    hostkeeper,
    hostnet,
    hostprivate,
    otherroots,
    rootcaps,
)
from engine.commands.hostoutside import (
    NOTHING_OUTSIDE,
    HostViewError,
    Outside,
    changeable,
    creatable,
    home_dir,
    inside,
    shared,
    under,
)
from engine.commands.hostroots import (
    home_private,
    other_roots,
    outside_roots,
    shadowed_dirs,
    socket_dirs,
    writable_roots,
)
from engine.commands.hosttrust import (
    RC_FILES,
    cargo_home,
    config_programs,
    git_includes,
    import_paths,
    includes_known,
    link_hops,
    programs_known,
    scratch_cargo,
    ssh_dirs,
    trusted_configs,
    trusted_dirs,
    trusted_files,
    walked_dirs,
)

ENV = "/usr/bin/env"
SYSFS = "/sys"  # read-only whole in every view (view_args), its cgroup hierarchies with it
# Signals a terminal (or an operator's ^C) sends: the command's, never bwrap's to die of.
_TERMINAL = "INT,QUIT,TSTP"
IGNORE = f"--ignore-signal={_TERMINAL}"
RESTORE = f"--default-signal={_TERMINAL}"
# Every run's own PID namespace and /proc, and its own IPC namespace: SysV shared memory, semaphores and
# message queues are in no directory a view can cover, and one agent's segment was every run's to attach
# (fresh round 10 a); and its own UTS namespace: the host's name is the machine's (fresh round 18 a). The
# kept view's runs get theirs from exechost-hostenter.
# The run's /dev: bwrap's own (null, zero, full, random, urandom, tty; /dev/fd and the std links; a
# shm dir, its agent's own bound there by hostprivate), then the devpts the run was given (exechost-
# hostenter's: capped, its own) bound back over bwrap's. What is allowed, not a list of what is refused:
# the host's devtmpfs held every node the gateway's account opens by a group or a seat ACL (kvm, disk,
# video, audio, the webcam, a FIDO key), each an allowlisted `cat`'s (fresh round 13 b).
DEV_OPS = ("--dev", "/dev", "--dev-bind", "/dev/pts", "/dev/pts")
PID_OPS = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--proc", "/proc")
# A root gateway's run with no helper, as exechost-hostenter makes it otherwise (fresh round 17 a): /proc/sys
# read-only whatever access() says (bwrap's --proc skips it: procfs answers EACCES for that directory even
# to root, whose sysctls under it are writable), and only the capabilities engine.commands.rootcaps lists
# (fresh round 18 a: no CAP_SYS_ADMIN to unmount a cover, no CAP_SYS_TIME, no CAP_SETFCAP nor CAP_MKNOD).
# A non-root gateway's runs hold no capability and write no host sysctl.
ROOT_OPS = ("--ro-bind", "/proc/sys", "/proc/sys", *rootcaps.bwrap_ops())
# A wrapped run with no status pipe whose command died of one of these is reported as that signal (bwrap
# says 128+n); with one, the command's own status is read (engine.sessions.host_io, the same words).
_REPORTED = (signal.SIGINT, signal.SIGQUIT)
STATUS_WORDS = ("status", "-")
INSTALL_HINT = (
    "gateway-host commands run with the state dir hidden, which needs bubblewrap: install it "
    '(apt-get install bubblewrap), or set [tools.exec] hostView = "none" to run them without it'
)


def bwrap_path() -> str | None:
    return sysbin.which("bwrap")


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


def _fixed_ancestors(paths: list[str], home: str) -> list[str]:
    """The directories above `paths` a host command could rename (their parent is changeable), outermost
    first: each is bound over itself, so it is a mountpoint in the view and no rename moves it (a
    protected file's directory renamed away would leave its path to a directory the command makes).
    Inside the read-only home no name can change: none needed there."""
    found: set[str] = set()
    for path in paths:
        here = os.path.dirname(path)
        while here != os.sep and here:
            if os.path.isdir(here) and not inside(here, home) and changeable(os.path.dirname(here)):
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
    if os.path.lexists(path) or not creatable(path):
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
            if parent == os.sep or inside(parent, home) or under(parent, state) or parent in found:
                continue
            if not changeable(parent):
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
        if here != os.sep and not inside(here, home) and not shared(here) and here not in found:
            found.append(here)
    return found


def view_args(
    state: str,
    environ: dict[str, str] | None = None,
    outside: Outside = NOTHING_OUTSIDE,
    *,
    sockets: bool = True,
    layered_home: bool = False,
    layers: list[str] | tuple[str, ...] = (),
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
    bind of it, from the host, would cover the layer), and no socket of it covered. `layers`: the
    directories each run sees through a read-only layer of its own (run_layers; the kept view's runs and
    own-pts make them): no directory in one is fixed in place, no run can rename it there, and a bind of
    it from the host would be put back over the layer writable (fresh round 16 a)."""
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
        if not inside(os.path.realpath(d), home) and not under(d, state):
            _made(d, directory=True)
    # An ssh Include glob's directory is read whole at every node connect, present or not: a missing one
    # outside the home is made now, empty, and kept read-only as a present one is (trusted_dirs), or a run
    # could make it and put a `Match exec` in it for the gateway (fresh round 10 a).
    for d in ssh_dirs(home):
        if not inside(os.path.realpath(d), home) and not under(d, state) and not os.path.lexists(d):
            _made(d, directory=True)
    _make_import_paths(home, state)
    _make_path_dirs(home, state, environ)
    for path in files:
        if not inside(os.path.realpath(path), home) and not under(path, state):
            _made(path, directory=False)
    # every other agent's hostWritable dirs, covered (engine.commands.otherroots)
    tdirs = trusted_dirs(environ)
    others = other_roots(state, environ, outside, tdirs, configs)
    if any(not os.path.lexists(r) for r in others):
        named = [os.path.abspath(os.path.expanduser(w)) for w in outside.writable_anywhere]
        otherroots.make_missing(roots, others, home, named)
    private_first, private_last = hostprivate.ops(outside.private, home)
    args: list[str] = [*private_first]
    if home != os.sep and os.path.isdir(home) and not layered_home:
        args += ["--ro-bind", home, home]
    shadow, shadowed = dirshadow.shadow_ops(
        shadowed_dirs(home, state, roots, outside), {os.path.realpath(p) for p in outside.hidden}
    )
    for root in roots:
        if not any(other != root and inside(root, other) for other in roots):
            # one below another is writable with it, and bound over it would be by a name the outer
            # root's runs can exchange for a link (its source is by fd: view_by_fd; its place is not)
            args += ["--bind", root, root]
    # a hostWritable dir outside the home: bound over itself too, so a run's layers (engine.commands.
    # homelayer: every tree outside the writable roots read-only, no socket there connectable) put it back
    # on top as it is, writable and its sockets the agent's (it was writable before; nothing more is)
    outer_roots = outside_roots(home, state, outside)
    for root in outer_roots:
        args += ["--bind", root, root]
    hop_dirs = _hop_dirs(trusted_files(state, environ, outside, includes, tdirs, programs), state, home)
    hop_dirs += [d for d in _dangling_rc_dirs(home) if d not in hop_dirs]
    for d in [*tdirs, *outside.readonly, *hop_dirs, *walked]:
        if os.path.exists(d) and not under(d, state) and not inside(os.path.realpath(d), home):
            args += ["--ro-bind", os.path.realpath(d), d]
    args += ["--tmpfs", state]
    for root in outside.covered:
        if not under(root, state) and _cover_root(root):
            args += ["--tmpfs", os.path.realpath(root)]
    hidden_ops: list[str] = []  # after the covers: one of a directory above would show the file again
    for path in outside.hidden:
        if os.path.dirname(os.path.realpath(path)) in shadowed:
            continue  # absent from its directory's cover
        _refuse_uncoverable_key(path, home)
        if os.path.exists(path) and not under(path, state):
            hidden_ops += ["--ro-bind", os.path.realpath(_empty_file(state)), path]
    if scratch_cargo(environ):
        # for the view's cargo caches, where no config can be written; the host keeps an empty directory,
        # the mountpoint (made here: in the view the home is read-only by then)
        cargo = cargo_home(environ)
        os.makedirs(cargo, exist_ok=True)
        args += ["--tmpfs", cargo]
        for name in ("config.toml", "config"):
            args += ["--ro-bind", os.path.realpath(_empty_file(state)), os.path.join(cargo, name)]
    bound: list[str] = [home, state, *roots]
    for path, always in configs:
        if always and not inside(os.path.realpath(path), home):
            _made(path, directory=False)  # an XDG_CONFIG_HOME elsewhere: empty reads as no config
        if os.path.exists(path):
            real = os.path.realpath(path)
            if not inside(real, home):  # in the home: read-only with it
                # at its real name: bwrap resolves an absolute link in a destination outside the new
                # root (it fails), and every name for the file is read-only with one bind
                args += ["--ro-bind", real, real]
            bound += [os.path.realpath(path)]
    for path in files:
        if os.path.exists(path) and not under(path, state) and not inside(os.path.realpath(path), home):
            args += ["--ro-bind", os.path.realpath(path), os.path.realpath(path)]
            bound += [os.path.realpath(path)]
    # /sys read-only whole, every mount below it with it (bwrap remounts each one read-only): the cgroup
    # hierarchies (the run joined its agent's pids group before the view, exechost-hostenter `join`, and
    # every group's `tasks` and `pids.max` are the gateway uid's files: a run could leave its group, fill
    # another agent's or lift the caps, fresh round 9 y), and every knob a root gateway's run could write
    # (/sys/power/state suspends the machine, /sys/kernel/*, a device's driver bind: fresh round 17 a).
    # The whole tree, not a list of knobs: no run needs to write the kernel's. The kernel's mount, by name.
    if os.path.isdir(SYSFS) and not os.path.islink(SYSFS):
        args += ["--ro-bind", SYSFS, SYSFS]
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
    # A file the gateway's config names (a node's 0600 key) is private too, but hidden above already: left
    # out of its directory's copy (~/.ssh, dirshadow) or bound over with the empty file. A second bind at a
    # file absent from a read-only copy makes bwrap create it there, which fails every run (the key in
    # ~/.ssh/, where the refusal above tells the operator to put it).
    gone = {os.path.realpath(p) for p in outside.hidden}
    kept = homeprivate.Found(found.dirs, [f for f in found.files if os.path.realpath(f) not in gone])
    hide = homeprivate.view_ops(os.path.realpath(_empty_file(state)), kept)
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
    if layers and fixed:  # none inside a run's read-only layer (engine.commands.homelayer.outside_layers)
        holders = [state, *roots, *outer_roots, *outside.covered, *others]
        holders += [dest for _source, dest in outside.private]
        held = [os.path.realpath(h) for h in holders] + homelayer.mount_points()  # (these real already)
        fixed = [
            d
            for d in fixed
            if homelayer.outside_layers([d, os.path.realpath(d)], layers, held)  # by either name
        ]
    fix = [op for d in fixed for op in ("--bind", os.path.realpath(d), d)]
    return ["--dev-bind", "/", "/", *DEV_OPS, *fix, *args]


def _refuse_uncoverable_key(path: str, home: str) -> None:
    """A key file directly in the home, in `/` or in a directory holding the home can only have a bind of
    its own, attached to its dentry: rotated by a rename or rm + write, the new key shows in every running
    view (fresh round 9 y). Such a directory cannot be covered (every run needs it), so the view is refused
    with what to change, as for a key below a hostWritable dir."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return  # a socket (an agent's) or a missing key: nothing to read
    where, home = os.path.dirname(real), os.path.realpath(home)
    if where in (home, os.sep) or inside(home, where):
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
    missing = [p for p in paths if not os.path.lexists(p) and not inside(p, home)]
    if not missing:
        return  # the common case: one lstat each
    present = [p for p in paths if os.path.exists(p)]
    for path in missing:
        if not under(path, state) and not any(inside(path, p) for p in present):
            _made(path, directory=True)


def _make_path_dirs(home: str, state: str, environ: dict[str, str] | None) -> None:
    """A missing directory of the gateway's PATH outside the home (a tool's bin dir named before the tool
    is installed) made empty now, so trusted_dirs keeps it read-only as a present one: a run could make it
    and put a `git` there ahead of /usr/bin for the gateway and the operator (fresh round 10 a)."""
    env = os.environ if environ is None else environ
    for path in env.get("PATH", "").split(os.pathsep):
        # a missing one, or a dangling link: its target
        missing = path.startswith(os.sep) and not os.path.exists(path)
        if missing and not inside(os.path.realpath(path), home) and not under(path, state):
            _made(path, directory=True)


VIEW_ATTEMPTS = 3  # a view whose sources vanish under it is made again, this many times at most


def view_by_fd(
    state: str, environ: dict[str, str] | None = None, outside: Outside = NOTHING_OUTSIDE
) -> tuple[list[str], tuple[int, ...]]:
    """view_args with every bind's source an fd opened now along its resolved path, no link followed, and
    checked on that fd (engine.commands.bindsource): what was checked is what bwrap mounts, whatever a run
    exchanges meanwhile. The fds are the caller's to pass to bwrap and close. HostViewError when a source
    moved or became a link since it was resolved."""
    return _by_fd(lambda: view_args(state, environ, outside), owned_roots(outside))


def owned_roots(outside: Outside) -> frozenset[str]:
    """The agent's writable roots as the view binds them (resolved): each judged on the fds bwrap mounts
    (engine.commands.bindsource.by_fd: this account's, nothing above it another's to change), whatever
    was judged by name when they were listed (engine.commands.hostroots.trusted_writable)."""
    try:
        return frozenset(os.path.realpath(os.path.expanduser(w)) for w in outside.writable)
    except OSError as exc:  # a run exchanged a directory on the way while its name was resolved
        raise HostViewError(f"{exc.filename}: {exc.strerror} while the host view was made; refused") from None


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
            made = view_args(state, None, outside, layered_home=home in kept, layers=kept)
            ops = homelayer.unbound(made, kept)
            fewer, carried = homelayer.own_words(ops, kept)
            if fewer == kept:
                words[:] = [*kept, *(f"+{c}" for c in carried)]
                return ops
            kept = fewer

    ops, fds = _by_fd(make, owned_roots(outside))
    return ops, fds, words


def _by_fd(
    make: Callable[[], list[str]], owned: frozenset[str] = frozenset()
) -> tuple[list[str], tuple[int, ...]]:
    for attempt in range(VIEW_ATTEMPTS):
        try:
            ops = make()
        except OSError as exc:  # a run exchanged a directory on the way while its names were resolved
            raise HostViewError(
                f"{exc.filename}: {exc.strerror} while the host view was made; refused"
            ) from None
        try:
            return bindsource.by_fd(ops, owned)
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
    if not os.path.lexists(root) and creatable(root):
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
    # the layers first: no directory in one is fixed in place by the view (view_args), so every run of
    # this view is entered with these same layers (other layers, other ops: another keeper)
    layers = run_layers(state, outside, kept=True)
    ops = view_args(state, outside=replace(outside, workdir=None), sockets=False, layers=layers)
    slot = hostkeeper.slot(state, outside.private[0][0] if outside.private else None)
    # A gateway that is not root: its kept view is made inside the agent's network namespace's user
    # namespace, which its runs join first (engine.commands.hostnet); a new one, a new view.
    inner = holder if holder is not None and holder.user is not None else None
    key = (*hostkeeper.view_key(bwrap, helper, state, ops), _ns_id(inner) if inner is not None else None)
    keeper = hostkeeper.current(key, slot)
    if keeper is None and make:
        outer = inner.words(helper) if inner is not None else None
        try:
            keeper = hostkeeper.ensure(key, slot, bwrap, helper, ops, outer, owned_roots(outside))
        finally:
            for fd in outer[1] if outer is not None else ():
                os.close(fd)
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
    others = other_roots(state, None, outside)
    skip = [state, *outside.covered, *private, *others]
    # and the directory of every socket the view hides, in whatever tree (hostroots.socket_dirs)
    found = homelayer.layers(home, skip, writable, system=True, sockets=socket_dirs(outside))
    if not kept and any(inside(home, os.path.realpath(d)) for d in private):
        found = [d for d in found if d != home]
    return found


def head(bwrap: str, net: list[str] | None = None, layers: list[str] | None = None) -> list[str]:
    """The words before bwrap's operations: bwrap itself ignores the terminal's signals, and starts (with
    the helper) in a mount namespace whose /dev/pts is a devpts of its own, and where each layer of
    `layers` (own_view_by_fd's words) is an overlay made for the run, which its view copies: the run
    reaches no terminal but its own, and no socket in those directories (engine/commands/hostenter/layers.c,
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
    # (with the helper its check-cwd covers /proc/sys and keeps the listed capabilities, as `enter`)
    if hostkeeper.helper_path() is not None:
        return (*PID_OPS, "--as-pid-1")
    return (*PID_OPS, *ROOT_OPS) if os.geteuid() == 0 else PID_OPS


def joined(prefix: list[str] | tuple[str, ...], outside: Outside) -> list[str]:
    """`prefix` with the agent's pids cgroup joined first (exechost-hostenter `join`), when it has one:
    after `env`'s signal words for a run's own bwrap (is_wrapped still knows it), before all else in the
    kept view."""
    helper = hostkeeper.helper_path()
    if not outside.join_tasks or helper is None:
        return list(prefix)
    join = [helper, "join", outside.join_tasks, "--"]
    if outside.join_memory:  # (`join` writes 0 to any hierarchy's `tasks`: one more exec, ~0.5 ms)
        join += [helper, "join", outside.join_memory, "--"]
    if outside.join_cpu:  # (its agent's share of the CPU: engine.sandbox.hostcpu)
        join += [helper, "join", outside.join_cpu, "--"]
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
