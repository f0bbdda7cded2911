"""The files an `Include` line of the operator's ssh config makes asyncssh read, found with asyncssh's
own primitives (round 10 d): its line split (`shlex.split` of the whole line, no comments, `key=value`
and `"Include"` as it reads them) and its glob (pathlib's, which takes dotfiles and recurses at `**`),
never a regex and glob.glob standing in for them. Every Include is followed, in any Host or Match block:
the gateway connects to every node, so what any of them would read counts."""

from __future__ import annotations

import shlex
from pathlib import Path


def include_words(line: str) -> list[str]:
    """The patterns an Include line names, split as asyncssh.config.SSHConfig.parse splits a line."""
    line = line.strip()
    if not line or line[0] == "#":
        return []
    try:
        split = shlex.split(line)
    except ValueError:
        return []
    args: list[str] = []
    option = ""
    for i, arg in enumerate(split, 1):
        if arg.startswith("="):
            if len(arg) > 1:
                args.append(arg[1:])
        elif i > 1 and option != "":
            args.extend(split[i - 1 :])  # Include is no conditional: no more `=` splitting past the key
            break
        elif arg.endswith("="):
            args.append(arg[:-1])
        elif "=" in arg:
            key, value = arg.split("=", 1)
            args += [key, value]
        else:
            args.append(arg)
        if i == 1:
            option = args.pop(0).lower() if args else ""
            if option != "include":
                return []
    return args if option == "include" else []


def globbed(pattern: str) -> list[str]:
    """The files `pattern` (absolute) matches, as asyncssh's _include finds them (Path.glob)."""
    path = Path(pattern)
    try:
        found = [str(p) for p in Path(path.anchor).glob(str(Path(*path.parts[1:]))) if p.is_file()]
    except (OSError, ValueError):
        return []
    return sorted(found)
