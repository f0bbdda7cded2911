"""The in-sandbox half of egress: a static helper (forward.c) in the read-only bin mount, built once.

Neither the busybox image nor a bwrap system view is sure to hold a Python or socat, and a sandbox has no
network to fetch one: the helper is C, linked statically (it runs in any image of this architecture), and
built here from the source shipped beside this module, kept in the bin dir under its source's digest.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from pathlib import Path

from engine import statefs, sysbin
from engine.errors import ExecHostError
from engine.sandbox import staticbuild
from engine.sandbox import supervisor as sv

SOURCE = Path(__file__).with_name("forward.c")
NAME = "egress-forward"
PORT = 3128  # inside the sandbox: 127.0.0.1:3128, as Claude Code's sandbox uses
MOUNT = "/.exechost-egress"  # the sandbox's view of its egress dir (holds the proxy's socket)
SOCKET_NAME = "proxy.sock"
DIR_NAME = "egress"


class ForwarderUnavailable(ExecHostError):
    """The forwarder cannot be built here (no compiler): egress cannot be offered."""

    code = "tool_error"


def socket_dir(sandbox: str) -> Path:
    """The host dir holding a sandbox's proxy socket, bind-mounted read-only at MOUNT: short (a hash of the
    name) because the socket's path must fit sun_path."""
    return statefs.state_dir() / DIR_NAME / hashlib.sha256(sandbox.encode()).hexdigest()[:16]


def remove_dir(sandbox: str) -> None:
    """The sandbox is gone: its socket and dir go (a dir never made is fine)."""
    target = socket_dir(sandbox)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        os.unlink(target / SOCKET_NAME)
    with contextlib.suppress(OSError):
        os.rmdir(target)


def prepare_dir(sandbox: str) -> Path:
    """Make the sandbox's socket dir (0711: the socket's own mode says who may use it)."""
    base = statefs.state_dir() / DIR_NAME
    statefs.ensure_private_dir(base)
    target = socket_dir(sandbox)
    statefs.refuse_symlink(target)
    target.mkdir(mode=0o711, exist_ok=True)
    os.chmod(target, 0o711)  # noqa: S103 - traversal only; the socket is 0600 for the sandbox's uid
    return target


@functools.cache
def source_digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def binary_path() -> Path:
    return sv.bin_dir() / NAME


def ensure_binary() -> Path:
    """The helper in the bin dir, built from forward.c when missing or from other source (blocking)."""
    target = binary_path()
    stamp = sv.bin_dir() / f"{NAME}.sha"
    sv.ensure_bin_dir()
    if staticbuild.current(target, stamp, source_digest()):
        return target
    compiler = sysbin.which("cc") or sysbin.which("gcc")
    if compiler is None:
        raise ForwarderUnavailable(
            "Sandbox egress needs a C compiler once, to build its static forwarder (apt-get install gcc "
            'libc6-dev), or set [agents.defaults.sandbox.egress] mode = "none".'
        )
    problem = staticbuild.build(compiler, SOURCE, target, stamp, source_digest())
    if problem is not None:
        raise ForwarderUnavailable(f"could not build the egress forwarder: {problem}")
    return target


def wrap(command: list[str]) -> list[str]:
    """`command` (the sandbox's supervisor) started by the forwarder, which keeps the loopback listener."""
    return [f"{sv.BIN_MOUNT}/{NAME}", str(PORT), f"{MOUNT}/{SOCKET_NAME}", "--", *command]


PROXY_URL = f"http://127.0.0.1:{PORT}"
# Inside, every client finds the proxy: curl reads lowercase http_proxy, others either case; npm and pip
# read these too. No DNS inside, so names must reach the proxy: nothing but loopback is exempt.
PROXY_ENV = {
    "http_proxy": PROXY_URL,
    "https_proxy": PROXY_URL,
    "HTTP_PROXY": PROXY_URL,
    "HTTPS_PROXY": PROXY_URL,
    "ALL_PROXY": PROXY_URL,
    "all_proxy": PROXY_URL,
    "no_proxy": "localhost,127.0.0.1,::1",
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "npm_config_proxy": PROXY_URL,
    "npm_config_https_proxy": PROXY_URL,
    "PIP_PROXY": PROXY_URL,
    "NODE_USE_ENV_PROXY": "1",
}
