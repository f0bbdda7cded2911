"""Programs known to take no code from their argv: the only ones whose bare path "allow always" may save.

Every other program gets the exact command saved (`=command:<sha256>`, bound to its cwd, env and
scripts): a later argv of it asks again. This is the inverse of interpreters.RUNNERS, a list of programs
known to run code, which missed every build tool and package manager nobody had listed (mvn, corepack, uv,
poetry, gradle: `mvn --version` allowed always let every later mvn argv run unasked, issue 27 §3).

A program is here only when nothing in its argv makes it run, load or evaluate code: it reads the files
its argv names as data and writes what its argv says (what it may write is the allowlist's business,
argPatterns). Programs with a program-running option (find -exec, sort --compress-program, split
--filter, rg --pre) are not, nor less (a shell escape when not LESSSECURE), nor anything not looked at.
"""

from __future__ import annotations

import os

from engine.commands.interpreters import name_of, runs_others
from engine.commands.wrappers import names

__all__ = ["ARGV_SAFE", "takes_no_code"]

ARGV_SAFE = names(
    "cat tac nl head tail wc cut paste join tr uniq fold fmt expand unexpand od base32 base64 basenc "
    "md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum sum comm shuf numfmt tsort pr "
    "csplit ls dir vdir stat du df pwd echo printf true false test [ expr seq sleep yes date basename "
    "dirname realpath readlink id whoami groups logname uname nproc printenv tty hostid "
    "cp mv rm rmdir mkdir touch ln chmod tee truncate mktemp "
    "grep egrep fgrep diff cmp xxd hexdump column rev tree"
)


def takes_no_code(path_or_name: str) -> bool:
    """Whether a program, by its name or the path it resolves to, is one on ARGV_SAFE."""
    base = os.path.basename(path_or_name)
    return (base in ARGV_SAFE or name_of(base) in ARGV_SAFE) and not runs_others(base)
