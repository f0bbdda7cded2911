"""Where the gateway's own Python finds code, read from the running interpreter: every such place is
read-only in every host view, because the next gateway, the operator's CLI and console import from it
outside any view (fresh round 8 q: a fixed "two dirnames up" covered engine/ and missed runner/, console/
and the checkout root, first on sys.path)."""

from __future__ import annotations

import os
import site
import sys


def _pth_dirs(site_dirs: list[str]) -> list[str]:
    """The directories the .pth files of `site_dirs` add to sys.path, present or not: site skips a
    missing one at start, and imports from it once something makes it."""
    found: list[str] = []
    for sitedir in site_dirs:
        try:
            names = sorted(n for n in os.listdir(sitedir) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(sitedir, name), "rb") as f:
                    lines = f.read(1 << 16).decode(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.rstrip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    found.append(os.path.join(sitedir, line))
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
    found = [p or cwd for p in sys.path if not p or os.path.isabs(p)]  # path hooks' words are no paths
    found += [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, sys.executable]
    site_dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        site_dirs.append(site.getusersitepackages())
    found += site_dirs + _pth_dirs(site_dirs)
    for name in ("engine", "runner", "console"):
        module = sys.modules.get(name)
        found += [os.path.dirname(os.path.abspath(p)) for p in getattr(module, "__path__", ())]
    if helper is not None:
        found.append(helper)
    return list(dict.fromkeys(os.path.realpath(p) for p in found))


def outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside another of them (one read-only bind covers what is below it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (p.count(os.sep), p)):
        if not any(path == k or path.startswith(k.rstrip(os.sep) + os.sep) for k in kept):
            kept.append(path)
    return kept
