"""Host git never runs repository config it has not vetted: find the repository git will use, read its
config without running anything, and name every key not known to be inert (issue 18 part 3)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from engine.commands import gitargv, gitopts
from engine.commands.gitargv import RECEIVE_PACK_TREE, url_problem
from engine.commands.gitindex import UnreadableIndex, gitlinks
from engine.commands.regular import Unreadable, read_regular
from engine.pathtrust import only_root_changes

# Keys whose values git only ever uses as data (names, refs, flags, numbers), never as a program, a
# driver, a path to something that runs, an include, an alias or a URL rewrite. Everything else in a
# repository's config — every key nobody has listed yet included — makes the command ask.
INERT_KEYS = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "core.autocrlf",
        "core.eol",
        "core.safecrlf",
        "core.quotepath",
        "core.checkstat",
        "core.trustctime",
        "core.untrackedcache",
        "core.splitindex",
        "core.commitgraph",
        "core.multipackindex",
        "core.compression",
        "core.loosecompression",
        "core.abbrev",
        "core.preloadindex",
        "core.sparsecheckout",
        "core.sparsecheckoutcone",
        "core.whitespace",
        # Where the work tree is (git writes it for every absorbed submodule): it only moves where
        # attributes and .gitmodules are read, and vet() follows it to the submodules there.
        "core.worktree",
        "user.name",
        "user.email",
        "init.defaultbranch",
        "pull.rebase",
        "pull.ff",
        "merge.ff",
        "fetch.prune",
        "push.default",
        "push.autosetupremote",
        "status.showuntrackedfiles",
        "color.ui",
        "i18n.commitencoding",
        "i18n.logoutputencoding",
        "lfs.repositoryformatversion",
        # Repository formats, not behaviour: the object hash, the ref store, per-worktree config (whose
        # file is vetted too), and which remote a partial clone fetches from (a remote vetted like any).
        "extensions.objectformat",
        "extensions.refstorage",
        "extensions.worktreeconfig",
        "extensions.partialclone",
        "extensions.preciousobjects",
        "extensions.noop",
        "submodule.active",
    }
)
# `<section>.<subsection>.<name>`: the subsection is a name the user chose (a remote, a branch).
INERT_SUBSECTION_KEYS = {
    "remote": frozenset(
        {
            "url",
            "pushurl",
            "fetch",
            "push",
            "tagopt",
            "prune",
            "prunetags",
            "mirror",
            "skipdefaultupdate",
            "skipfetchall",
            "promisor",
            "partialclonefilter",
        }
    ),
    "branch": frozenset({"remote", "merge", "rebase", "pushremote", "description"}),
    "submodule": frozenset({"url", "active", "branch", "shallow", "ignore"}),
}
URL_KEYS = frozenset({("remote", "url"), ("remote", "pushurl"), ("submodule", "url")})

# Options git reads before the subcommand; any other leading option is not understood, so it asks.
_GLOBAL_FLAGS = frozenset(
    {
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--bare",
        "--no-replace-objects",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--version",
        "-v",
        "--help",
        "-h",
        "--html-path",
        "--man-path",
        "--info-path",
        "--exec-path",
    }
)
MAX_SUBMODULE_DEPTH = 3
MAX_CONFIG_FILES = 64  # more than this and the command asks rather than vetting forever
CONFIG_READ_CAP = 1 << 20


@dataclass(frozen=True)
class Finding:
    """Something in a tree the agent can write that the host program would run, and where it is."""

    program: str  # git, make, npm, …
    path: str  # the file that names or holds the code
    what: str  # "filter.x.process" or "Makefile recipes"

    def warning(self) -> str:
        return f"Warning: {self.path} defines {self.what}: {self.program} would run it on the host."


@dataclass(frozen=True)
class Repo:
    git_dir: str
    common_dir: str
    work_tree: str | None


def _read_gitfile(path: str) -> str | None:
    """`gitdir: <path>` in a `.git` file (relative to the file's directory), as git reads it."""
    try:
        text = read_regular(path, 4096, prefix=True).decode("utf-8", "replace")
    except Unreadable as exc:
        if exc.errno:
            return None
        raise
    if not text.startswith("gitdir: "):
        return None
    target = text[len("gitdir: ") :].rstrip("\r\n")
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


_OID = re.compile(rb"[0-9a-fA-F]{40}([0-9a-fA-F]{24})?")  # get_oid_hex: hexval takes either case
_ISSPACE = b" \t\n\v\f\r"  # git skips isspace() after `ref:`


def _valid_head(path: str) -> bool:
    """git's validate_headref: a symlink into refs/, `ref: refs/…`, or an object id. Anything else (a
    garbage HEAD) and git does not take the directory for a repository and keeps looking upward."""
    try:
        if os.path.islink(path):
            return os.readlink(path).startswith("refs/")
        head = read_regular(path, 256, prefix=True)
    except OSError:
        return False
    except Unreadable as exc:
        if exc.errno:
            return False
        raise  # there, but not a file: a FIFO here would hang whoever reads it (git included)
    if head.startswith(b"ref:"):
        return head[4:].lstrip(_ISSPACE).startswith(b"refs/")
    return _OID.match(head) is not None


def _is_git_dir(path: str) -> bool:
    """git's is_git_directory: a valid HEAD, objects/ and refs/ (objects/ and refs/ may be in the common
    dir). Only a guide: the run itself is pointed at what was vetted (engine.commands.pinned), so where
    this differs from git, git fails instead of reading another repository."""
    if not _valid_head(os.path.join(path, "HEAD")):
        return False
    common = _common_dir(path)
    return os.path.isdir(os.path.join(common, "objects")) and os.path.isdir(os.path.join(common, "refs"))


def _common_dir(git_dir: str) -> str:
    try:
        rel = read_regular(os.path.join(git_dir, "commondir"), 4096, prefix=True).decode("utf-8", "replace")
    except Unreadable as exc:
        if exc.errno:
            return git_dir
        raise
    rel = rel.strip()
    return os.path.realpath(os.path.join(git_dir, rel)) if rel else git_dir


def discover(start: str) -> Repo | str | None:
    """The repository git finds walking up from `start` (`.git` dir or file, else a bare repo), a
    problem text when git would fail (an unreadable `.git` file) or when a file it reads on the way is
    not a regular file (a FIFO `HEAD`), or None outside any repository."""
    try:
        return _discover(start)
    except Unreadable as exc:
        return _not_a_file(exc)


def _not_a_file(exc: Unreadable) -> str:
    return f"{exc}: exechost cannot tell which repository git would use"


def _discover(start: str) -> Repo | str | None:
    here = os.path.realpath(start)  # git chdirs, then walks up from the physical cwd
    while True:
        dot = os.path.join(here, ".git")
        if os.path.isfile(dot):
            target = _read_gitfile(dot)
            if target is None or not _is_git_dir(target):
                return f"{dot} is not a gitdir file git can follow"
            return Repo(target, _common_dir(target), here)
        if os.path.isdir(dot) and _is_git_dir(dot):
            return Repo(dot, _common_dir(dot), here)
        if _is_git_dir(here):
            return Repo(here, _common_dir(here), None)
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


@dataclass
class _Argv:
    cwd: str
    git_dir: str | None = None
    work_tree: str | None = None
    subcommand: str | None = None
    rest: tuple[str, ...] = ()
    config: tuple[str, ...] = ()  # `-c key=value` pairs, as given
    problems: tuple[str, ...] = ()


def parse_argv(argv: Sequence[str], cwd: str) -> _Argv:
    """git's global options, applied as git applies them (`-C` cumulative, `--git-dir`, `-c`)."""
    out = _Argv(cwd=cwd)
    problems: list[str] = []
    config: list[str] = []
    i = 1
    while i < len(argv):
        word = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if not word.startswith("-"):
            out.subcommand, out.rest = word, tuple(argv[i + 1 :])
            break
        if word == "-C" and nxt is not None:
            # `..` after a link goes where the kernel goes, not where the text points
            out.cwd = os.path.realpath(os.path.join(out.cwd, nxt)) if nxt else out.cwd
            i += 2
            continue
        if word == "-c" and nxt is not None:
            config.append(nxt)
            i += 2
            continue
        if word in ("--git-dir", "--work-tree") and nxt is not None:
            word, i = f"{word}={nxt}", i + 1
        if word.startswith("--git-dir="):
            out.git_dir = os.path.realpath(os.path.join(out.cwd, word.split("=", 1)[1]))
        elif word.startswith("--work-tree="):
            out.work_tree = os.path.realpath(os.path.join(out.cwd, word.split("=", 1)[1]))
        elif word.startswith("--exec-path="):
            problems.append(f"{word}: git would run its subcommands from that directory")
        elif word.startswith("--config-env"):
            problems.append(f"{word}: config taken from the environment is not vetted")
        elif word.startswith("--namespace=") or word.startswith("--list-cmds="):
            pass
        elif word not in _GLOBAL_FLAGS:
            problems.append(f"{word}: a git option exechost does not vet")
        i += 1
    out.config, out.problems = tuple(config), tuple(problems)
    return out


def key_problem(key: str, value: str | None) -> str | None:
    """Why `key` (as `git config --list` prints it) is not inert; None when it is."""
    section, _, rest = key.partition(".")
    section = section.lower()
    sub, _, name = rest.rpartition(".")
    name = name.lower()
    if not sub:
        return None if f"{section}.{name}" in INERT_KEYS else "not a key known to be inert"
    if name not in INERT_SUBSECTION_KEYS.get(section, frozenset()):
        return "not a key known to be inert"
    if (section, name) in URL_KEYS and value is not None:
        return url_problem(value)
    return None


def _safe_env() -> dict[str, str]:
    # No system, global or repository config and no includes: `git config --file` then only parses.
    return {
        "PATH": "/usr/bin:/bin",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/nonexistent",
        "GIT_DIR": "/nonexistent",
        "LC_ALL": "C",
    }


Pairs = list[tuple[str, str | None]]
# (git's stamp, the config bytes) -> what that git parsed from those bytes. A pure function of its key, so
# nothing ever invalidates it: a rewritten file is different bytes. Spawning git costs milliseconds per
# file and a git decision reads several; reading and hashing a config costs microseconds.
_PARSED: dict[tuple[tuple[int, ...], bytes], Pairs | str] = {}
_PARSED_MAX = 256


@dataclass
class Record:
    """What one vetting read, for the run to be pinned to: every config file's bytes (as parsed), and the
    repository each git command was vetted against (None: none was found)."""

    data: dict[str, bytes] = field(default_factory=dict)
    repos: list[tuple[Sequence[str], Repo | None]] = field(default_factory=list)
    nested: list[Repo] = field(default_factory=list)  # submodules with their own .git, vetted too
    # Common config paths whose bytes turn on extensions.worktreeConfig (git then reads config.worktree).
    worktree_config: set[str] = field(default_factory=set)
    # Env the run is given so it does only what was decided (engine.commands.pinned applies the non-empty
    # values; an empty one holds a key off for the whole command): pip's re-run guard (pipconfig).
    env: dict[str, str] = field(default_factory=dict)


def read_config(git: str, path: str, record: Record | None = None) -> Pairs | str:
    """Every key and value in one config file, parsed by git itself without following includes or
    running anything; a problem text when git cannot parse it (git would then refuse to run as well).

    The bytes are read here and handed to git on stdin, so what was parsed is exactly what was read,
    and the answer is kept per (git binary, bytes)."""
    data = _read_bytes(path)
    if isinstance(data, str):
        return data
    if record is not None:
        record.data[path] = data
    parser = parser_git(git)
    if parser is None:
        return NO_PARSER
    git = parser
    try:
        info = os.stat(git)
    except OSError as exc:
        return f"could not be read: {exc}"
    key = (
        (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns),
        hashlib.sha256(data).digest(),
    )
    answer = _PARSED.get(key)
    if answer is None:
        answer, ran = _parse(git, data)
        if not ran:
            return answer  # git did not run (a timeout on a loaded machine): ask now, try again next time
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = answer
    if isinstance(answer, str):
        return answer.replace("standard input", f"file {path}")  # git's own words name where it read
    return list(answer)


NO_PARSER = "could not be read: no git only root can change is installed to parse it (/usr/bin/git)"
_SYSTEM_GITS = ("/usr/bin/git", "/bin/git", "/usr/local/bin/git")


def parser_git(git: str) -> str | None:
    """The git that parses a config at decision time: the command's own (so the parse is the one that
    will run) only when nobody but root can change it or any directory above it; else the system's.
    Vetting runs it before any ask, so it must never be a program the agent could have written
    (`./git status` would otherwise run the agent's `./git` in the gateway while deciding)."""
    if root_only(git):
        return git
    return next((g for g in _SYSTEM_GITS if root_only(g)), None)


def root_only(path: str) -> bool:
    """Whether only root can change `path` (resolved) and every directory above it."""
    return only_root_changes(os.path.realpath(path))


def _read_bytes(path: str) -> bytes | str:
    """The whole file, as git would read it (following links); a problem text for anything but a regular
    file of at most CONFIG_READ_CAP bytes (a FIFO or a device planted as a config must not hang vetting)."""
    try:
        return read_regular(path, CONFIG_READ_CAP)
    except Unreadable as exc:
        return f"could not be read: {exc.reason}" if exc.errno else exc.reason


def _parse(git: str, data: bytes) -> tuple[Pairs | str, bool]:
    """What git parses from `data`, and whether git ran at all."""
    try:
        done = subprocess.run(
            [git, "config", "--file", "-", "--no-includes", "-z", "--list"],
            input=data,
            env=_safe_env(),
            cwd="/",
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not be read: {exc}", False
    if done.returncode != 0:
        return "could not be parsed: " + done.stderr.decode("utf-8", "replace").strip()[:200], True
    pairs: Pairs = []
    for item in done.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if not item:
            continue
        key, nl, value = item.partition("\n")
        pairs.append((key, value if nl else None))
    return pairs, True


def _config_files(repo: Repo) -> Iterator[str]:
    yield os.path.join(repo.common_dir, "config")
    yield os.path.join(repo.git_dir, "config.worktree")  # read when extensions.worktreeConfig is set
    modules = os.path.join(repo.common_dir, "modules")
    for root, dirs, files in os.walk(modules):  # absorbed submodules: status and checkout recurse
        dirs.sort()
        if "config" in files and root.count(os.sep) - modules.count(os.sep) <= 2 * MAX_SUBMODULE_DEPTH:
            yield os.path.join(root, "config")


def _submodule_repos(
    git: str, work_tree: str, record: Record | None, repo: Repo, hash_size: int
) -> Iterator[Repo | str]:
    """Submodules with their own `.git` in the work tree (absorbed ones live under modules/, vetted with
    their superproject): git recurses into them too. Git enters every gitlink of the index, named in
    .gitmodules or not (status, diff), so those are read from the index itself; .gitmodules paths too."""
    paths: list[str] = []
    index = os.path.join(repo.git_dir, "index")
    try:
        paths += gitlinks(index, hash_size)
    except UnreadableIndex as exc:
        yield f"{index} {exc}: exechost cannot tell which submodules git would enter"
        return
    gitmodules = os.path.join(work_tree, ".gitmodules")
    if os.path.isfile(gitmodules):
        pairs = read_config(git, gitmodules, record)
        if isinstance(pairs, str):
            yield f"{gitmodules} {pairs}"
            return
        paths += [value for key, value in pairs if key.endswith(".path") and value]
    for value in dict.fromkeys(paths):
        sub = os.path.realpath(os.path.join(work_tree, value))
        dot = os.path.join(sub, ".git")
        try:
            if os.path.isdir(dot) and _is_git_dir(dot):
                yield Repo(dot, _common_dir(dot), sub)
            elif os.path.isfile(dot):
                target = _read_gitfile(dot)
                yield (
                    f"{dot} is not a gitdir file git can follow"
                    if target is None
                    else Repo(target, _common_dir(target), sub)
                )
        except Unreadable as exc:
            yield _not_a_file(exc)


def vet(git: str, argv: Sequence[str], cwd: str, record: Record | None = None) -> list[Finding]:
    """Everything git, run as `argv` in `cwd`, would take from a repository's config or its own
    arguments that could run a program; empty when every key it would read is inert. `record` keeps the
    bytes read and the repository found, for the run to be pinned to exactly those."""
    found: list[Finding] = []
    args = parse_argv(argv, cwd)
    found += [Finding("git", "the command line", p) for p in args.problems]
    for pair in args.config:
        given, eq, text = pair.partition("=")
        problem = key_problem(given, text if eq else None)
        if problem:
            found.append(Finding("git", "the command line", f"-c {given} ({problem})"))
    found += _argv_programs(args)
    located: Repo | str | None
    if args.git_dir is not None:
        try:
            if not _is_git_dir(args.git_dir):
                return [*found, Finding("git", args.git_dir, "a --git-dir exechost cannot vet")]
            located = Repo(args.git_dir, _common_dir(args.git_dir), args.work_tree or args.cwd)
        except Unreadable as exc:
            located = _not_a_file(exc)
    else:
        located = discover(args.cwd)
    queue: list[tuple[Repo | str, str | None]] = [] if located is None else [(located, args.work_tree)]
    top = located if isinstance(located, Repo) else None
    own: Pairs = []  # the top repository's own config: the remotes a push may name
    seen: set[str] = set()
    while queue and len(seen) < MAX_CONFIG_FILES:
        repo, tree = queue.pop(0)
        if isinstance(repo, str):
            found.append(Finding("git", cwd, repo))
            continue
        hash_size = 20
        for path in _config_files(repo):
            real = os.path.realpath(path)
            if real in seen or not os.path.lexists(path):
                continue
            if len(seen) >= MAX_CONFIG_FILES:
                queue.append((repo, tree))  # reported below: more than exechost vets
                break
            seen.add(real)
            pairs = read_config(git, path, record)
            if isinstance(pairs, str):
                found.append(Finding("git", path, f"config that {pairs}"))
                continue
            if repo is located and _owns(repo, path):
                own += pairs
            for key, value in pairs:
                problem = key_problem(key, value)
                if key.lower() == "extensions.objectformat" and _owns(repo, path):
                    hash_size = 32 if (value or "").lower() == "sha256" else 20
                if key.lower() == "extensions.worktreeconfig" and record is not None:
                    if path == os.path.join(repo.common_dir, "config") and git_bool(value):
                        record.worktree_config.add(path)
                    else:
                        record.worktree_config.discard(path)  # the last value is the one git takes
                if problem:
                    found.append(Finding("git", path, f"{key} ({problem})"))
                elif key.lower() == "core.worktree" and value and tree is None and _owns(repo, path):
                    tree = os.path.realpath(os.path.join(repo.git_dir, value))
        tree = tree or repo.work_tree
        if record is not None:
            if repo is top:
                top = Repo(repo.git_dir, repo.common_dir, tree)
            else:
                record.nested.append(repo)
        if tree is not None:  # submodules: status, diff and checkout recurse into them
            queue.extend((sub, None) for sub in _submodule_repos(git, tree, record, repo, hash_size))
    if queue:
        found.append(Finding("git", cwd, "more nested repositories than exechost vets"))
    found += _legacy_remotes(args, top)
    found += _local_destinations(git, args, own, top)
    if record is not None:
        record.repos.append((tuple(argv), top))
    return found


def git_bool(value: str | None) -> bool:
    """git's boolean: a key with no `=` is true; yes/on/true and a non-zero number are true."""
    if value is None:
        return True
    text = value.strip().lower()
    if text in ("true", "yes", "on"):
        return True
    try:
        return int(text, 0) != 0
    except ValueError:
        return False


def _owns(repo: Repo, path: str) -> bool:
    """The repository's own config file (not an absorbed submodule's under modules/)."""
    return os.path.dirname(path) in (repo.common_dir, repo.git_dir)


def vet_config_file(git: str, path: str) -> list[Finding]:
    pairs = read_config(git, path)
    if isinstance(pairs, str):
        return [Finding("git", path, f"config that {pairs}")]
    out: list[Finding] = []
    for key, value in pairs:
        problem = key_problem(key, value)
        if problem:
            out.append(Finding("git", path, f"{key} ({problem})"))
    return out


def _global_pairs(git: str) -> Pairs:
    """The operator's global and system config (trusted, but it may name a local remote or rewrite a URL
    into one): its remotes and url.*.insteadOf keys count for where a push goes."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    out: Pairs = []
    for path in ("/etc/gitconfig", os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")):
        if os.path.isfile(path):
            pairs = read_config(git, path)
            out += pairs if not isinstance(pairs, str) else []
    return out


def _argv_programs(args: _Argv) -> list[Finding]:
    return [
        Finding("git", "the command line", what) for what in gitargv.argv_programs(args.subcommand, args.rest)
    ]


LEGACY_REMOTES = (
    "remotes defined the legacy way (files of .git/remotes/ or .git/branches/), which exechost does not "
    "read: where they point is unvetted"
)


def _legacy_remotes(args: _Argv, top: Repo | str | None) -> list[Finding]:
    """git still reads a remote from `remotes/<name>` and `branches/<name>` of the common dir (a push to a
    local repository there runs its hooks): a command that names remotes asks while any such file exists
    (and the pinned view links neither directory, so one made after this read is not seen by git)."""
    if args.subcommand not in gitopts.REMOTE_SUBCOMMANDS or not isinstance(top, Repo):
        return []
    out = []
    for name in ("remotes", "branches"):
        where = os.path.join(top.common_dir, name)
        try:
            if os.listdir(where):
                out.append(Finding("git", where, LEGACY_REMOTES))
        except OSError:
            if os.path.lexists(where):  # a file or a link there: not a directory exechost can list
                out.append(Finding("git", where, LEGACY_REMOTES))
    return out


def _local_destinations(git: str, args: _Argv, own: Pairs, top: Repo | str | None) -> list[Finding]:
    """Every local repository this push would start receive-pack in (gitargv.RECEIVE_PACK_TREE), with
    the remotes and URL rewrites of the operator's config, the repository's own and the command line. A
    relative URL is taken from the cwd and from the top of the work tree (git chdirs there first)."""
    if args.subcommand not in gitargv.RECEIVE_PACK:
        return []
    pairs = [*_global_pairs(git), *own, *((c.partition("=")[0], c.partition("=")[2]) for c in args.config)]
    bases = [args.cwd]
    if isinstance(top, Repo):
        bases += [b for b in (top.work_tree, top.git_dir) if b]
    where: list[str] = []
    for base in dict.fromkeys(bases):
        where += gitargv.local_destinations(args.rest, base, pairs)
    return [Finding("git", path, RECEIVE_PACK_TREE) for path in dict.fromkeys(where)]
