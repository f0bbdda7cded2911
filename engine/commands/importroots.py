"""Where the gateway's own Python finds code, read from the running interpreter: every such place is
read-only in every host view, because the next gateway, the operator's CLI and console import from it
outside any view (fresh round 8 q: a fixed "two dirnames up" covered engine/ and missed runner/, console/
and the checkout root, first on sys.path)."""

from __future__ import annotations

import os
import site
import sys

# What import_paths found, by everything it read (sys.path, the cwd, the site dirs' listings and each .pth
# file's stat): the same inputs give the same answer, with no realpath walked again (ms on a loaded host,
# on every gateway-host run). A .pth file added, removed or edited, or sys.path changed, is a new key.
_FOUND: dict[tuple[object, ...], list[str]] = {}
_LISTED: dict[tuple[str, int], list[str]] = {}  # a site dir's .pth files by (dir, its mtime)


def _pth_files(sitedir: str) -> list[str]:
    try:
        mtime = os.stat(sitedir).st_mtime_ns
    except OSError:
        return []
    names = _LISTED.get((sitedir, mtime))
    if names is None:
        try:
            names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth"))
        except OSError:
            return []
        if len(_LISTED) > 64:
            _LISTED.clear()
        _LISTED[(sitedir, mtime)] = names
    return [os.path.join(sitedir, n) for n in names]


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _pth_dirs(pth_files: list[str]) -> list[str]:
    """The directories the .pth files add to sys.path, present or not: site skips a missing one at
    start, and imports from it once something makes it."""
    found: list[str] = []
    for pth in pth_files:
        try:
            with open(pth, "rb") as f:
                lines = f.read(1 << 16).decode(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.rstrip()
            if line and not line.startswith(("#", "import ", "import\t")):
                found.append(os.path.join(os.path.dirname(pth), line))
    return found


def import_paths(helper: str | None = None) -> list[str]:
    """Every path the gateway's interpreter imports or runs code from, resolved, present or not: each
    sys.path entry ('' is the cwd), the prefixes (the venv, its base, their libexec helpers), the
    interpreter's own file, the site dirs and what their .pth files add (the user site too when Python
    reads it), the directory above each of the gateway's packages (a checkout's root), and the helper."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.sep  # a cwd gone: '' then names nothing Python could import from
    site_dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        site_dirs.append(site.getusersitepackages())
    pth_files = [p for d in site_dirs for p in _pth_files(d)]
    packages = [
        os.path.dirname(os.path.abspath(p))
        for name in ("engine", "runner", "console")
        for p in getattr(sys.modules.get(name), "__path__", ())
    ]
    prefixes = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, sys.executable)
    key = (
        tuple(sys.path),
        cwd,
        helper,
        prefixes,
        tuple(site_dirs),
        tuple(packages),
        tuple(map(_stamp, pth_files)),
    )
    cached = _FOUND.get(key)
    if cached is not None:
        return list(cached)
    found = [p or cwd for p in sys.path if not p or os.path.isabs(p)]  # path hooks' words are no paths
    found += prefixes
    found += site_dirs + _pth_dirs(pth_files) + packages
    if helper is not None:
        found.append(helper)
    result = list(dict.fromkeys(os.path.realpath(p) for p in found))
    if len(_FOUND) > 64:
        _FOUND.clear()
    _FOUND[key] = result
    return list(result)


def outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside another of them (one read-only bind covers what is below it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count(os.sep), p)):
        if not any(path == k or path.startswith(k.rstrip(os.sep) + os.sep) for k in kept):
            kept.append(path)
    return kept
