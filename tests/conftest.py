"""Test isolation: every test gets its own short state dir and HOME, never the user's."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _pytest._code import code as _pytest_code
from hypothesis import HealthCheck, settings

_statement_range = _pytest_code.getstatementrange_ast


def _statement_range_or_line(*args: object, **kwargs: object) -> object:
    """pytest's own source lookup for a failure's report, with CPython 3.11's `SystemError: AST
    constructor recursion depth mismatch` (seen once in a long run, while pytest formatted an expected
    xfail's traceback, aborting the run as INTERNALERROR) taken as the SyntaxError pytest already falls
    back from (it shows the failing line alone). What the tests decide is untouched."""
    try:
        return _statement_range(*args, **kwargs)  # type: ignore[arg-type]
    except SystemError as exc:
        raise SyntaxError(str(exc)) from exc


_pytest_code.getstatementrange_ast = _statement_range_or_line  # type: ignore[assignment]

# Property tests run the same examples every time unless asked to explore: a submission must never fail to
# land by chance, and whether a CI sets `CI` is not ours to know (`.ci/run` runs the README command, which
# may not set it), so deterministic is the default everywhere rather than only when `CI` is set. To explore
# new examples locally: `EXECHOST_HYPOTHESIS_RANDOM=1` (or `pytest --hypothesis-profile=random`); a failure
# found that way is kept in .hypothesis/ and replayed by the random profile until fixed, and belongs in an
# `@example` so the derandomised runs keep it. `CI` set wins over the opt-in.
settings.register_profile(
    "derandomized",
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("random", derandomize=False)
_explore = os.environ.get("EXECHOST_HYPOTHESIS_RANDOM") == "1" and "CI" not in os.environ
settings.load_profile("random" if _explore else "derandomized")

# Every gateway daemon a test starts inherits this, so a later run can tell ours from anyone else's.
RUN_MARK = "EXECHOST_TEST_RUN"
os.environ[RUN_MARK] = str(os.getpid())


def _gateway_daemons(match: Callable[[dict[bytes, bytes]], bool]) -> list[int]:
    """Pids of this user's `python -m runner gateway run` processes whose environment matches."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"runner" not in argv or argv[argv.index(b"runner") + 1 : argv.index(b"runner") + 3] != [
                b"gateway",
                b"run",
            ]:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError):
            continue
        if match(env):
            pids.append(int(entry.name))
    return pids


def _running(pid: int) -> bool:
    """Alive and not a zombie (a daemon's parent may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _stop(pids: list[int]) -> None:
    """SIGTERM (graceful: the daemon kills its sessions), then SIGKILL after 5 s; by pid only."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: bytes) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="session", autouse=True)
def no_orphaned_gateways() -> Iterator[None]:
    """Daemons left by an earlier test run that died before its teardown (killed, timed out) go first."""
    _stop(_gateway_daemons(lambda env: RUN_MARK.encode() in env and not _alive(env[RUN_MARK.encode()])))
    yield
    mine = str(os.getpid()).encode()
    _stop(_gateway_daemons(lambda env: env.get(RUN_MARK.encode()) == mine))


@pytest.fixture(scope="session", autouse=True)
def static_helpers_built_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test's fresh state dir would compile the sandbox's static helpers again (a `cc -static` each):
    one build per session, copied into each bin dir (tests/helpers/staticcache.py).
    `EXECHOST_TEST_REBUILD_HELPERS=1`: every state dir builds its own, as in production."""
    from engine.sandbox import staticbuild
    from tests.helpers.staticcache import cached_builder

    if os.environ.get("EXECHOST_TEST_REBUILD_HELPERS") == "1":
        yield
        return
    cache = tmp_path_factory.mktemp("static-helpers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(staticbuild, "_build_locked", cached_builder(cache, staticbuild._build_locked))
        yield


@pytest.fixture(autouse=True)
def state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Short paths under /tmp: Unix socket paths must stay under 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="eh-", dir="/tmp"))
    state = root / "s"
    home = root / "h"
    state.mkdir(mode=0o700)
    home.mkdir(mode=0o700)
    # made here as the operator would: recorded, so a gateway adopts it whatever a test writes first
    # (engine.commands.gatewaydirs.adopt refuses an unrecorded one holding a gateway's files)
    from engine.commands import gatewaydirs

    gatewaydirs.record(str(home), str(state))
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXECHOST_HOST_HOME", str(home))  # this test's HOME is the home host views protect
    monkeypatch.delenv("EXECHOST_CONFIG", raising=False)
    # Host views give each agent its own copy of this dir, standing in for /tmp and the like
    # (engine.commands.hostprivate): most tests' workdirs are in the machine's /tmp, which the default
    # would make the agent's own. Tests of the default itself unset it.
    (root / "tmp").mkdir()
    monkeypatch.setenv("EXECHOST_HOST_PRIVATE", str(root / "tmp"))
    yield state
    prefix = str(root).encode() + b"/"
    leftover = _gateway_daemons(lambda env: env.get(b"OPENCLAW_STATE_DIR", b"").startswith(prefix))
    if leftover:
        warnings.warn(f"stopping gateway daemon(s) {leftover} this test left running", stacklevel=1)
        _stop(leftover)
    from engine.commands import hostkeeper  # this process's kept host views (their bwraps name the dir)

    hostkeeper.stop()
    # Sandbox keepers (bwrap's parent shell, in its own session so it outlives a gateway as a container
    # does) and anything else still running over this test's dirs: gone with them, never left behind.
    _stop(_processes_naming(prefix))
    _detach({p for p in _private_mounts() if p.startswith(f"{root}/")})  # before its dirs are removed
    shutil.rmtree(root, ignore_errors=True)


def _private_mounts() -> set[str]:
    """The agents' capped private dirs mounted now (engine.commands.privatefs: <state>/hostprivate/<agent>),
    the browser sandboxes' socket dirs (engine.sandbox.sockdirfs: <state>/b/<hash>), and the sandbox
    workspaces' own filesystems (engine.sandbox.wsfs), as a root gateway leaves them for the next one."""
    with open("/proc/self/mountinfo") as f:
        points = {line.split()[4] for line in f}
    return {p for p in points if os.path.basename(os.path.dirname(p)) in ("hostprivate", "b")} | set(
        _workspace_mounts()
    )


def _workspace_mounts() -> dict[str, str]:
    """Each sandbox workspace's filesystem mounted now, with its image as its loop device names it (with
    " (deleted)" once its test removed it): a loop-mounted ext4 whose image is in a root's `.images`."""
    from engine.sandbox import wsfs

    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            words = line.split()
            fields = words[words.index("-") + 1 :] if "-" in words else []
            if fields[:1] != ["ext4"] or not fields[1:2] or not fields[1].startswith("/dev/loop"):
                continue
            try:
                with open(f"/sys/block/{os.path.basename(fields[1])}/loop/backing_file") as b:
                    image = b.read().rstrip("\n")
            except OSError:
                continue
            if os.path.basename(os.path.dirname(image)) == wsfs.IMAGES:
                found[words[4]] = image
    return found


@pytest.fixture(autouse=True)
def no_private_mounts_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test's gateways mount its agents' private dirs under its state dir (as root): detached after it,
    when its state dir was one of this run's own (the `state_dir` fixture's root detaches its own), so no
    test leaves mounts behind it (nor a dir that cannot be removed). Only this run's: another suite
    running at the same time (the held pass beside the main one) has its own mounts in use."""
    if os.geteuid() != 0:
        yield
        return
    base = f"{tmp_path_factory.getbasetemp()}/"
    before = _private_mounts()
    yield
    # Workspaces first (one whose test removed its root has a deleted image), then the private dirs: a
    # root holding nothing but them is abandoned once the workspaces' dirs are gone.
    gone = {p for p, image in _workspace_mounts().items() if image.endswith(" (deleted)")}
    _detach({p for p in set(_workspace_mounts()) - before if p.startswith(base) or p in gone})
    _detach({p for p in _private_mounts() - before if p.startswith(base) or _abandoned(p)})


def _abandoned(point: str) -> bool:
    """A private mount whose test removed its root (rmtree'd): nothing but the mounts is left there, in the
    state dir nor beside it. A parallel suite's root in use holds its home, its /tmp stand-in, its config
    (even before its gateway writes anything into the state dir)."""
    state = os.path.dirname(os.path.dirname(point))
    try:
        return os.listdir(state) == ["hostprivate"] and os.listdir(os.path.dirname(state)) == [
            os.path.basename(state)
        ]
    except OSError:
        return False


def _detach(points: set[str]) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for point in sorted(points, key=len, reverse=True):
        libc.umount2(os.fsencode(point), 2)  # MNT_DETACH
        with contextlib.suppress(OSError):  # a test's own teardown could not remove a mountpoint
            os.removedirs(point)


def _processes_naming(prefix: bytes) -> list[int]:
    """Processes (not this one) whose command line names a path under `prefix`."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if prefix in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def venv_bin(name: str) -> str:
    """Path of a console script next to the running interpreter (the project's venv)."""
    import sys

    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")

from tests.helpers.sshd import sshd_nodes  # noqa: E402, F401  (real OpenSSH nodes, for any test that asks)
