"""The home's writable roots, its private dirs and the workdir checks of a host view: the home is
read-only as a whole but for the operator's `hostWritable` dirs (never a directory the agent names), each
checked to hold nothing trusted (engine.commands.hosttrust) and to be reached through no link a run could
have planted; every other agent's roots and the operator's private files are hidden (engine.commands.
hostview assembles the view)."""

from __future__ import annotations

import os
import stat

from engine import pathtrust
from engine.commands import homelayer, homeprivate, hostkeeper, otherroots
from engine.commands.hostoutside import (
    NOTHING_OUTSIDE,
    HostViewError,
    Outside,
    changeable,
    home_dir,
    inside,
    shared,
    under,
)
from engine.commands.hosttrust import (
    cargo_home,
    git_configs,
    import_paths,
    link_hops,
    protected,
    scratch_cargo,
    ssh_configs,
    ssh_dirs,
    trusted_configs,
    trusted_dirs,
)


def trusted_writable(given: tuple[str, ...] | list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The agent's `hostWritable` entries a view may bind writable, and a warning for each left out: a
    present dir (resolved) another account owns, or below a dir another account may change (engine.pathtrust.
    foreign_hold, the pathPrepend judgement with this gateway's account beside root). Such a dir is used
    as found by no one's choice of the operator: another agent's own Unix account made it first, and reads
    and renames what the runs write there (fresh round 16 a). Left out, it is covered as another agent's
    root is (an empty read-only dir in the view: engine.commands.otherroots); the bind of every kept one is
    judged again on the fds bwrap mounts (engine.commands.bindsource.open_owned). Missing: kept (nothing
    bound; judged when present)."""
    own = os.geteuid()
    kept: list[str] = []
    notes: list[str] = []
    for entry in given:
        real = os.path.realpath(os.path.abspath(os.path.expanduser(entry)))
        why = pathtrust.foreign_hold_at(real, own) if os.path.isdir(real) else None
        if why is None:
            kept.append(entry)
            continue
        notes.append(
            f"Warning: [tools.exec] hostWritable {entry} is refused: {why}; another account may read, "
            "replace or rename what runs write there, so host runs see it empty and read-only. Make it "
            f"this gateway's (chown {own} {real}, in a directory only root or this account may change) "
            "or list another directory"
        )
    return tuple(kept), tuple(notes)


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
    listed = [r for r in listed if inside(r, home)]
    for given in outside.writable:
        named = os.path.abspath(os.path.expanduser(given))
        # A name that leads through a link in a dir some agent may write is that agent's to point (round
        # 8 r: a missing ~/work/cache made a link to ~/.bashrc.d, which the next view bound writable).
        # A link outside the home in a directory commands may change (not `/`: a gateway that may write
        # `/` gives its commands the system anyway) is one a run could have made as well.
        planted = [
            h
            for h in link_hops(named)
            if any(inside(h, r) and h != r for r in listed)
            or (not inside(h, home) and os.path.dirname(h) != os.sep and changeable(os.path.dirname(h)))
        ]
        if planted:
            raise HostViewError(
                f"[tools.exec] hostWritable names {given}, reached through the link {planted[0]}, in a "
                "directory host commands may write (one of them may have made it): name the directory itself"
            )
        root = otherroots.resolve(given)  # as every other agent's view resolves it to cover it
        if not inside(root, home) or not os.path.isdir(root):
            continue  # outside the home it is writable already; a missing one has nothing to write
        # A root holding a protected path, or inside one (a trusted dir is read whole: a root in ~/.ssh
        # gives an `Include config.d/*` the agent's Match exec; a root in a pathPrepend dir, its programs).
        holds = (
            [home]
            if root == home
            else [
                p
                for p in protected(state, environ, outside)
                if inside(p, root) or (inside(root, p) and os.path.isdir(p))
            ]
        )
        # and none may be inside what is kept whole: a file made there is read as the rest is
        holds += [d for d in _kept_whole(state, environ, outside) if inside(root, d)]
        # bwrap mounts a root at its path, found by name: a root below another agent's (not below one of
        # this agent's: then it is not bound again) is in a directory whose names that agent's runs can
        # exchange for a link while this view is made, and the mount would land where the link points
        outer = [
            r
            for r in map(os.path.realpath, map(os.path.expanduser, outside.writable_anywhere))
            if r != root and inside(root, r)
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


def outside_roots(home: str, state: str, outside: Outside) -> list[str]:
    """The agent's `hostWritable` dirs outside the home (resolved, present, outermost only; never `/`, nor
    one holding the home or under the state dir)."""
    found: list[str] = []
    for given in outside.writable:
        real = os.path.realpath(os.path.expanduser(given))
        if real == os.sep or inside(real, home) or inside(home, real) or under(real, state):
            continue
        if os.path.isdir(real) and not os.path.islink(real):
            found.append(real)
    return [r for r in found if not any(o != r and inside(r, o) for o in found)]


def workdir_note(state: str, outside: Outside) -> str | None:
    """A warning for a run whose workdir is in the home but under no `hostWritable` dir (it writes
    nothing in the home), or outside the home in a tree the run sees as a read-only layer (engine.
    commands.homelayer), naming what to change; None under a listed dir, in a private or shared dir, or
    for the home itself (exec's default workdir, read-only as documented: no note on every run)."""
    if outside.workdir is None or outside.chdir is not None:
        return None  # none, or in the agent's own private copy (writable)
    cwd = os.path.realpath(outside.workdir)
    if not inside(cwd, home_dir()):
        return _outside_note(state, outside, cwd)
    if cwd == home_dir():
        return None
    try:
        if any(inside(cwd, r) for r in writable_roots(state, None, outside)):
            return None
    except HostViewError:
        return None  # refused at the spawn, with its own message
    return (
        f"The workdir {outside.workdir} is in the home but under no [tools.exec] hostWritable directory: "
        "in the host view the home is read-only but for the hostWritable dirs, so this command writes "
        'nothing in the home; add its project directory to hostWritable, or set hostView = "none"'
    )


def _outside_note(state: str, outside: Outside, cwd: str) -> str | None:
    home = home_dir()
    if hostkeeper.helper_path() is None or any(inside(cwd, r) for r in outside_roots(home, state, outside)):
        return None  # nothing layered, or the agent's own writable dir
    private = [os.path.realpath(dest) for _source, dest in outside.private]
    if any(inside(cwd, p) for p in private):
        return None
    writable = [os.path.realpath(os.path.expanduser(w)) for w in outside.writable]
    skip = [state, *outside.covered, *private, *other_roots(state, None, outside)]
    found = homelayer.layers(home, skip, writable, system=True, sockets=socket_dirs(outside))
    if not any(inside(cwd, d) for d in found):
        return None
    return (
        f"The workdir {outside.workdir} is outside the home in a tree host runs see read-only (no socket "
        "there connects either): this command writes nothing there; add the directory to [tools.exec] "
        'hostWritable, or set hostView = "none"'
    )


def other_roots(
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
    """What the view hides of the home as private to the operator (engine.commands.homeprivate). Privacy
    is decided last and wins (fresh round 14 c): what the gateway or a program it trusts reads (git's
    configs and includes, ssh's config and includes, the PATH and import dirs, the ssh Include glob
    dirs, every agent's pathPrepend dir and rootfs, core.hooksPath among them) is reached through the
    private dirs above it but judged by its own mode: a trusted file another account could not read is
    hidden, a trusted dir is shown with only what its own mode lets others read (the run's tool then lacks
    it: the safe side). Shown as they are: the hostWritable dirs (the operator's grant, bound writable),
    the view's scratch ~/.cargo, and what is covered already (the state dir, the sandbox roots)."""
    home = home_dir(environ)
    if home == os.sep or not os.path.isdir(home):
        return homeprivate.Found()
    env = os.environ if environ is None else environ
    files = [*git_configs(environ), *includes, *ssh_configs(home)]
    path_dirs = [p for p in env.get("PATH", "").split(os.pathsep) if p.startswith(os.sep)]
    dirs = [*import_paths(), *path_dirs, *ssh_dirs(home), *outside.readonly]
    shown = [home, state, *outside.covered, *roots]
    if scratch_cargo(environ):
        shown.append(cargo_home(environ))  # the view's scratch ~/.cargo, made over it
    return homeprivate.find(
        home,
        [os.path.realpath(p) for p in files],
        [os.path.realpath(p) for p in dirs],
        tuple(os.path.realpath(p) for p in shown),
    )


def shadowed_dirs(home: str, state: str, roots: list[str], outside: Outside) -> list[str]:
    """The directories shown as a read-only copy of their entries (engine.commands.dirshadow): each one
    holding a hidden file (a node's key: a rename in it then changes nothing in a running view) or socket,
    and ~/.ssh (a ControlMaster socket there is the node's account). Not the home, `/` or a shared
    directory, none holding the home, the state dir or a writable root and none inside a writable root: a
    hidden file there keeps its own bind."""
    # A hidden socket's directory (/run holding the Docker engine's, the gateway's own ssh-agent's) is not
    # copied when runs are layered (the helper is built): it is a layer of every run, as a tree's or one
    # of its own (socket_dirs, engine.commands.homelayer.layers `sockets`), where no socket connects,
    # bound before the view or after, at any depth; the copy had a budget (512 entries, 4 deep) past
    # which its directories were bound whole, sockets and all (fresh round 14 c). A hidden file's is: a
    # key rotated by a rename would show through its bind.
    # Not when its directory cannot be one layer (a non-root gateway's /run holding a host mount:
    # homelayer.whole): a socket directly in it is in no layer.
    layered = hostkeeper.helper_path() is not None
    points = homelayer.mount_points() if layered and homelayer.locked() else []
    found = [
        os.path.dirname(os.path.realpath(p))
        for p in outside.hidden
        if os.path.lexists(p)
        and not (layered and _socket(p) and homelayer.whole(os.path.dirname(os.path.realpath(p)), points))
    ]
    ssh = os.path.realpath(os.path.join(home, ".ssh"))
    if os.path.isdir(ssh):
        found.append(ssh)
    keep: list[str] = []
    for d in dict.fromkeys(found):
        if d in (home, os.sep) or not os.path.isdir(d) or shared(d) or under(d, state):
            continue
        if inside(home, d) or inside(os.path.realpath(state), d):
            continue
        if any(inside(r, d) or inside(d, r) for r in roots):
            continue
        keep.append(d)
    return keep


def socket_dirs(outside: Outside) -> list[str]:
    """The directory (resolved) of every socket the views hide (`outside.hidden`: the gateway's own
    ssh-agent, a node's agent, the Docker engine's, another gateway's), and of every hidden name with
    nothing there yet (an agent started later binds it there): each a read-only layer of the run's own
    (engine.commands.homelayer.layers `sockets`), so that no socket in it connects, beside the hidden
    one too, whatever tree it is in (fresh round 9 y: a 0700 `ssh-AbC` in a world-writable tree, which
    is not layered, kept its other agent sockets reachable). Not one holding a hidden file now (a node's
    key): that directory is a copy of its entries (shadowed_dirs), where no socket is either, and a
    layer would show a key renamed into it."""
    keys = {os.path.dirname(os.path.realpath(p)) for p in outside.hidden if os.path.isfile(p)}
    found: list[str] = []
    for p in outside.hidden:
        d = os.path.dirname(os.path.realpath(p))
        if d not in keys and (_socket(p) or not os.path.lexists(p)) and os.path.isdir(d):
            found.append(d)
    return list(dict.fromkeys(found))


def _socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


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
    if under(cwd, state):
        raise HostViewError(f"{cwd} is inside the state dir, which gateway-host commands cannot see")
    for root in outside.covered:
        if os.path.realpath(root) != os.sep and under(cwd, root):
            raise HostViewError(
                f"{cwd} is inside {root} (a sandbox workspace root, or the Docker engine's client keys), "
                "which gateway-host commands cannot see"
            )
    own = [otherroots.resolve(w) for w in outside.writable]
    hidden = otherroots.hidden_at(os.path.realpath(cwd), own, other_roots(state, None, outside))
    if hidden is not None:
        raise HostViewError(
            f"{cwd} is inside {hidden}, another agent's [tools.exec] hostWritable dir, which this agent's "
            "host commands cannot see"
        )
