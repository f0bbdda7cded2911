"""The gateway-host runs' seccomp rules (engine.sandbox.seccomprules' HOST_ part, its set-id modes and
socket families) and a root run's kept capabilities (engine.commands.rootcaps) encoded as the C header
exechost-hostenter is built with, so the helper's filter and the sandboxes' come from one definition.
`python -m engine.sandbox.seccomphost` writes it; a test fails when the header in the tree is not what this
writes (engine/commands/hostenter/rules.h)."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.commands import rootcaps
from engine.sandbox.seccomprules import (
    HOST_REFUSED_SYSCALLS,
    HOST_UNSUPPORTED_SYSCALLS,
    MODE_ARG,
    SET_ID_BITS,
    SOCKET_FAMILIES,
)

HEADER = Path(__file__).resolve().parents[1] / "commands" / "hostenter" / "rules.h"
# Calls a build host's <sys/syscall.h> may be too old to name: their numbers are one table for every
# architecture from 5.1 on (asm-generic), x86-64 and aarch64 alike.
GENERIC_NUMBERS = {"io_uring_setup": 425, "openat2": 437, "fchmodat2": 452}


def header() -> str:
    """The header's text: a table of {syscall, mode argument or -1, errno}, the set-id mask and the socket
    families; a call this architecture lacks (`open`, `chmod`, … on aarch64) is left out by the compiler."""
    lines = [
        "/* Generated from engine/sandbox/seccomprules.py by `python -m engine.sandbox.seccomphost`:",
        "   do not edit. The gateway-host runs' seccomp rules (confine.c builds the filter from them). */",
        "",
        "#ifndef EXECHOST_HOSTENTER_RULES_H",
        "#define EXECHOST_HOSTENTER_RULES_H",
        "",
    ]
    named = [*HOST_REFUSED_SYSCALLS, *HOST_UNSUPPORTED_SYSCALLS, *MODE_ARG]
    for name in named:
        if name in GENERIC_NUMBERS:
            lines += [f"#ifndef SYS_{name}", f"#define SYS_{name} {GENERIC_NUMBERS[name]}", "#endif"]
    mask = 0
    for bit in SET_ID_BITS:
        mask |= bit
    lines += [
        "",
        f"#define HOST_SET_ID_BITS 0{mask:o}",
        "",
        "/* nr, the argument holding a mode (-1: refused whatever its arguments), the errno it fails with */",
        "static const struct host_rule {",
        "    long nr;",
        "    int mode_arg;",
        "    int err;",
        "} HOST_RULES[] = {",
    ]
    rows = [(n, -1, "EPERM") for n in HOST_REFUSED_SYSCALLS]
    rows += [(n, -1, "ENOSYS") for n in HOST_UNSUPPORTED_SYSCALLS]
    rows += [(n, arg, "EPERM") for n, arg in MODE_ARG.items()]
    for name, arg, err in rows:
        lines += [f"#ifdef SYS_{name}", f"    {{SYS_{name}, {arg}, {err}}},", "#endif"]
    families = ", ".join(str(f) for f in SOCKET_FAMILIES)
    lines += [
        "};",
        "",
        "/* socket() opens only these families (a network namespace confines them), others EAFNOSUPPORT */",
        f"static const int HOST_SOCKET_FAMILIES[] = {{{families}}};",
        "",
        "/* the capabilities a root gateway's run keeps (engine/commands/rootcaps.py); every other goes */",
        "static const int HOST_ROOT_KEPT_CAPS[] = {" + ", ".join(name for name, _, _ in rootcaps.KEPT) + "};",
        "",
        "#endif",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    """Write the header (`--check`: exit 1 when the one in the tree differs)."""
    text = header()
    if "--check" in sys.argv[1:]:
        return 0 if HEADER.read_text() == text else 1
    HEADER.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
