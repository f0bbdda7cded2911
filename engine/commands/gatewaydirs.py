"""Every gateway of this account records its state dir where every other's host views read it, so each
covers them all (fresh round 14 c: a second gateway's state dir outside the home, its operator token with
it, was every host run's of the first; only a view's own state dir was covered).

The record is a directory of the home, `~/.exechost-gateways`, one file per state dir (named by a digest
of its path, holding the path): the home is read-only in every host view and no `hostWritable` dir may
hold the record (engine.commands.hosttrust.protected), so no run adds, removes or re-points an entry.
Each recorded dir is covered whole with an empty tmpfs, as a sandbox workspace root is: outside the home
(where no mode is judged) and in it too (0700 by engine.statefs, so hidden as private anyway, but not
inside a hostWritable dir, which is shown as it is); never one that is `/`, holds the home, is inside
this view's state dir (covered already), or holds what every run needs (the PATH and import dirs, the
helper) or one of the agent's own hostWritable dirs (a cover would hide them). One holding this view's
state dir is covered (that one is an empty tmpfs in its view: nothing of it is lost; fresh round 17 c).
The record is read per view from a cache keyed by its directory's stat, each named dir lstat'ed per view
(covered only while it is a directory).

Every exechost service that keeps state records its state dir here, not only a gateway (fresh round 15
b): a node service records its own at start, and a gateway records the state dir a node of this account
on this machine names in its hello (`place`: a node started with another HOME records elsewhere), once
it proves to be that node's own (node_state_dir: the hello is the node's word, fresh round 16 b). Every
sandbox workspace root ever used is recorded too (`w-` entries, by engine.sandbox.wsfs.ensure): a root
the config no longer names still holds every agent's workspaces, and is covered as the config's are (in
the home too).

Every gateway records what its own views hide because its config names it too (fresh round 15 b): each
node's login key and agent socket (`h-` entries, hidden with an empty file) and the engine's client key
dirs (`c-` entries, covered whole), the set engine.tools.exec_host.config_secrets gives its own views;
every view hides the union, so a second gateway's node key outside the home is no host run's.

A state dir is judged by who may write it (adopt, fresh round 16 a), as ssh's StrictModes judges: no
other account may write it or a dir above it. An existing one is trusted only when a gateway of this
account recorded it (a host run cannot write the home, so it cannot forge a record) or it holds nothing
and sits in no dir others may write: a state dir a host run planted (a helper, an override, a socket, a
token, even a config or an allowlist of its choosing) is refused at start instead of adopted (fresh rounds
15 b, 17 c).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable, Iterator

from engine import pathtrust
from engine.commands.hostoutside import inside

NAME = ".exechost-gateways"
ROOT_PREFIX = "w-"  # an entry naming a sandbox workspace root, not a state dir
HIDDEN_PREFIX = "h-"  # a file a gateway's config names (a node's key, an agent socket): hidden
COVERED_PREFIX = "c-"  # a dir of the engine's client keys a gateway uses: covered
WRITABLE_PREFIX = "a-"  # an agent's hostWritable root: covered in other agents' views after it is retired
_PREFIXES = (ROOT_PREFIX, HIDDEN_PREFIX, COVERED_PREFIX, WRITABLE_PREFIX)
TRUST_ENV = "EXECHOST_TRUST_STATE_DIR"  # the operator's word: adopt this unrecorded state dir
_Read = dict[str, tuple[str, ...]]
_cache: dict[str, tuple[tuple[int, int, int], _Read]] = {}
_judged: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}
_lock = threading.Lock()


def record_dir(home: str) -> str:
    return os.path.join(home, NAME)


def place() -> str:
    """This account on this machine, as a node's hello names it (never a secret: a node says where its
    state dir is only to a gateway that can tell it is on the same machine as the same account); "" when
    the machine has no id."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError), open(path, "rb") as f:
            ident = f.read(256).strip()
            if ident:
                return hashlib.sha256(b"exechost-place\0%s\0%d" % (ident, os.geteuid())).hexdigest()[:32]
    return ""


_roots_done: set[tuple[str, str]] = set()


def record_root(home: str, root: str) -> None:
    """Record a sandbox workspace root in use (once per process and root, once written): covered in every
    view after, whatever the config names then. RecordError when it cannot be written (the root is not
    used: fail closed)."""
    settle(home)
    key = (home, os.path.realpath(root))
    if key in _roots_done:
        return
    record(home, root, prefix=ROOT_PREFIX)
    if not _is_owed(home, ROOT_PREFIX, key[1]):
        _roots_done.add(key)


_writable_done: set[tuple[str, str]] = set()


def record_writable(home: str, roots: Iterable[str]) -> None:
    """Record each agent's hostWritable root a config names (once per process and root, resolved, once
    written): an agent retired from the config leaves its dir and what its runs wrote there, and every
    other agent's view still covers it (fresh round 17 a), as a retired sandbox workspace root stays
    covered. RecordError when one cannot be written: the view is not made (fail closed), and the root is
    owed, written before any later view of this process is made, whatever the config names then."""
    settle(home)
    for root in roots:
        key = (home, os.path.realpath(os.path.expanduser(root)))
        if key in _writable_done:
            continue
        record(home, key[1], prefix=WRITABLE_PREFIX)
        if not _is_owed(home, WRITABLE_PREFIX, key[1]):
            _writable_done.add(key)


def recorded_writable(home: str) -> tuple[str, ...]:
    """Every hostWritable root recorded for this account (resolved paths, present or not)."""
    return _read(home).get(WRITABLE_PREFIX, ())


class RecordError(Exception):
    """A record every view of this account relies on could not be made durable (a full disk, a home this
    account cannot write): what needed it is refused, never done without it (fresh round 18 c)."""


# records that failed in this process, written before anything else is (settle): a view made after one
# failed would otherwise lack it for good once the config stops naming it (fresh round 18 c)
_owed: dict[tuple[str, str, str], None] = {}


_deferring = threading.local()


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Every record made inside is tried, each failure owed, and the first RecordError raised at the end:
    a view's first failed record cannot keep the others it needs from being written or owed."""
    if getattr(_deferring, "errors", None) is not None:
        yield
        return
    errors: list[RecordError] = []
    _deferring.errors = errors
    try:
        yield
    finally:
        _deferring.errors = None
    if errors:
        raise errors[0]


def _failed(exc: RecordError) -> None:
    errors = getattr(_deferring, "errors", None)
    if errors is None:
        raise exc
    errors.append(exc)


def settle(home: str) -> None:
    """Write every record this process owes `home` (one that failed before); RecordError while one still
    cannot be written."""
    if not _owed:
        return
    for key in [k for k in _owed if k[0] == home]:
        try:
            _write(home, key[2], key[1])
        except RecordError as exc:
            _failed(exc)
            continue
        _owed.pop(key, None)


def _is_owed(home: str, prefix: str, real: str) -> bool:
    return (home, prefix, real) in _owed


def record(home: str, state: str, *, prefix: str = "", resolve: bool = True) -> None:
    """Record `state` (resolved unless not `resolve`) for every view of this account, durably (written and
    synced) or RecordError naming the file and why (a full disk): never marked done unwritten. A failed one
    is owed: written first at the next record of this process (settle). Never through a link."""
    real = os.path.realpath(state) if resolve else os.path.abspath(state)
    try:
        _write(home, real, prefix)
    except RecordError as exc:
        _owed[(home, prefix, real)] = None
        _failed(exc)
        return


def _write(home: str, real: str, prefix: str) -> None:
    where = record_dir(home)
    name = prefix + hashlib.sha256(os.fsencode(real)).hexdigest()[:32]
    path = os.path.join(where, name)
    # per thread (views are made in threads): two writing one entry never meet on one temp name
    temp = os.path.join(where, f".{name}.{os.getpid()}.{threading.get_ident()}")
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(where, 0o700)
        st = os.lstat(where)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise RecordError(
                f"{where}: not a directory of this account (a link or another's): cannot record {real}"
            )
        if os.path.lexists(path):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)  # one a crashed process of the same pid and thread id left
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            data = os.fsencode(real)
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        dfd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise RecordError(
            f"cannot record {real} in {path}: {exc.strerror or exc} (is the home's disk full?): every other "
            "gateway's host views rely on this record, so what needs it is refused until it can be written"
        ) from exc


def recorded(home: str) -> tuple[str, ...]:
    """Every state dir recorded for this account (resolved paths, present or not)."""
    return _read(home).get("", ())


def recorded_roots(home: str) -> tuple[str, ...]:
    """Every sandbox workspace root recorded for this account (resolved paths, present or not)."""
    return _read(home).get(ROOT_PREFIX, ())


def _read(home: str) -> _Read:
    where = record_dir(home)
    try:
        st = os.lstat(where)
    except OSError:
        return {}
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return {}
    key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    with _lock:
        cached = _cache.get(where)
        if cached is not None and cached[0] == key:
            return cached[1]
    found: dict[str, set[str]] = {}
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    text = os.fsdecode(os.read(fd, 4096))
                finally:
                    os.close(fd)
                if text.startswith(os.sep):
                    kind = entry.name[:2] if entry.name[:2] in _PREFIXES else ""
                    found.setdefault(kind, set()).add(text)
    result = {k: tuple(sorted(v)) for k, v in found.items()}
    with _lock:
        _cache[where] = (key, result)
    return result


_secrets_done: set[tuple[str, str, str]] = set()


def record_secrets(home: str, hidden: Iterable[str], covered: Iterable[str]) -> None:
    """Record what a gateway's views hide because its config names it (once per process and path, once
    written), as named and resolved. RecordError when one cannot be written (the start or view fails
    closed; owed from then on)."""
    settle(home)
    for prefix, paths in ((HIDDEN_PREFIX, hidden), (COVERED_PREFIX, covered)):
        for path in paths:
            key = (home, prefix, os.path.abspath(path))
            if key in _secrets_done:
                continue
            record(home, path, prefix=prefix)
            record(home, path, prefix=prefix, resolve=False)
            if not _is_owed(home, prefix, os.path.realpath(path)) and not _is_owed(home, prefix, key[2]):
                _secrets_done.add(key)


def others_secrets(home: str, state: str, needed: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The files (to hide) and dirs (to cover) gateways of this account recorded as their config's
    secrets: present ones, outside `state`. A file never directly in the home, `/` or a dir holding the
    home (no view hides it there for good: that gateway's own views refuse it); a dir judged as a state
    dir is (never `/`, the home, one holding it or what every run needs). Judged once per (record, state,
    needed), as `others`; presence per call."""
    found = _read(home)
    wanted = tuple(needed)
    files_in, dirs_in = found.get(HIDDEN_PREFIX, ()), found.get(COVERED_PREFIX, ())
    if not files_in and not dirs_in:
        return (), ()
    key = (home, "\0secrets\0" + state, wanted, (*files_in, "\0", *dirs_in))
    with _lock:
        kept = _judged.get(key)
    if kept is None:
        kept = _judge_secrets(home, state, wanted, files_in, dirs_in)
        with _lock:
            if len(_judged) > 64:
                _judged.clear()
            _judged[key] = kept
    files: list[str] = []
    dirs: list[str] = []
    for path in kept:
        with contextlib.suppress(OSError):
            if path.startswith("\0"):
                if stat.S_ISDIR(os.lstat(path[1:]).st_mode):
                    dirs.append(path[1:])
            elif not stat.S_ISDIR(os.stat(path).st_mode):
                files.append(path)
    return tuple(files), tuple(dirs)


def _judge_secrets(
    home: str, state: str, needed: tuple[str, ...], files: tuple[str, ...], dirs: tuple[str, ...]
) -> tuple[str, ...]:
    """The recorded secrets a view of `state` may hide: files as they are, dirs marked with a leading NUL."""
    real_home, own = os.path.realpath(home), os.path.realpath(state)
    out: list[str] = []
    for path in files:
        where = os.path.dirname(os.path.realpath(path))
        if where in (real_home, os.sep) or inside(real_home, where) or inside(path, own):
            continue
        out.append(path)
    must = [os.path.realpath(n) for n in needed]
    for path in dirs:
        if path in (own, os.sep, real_home) or inside(real_home, path) or inside(own, path):
            continue
        if inside(path, own) or any(inside(n, path) for n in must):
            continue
        out.append("\0" + path)
    return tuple(out)


class StateDirRefusedError(Exception):
    """A state dir this service may not trust: another account may write it or a dir above it, or it is
    an existing one no gateway of this account recorded (nor the operator claimed) that holds anything,
    or sits where others write (whoever made it chose what is in it)."""


CLAIM_VERB = "exechost state claim"  # the operator's explicit word for an unrecorded dir holding files


def claim(home: str, state: str) -> None:
    """The operator's own exechost command about to write `state` (a CLI verb before the first gateway
    start: `agents add`): record it when adopt would (new or empty), never refuse (a gateway's start does)."""
    try:
        adopt(home, state, {})
    except StateDirRefusedError:
        pass
    except RecordError:  # a host run's CLI (the home read-only) or a full disk: the gateway's start judges
        _owed.pop((home, "", os.path.realpath(state)), None)


def claim_state(home: str, state: str) -> str:
    """`exechost state claim DIR`: the operator says an unrecorded state dir, whatever it holds, is theirs
    (they wrote its config before its first start, or inspected it). Judged by who may write it as every
    state dir is, then recorded; returns the real path. A host run cannot say it: the record is in the
    home, read-only in every view (a run that names another home records where no gateway reads)."""
    real = os.path.realpath(state)
    why = judge(real)
    if why:
        raise StateDirRefusedError(f"{state}: another account may write this state dir ({why})")
    if not os.path.isdir(real):
        raise StateDirRefusedError(f"{state}: not a directory")
    record(home, real)
    return real


def judge(state: str, *, uid: int | None = None) -> str:
    """Why `state` cannot be this service's: "" when no other account may write it or any dir above it, as
    ssh's StrictModes judges (engine.pathtrust.strict_hold, on the resolved path: no link on the way is
    another's)."""
    return pathtrust.strict_hold(os.path.realpath(state), os.geteuid() if uid is None else uid)


def node_state_dir(path: str, node_id: str, writable: list[str]) -> bool:
    """Whether `path` is node `node_id`'s own state dir, made by this account, before a gateway records
    what a node's hello names (fresh round 16 b): a real directory (no link on the way) of this uid, open
    to no one else, under no directory another account may change (engine.pathtrust.foreign_hold) nor any
    agent's hostWritable dir (a run's to write), holding that node's identity file (node.json, 0600, this
    uid's, naming `node_id`). Judged by who may write it, not by its name."""
    uid = os.geteuid()
    real = os.path.realpath(path)
    if real != os.path.normpath(path):
        return False
    for root in writable:
        expanded = os.path.realpath(os.path.expanduser(root))
        if (
            real == expanded
            or real.startswith(expanded.rstrip(os.sep) + os.sep)
            or expanded.startswith(real + os.sep)
        ):
            return False
    chain = pathtrust.chain_to(real)
    if isinstance(chain, str) or pathtrust.foreign_hold(chain, uid) is not None:
        return False
    st = chain[-1][1]
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o077:
        return False
    try:
        fd = os.open(os.path.join(real, "node.json"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or fst.st_uid != uid or fst.st_mode & 0o077:
                return False
            data = json.loads(os.read(fd, 1 << 16))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("nodeId") == node_id


def adopt(home: str, state: str, environ: dict[str, str] | None = None, *, resolved: bool = False) -> str:
    """Trust `state` as this service's state dir, recording it before anything is written in it; returns
    the real path judged, the one the service must use from then on (a link on the named way may be
    re-pointed later: engine.statefs.pin_state_dir). `resolved`: `state` is that path already (pinned
    by the caller), refused if a link has taken a place on it since. First by who may write it (judge):
    no other account may, it or any dir above. Then, for an existing dir no gateway of this account
    recorded (this account's host runs write what it writes, the home's hostWritable dirs too): it must
    be empty (or missing) and not sit in a dir others may write (a sticky one: whoever may write there
    may have made it). Not even a `config.toml` or `exec-approvals.json`: a host run is this account, so
    a file of this uid says nothing of who wrote it, and a planted one was the policy of the gateway
    started there (fresh round 17 c). What the operator writes is recorded first instead: the operator's
    CLI records a new dir before it writes there (claim), `exechost state claim DIR` records one the
    operator filled by hand (a node's `stateDir` on the node: claim_state), the home's top level needs no
    record, and $EXECHOST_TRUST_STATE_DIR names one for one start (never passed to a daemon:
    engine.protocol.daemonenv). Otherwise StateDirRefusedError, naming the dir, what it holds and the
    command that claims it."""
    env = os.environ if environ is None else environ
    real = os.path.realpath(state)
    if resolved and real != os.path.abspath(state):
        raise StateDirRefusedError(
            f"{state}: this state dir's path now leads to {real} (a link took a place on it since it was "
            "resolved): refusing a dir other than the one judged"
        )
    why = judge(real)
    if why:
        raise StateDirRefusedError(
            f"{state}: another account may write this state dir ({why}): whoever may write it chooses its "
            "tokens and the helpers this service runs. Use a state dir only this account (or root) may "
            "write, in a dir only they may write"
        )
    trusted = env.get(TRUST_ENV, "")
    # directly in the home: no host run writes there (the home is read-only in every view and no
    # hostWritable dir may be the home, which holds the record); deeper, a hostWritable dir may hold it
    direct = os.path.dirname(real) == os.path.realpath(home)
    if direct or real in recorded(home) or (trusted and os.path.realpath(trusted) == real):
        record(home, real)
        return real
    names: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        names = os.listdir(real)
        if os.stat(os.path.dirname(real)).st_mode & 0o022:
            names.append("")  # present in a dir others may write: whoever may write there may have made it
    held = sorted(set(names))
    if held:
        where = (
            f"holds {', '.join(n for n in held[:6] if n)}{', ...' if len(held) > 6 else ''}"
            if held != [""]
            else f"is in {os.path.dirname(real)}, a dir others may write"
        )
        raise StateDirRefusedError(
            f"{state}: this existing state dir {where}, and no gateway of this account recorded it "
            f"(in ~/{NAME}): whoever made it, a host command among them, chose what is in it. Inspect "
            f"it: if you wrote it (a config before the first start), run `{CLAIM_VERB} {state}` once as "
            f"this account; otherwise remove it (a gateway makes it anew)"
        )
    record(home, real)
    return real


def others(home: str, state: str, needed: Iterable[str]) -> tuple[str, ...]:
    """The other gateways' state dirs a view of `state` covers: present directories (no link in their
    place), none that is `/`, holds the home, is `state` or inside it, or holds a path of `needed`
    (what every run needs, the agent's own hostWritable dirs). What the record names is judged once per
    (record, state, needed); presence per call (a cover of a missing root would make it)."""
    wanted = tuple(needed)
    paths = recorded(home)
    return _present_judged((home, state, wanted, paths), home, state, wanted, paths)


def old_roots(home: str, state: str, needed: Iterable[str], named: Iterable[str]) -> tuple[str, ...]:
    """The recorded workspace roots a view of `state` covers besides the `named` ones (the config's now):
    present directories, judged as the other state dirs are (others)."""
    wanted, shown = tuple(needed), {os.path.realpath(n) for n in named}
    paths = tuple(p for p in recorded_roots(home) if p not in shown)
    if not paths:
        return ()
    return _present_judged((home, "\0roots\0" + state, wanted, paths), home, state, wanted, paths)


def _present_judged(
    key: tuple[str, str, tuple[str, ...], tuple[str, ...]],
    home: str,
    state: str,
    wanted: tuple[str, ...],
    paths: tuple[str, ...],
) -> tuple[str, ...]:
    """What `_judge` keeps of `paths` (once per key), then the ones present as directories now."""
    with _lock:
        kept = _judged.get(key)
    if kept is None:
        kept = _judge(home, state, wanted, paths)
        with _lock:
            if len(_judged) > 64:
                _judged.clear()
            _judged[key] = kept
    out: list[str] = []
    for path in kept:
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                out.append(path)
    return tuple(out)


def _judge(home: str, state: str, needed: tuple[str, ...], paths: tuple[str, ...]) -> tuple[str, ...]:
    own = os.path.realpath(state)
    home = os.path.realpath(home)
    must = [os.path.realpath(n) for n in needed]
    out: list[str] = []
    for path in paths:
        if path == own or path == os.sep or inside(home, path):
            continue
        # one that holds this view's own is covered too (fresh round 17 c: a dev gateway's state dir inside
        # the main one's showed its runs the main one's tokens): the own one is an empty tmpfs already and
        # nothing of the view is bound below it, so the cover hides nothing a run may use
        if inside(path, own) or any(inside(n, path) for n in must):
            continue
        out.append(path)
    return tuple(out)
