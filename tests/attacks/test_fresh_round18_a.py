"""Fresh round 18 a: a hostile agent's commands from inside its runs (gateway host, bwrap, Docker)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.attacks.harness import attempt

# The agent's command runs unasked (security = "full"): what its run can reach is the view's business.
FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
PY = "/usr/bin/python3"


@pytest.mark.xfail(
    strict=True,
    reason="open (the limit docs/SECURITY.md states for a root gateway: its runs keep root's capabilities): "
    "CAP_SYS_ADMIN and no `umount` refusal let a root gateway's host run detach the empty tmpfs over the "
    "state dir (`umount -l <state>`) and read the gateway's own files (its config, its socket, any token "
    "in it); round 17's construction dropped CAP_SETFCAP and CAP_MKNOD only. Closing the class: a short "
    "list of the capabilities a root run keeps (CAP_SYS_ADMIN not among them), not a list dropped",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
async def test_class1_a_root_host_run_unmounts_the_state_dirs_cover(state_dir: Path) -> None:
    (state_dir / "operator-token").write_text("TOKEN-OF-THE-OPERATOR\n")
    os.chmod(state_dir / "operator-token", 0o600)
    script = f"umount -l {state_dir} 2>/dev/null; cat {state_dir}/operator-token 2>/dev/null; echo done"
    details = await attempt(state_dir, script, config=FULL)
    assert details["status"] == "completed", details
    assert "TOKEN-OF-THE-OPERATOR" not in details["_text"]


_MACHINE_WIDE = {
    # sethostname to the name the host already has: no change, but the call succeeds only with
    # CAP_SYS_ADMIN over the UTS namespace the run shares with the host (the run's own readlink says so)
    "hostname": (
        "import ctypes,socket,os\n"
        "c=ctypes.CDLL(None,use_errno=True)\n"
        "n=socket.gethostname().encode()\n"
        "r=c.sethostname(n,len(n))\n"
        "print(os.readlink('/proc/self/ns/uts'), 'REACHED' if r==0 else 'SAFE', ctypes.get_errno())\n"
    ),
    # settimeofday(NULL, NULL) changes nothing but is refused without CAP_SYS_TIME (security_settime64):
    # with it, the same call with a time sets the host's clock (grants' expiry, TLS, every log)
    "clock": (
        "import ctypes\n"
        "c=ctypes.CDLL(None,use_errno=True)\n"
        "r=c.settimeofday(None,None)\n"
        "print('REACHED' if r==0 else 'SAFE', ctypes.get_errno())\n"
    ),
}


@pytest.mark.xfail(
    strict=True,
    reason="open: a root gateway's host run is in the host's UTS namespace (enter unshares mount, PID and "
    "IPC only) with CAP_SYS_ADMIN and CAP_SYS_TIME, and its seccomp filter refuses neither sethostname nor "
    "settimeofday/clock_settime (Docker's profile refuses the clock's): an agent's run renames the "
    "machine or sets its clock (grants' expiry, TLS, every log's times). "
    "Closing the class: a UTS namespace of its own, and the capabilities a root run keeps listed",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="a root gateway's host run")
@pytest.mark.skipif(not os.path.exists(PY), reason="the probe runs /usr/bin/python3")
@pytest.mark.parametrize("what", sorted(_MACHINE_WIDE))
async def test_class1_a_root_host_run_acts_on_the_whole_machine(state_dir: Path, what: str) -> None:
    probe = state_dir.parent / "probe.py"
    probe.write_text(_MACHINE_WIDE[what])
    details = await attempt(state_dir, f"{PY} {probe}", config=FULL)
    assert details["status"] == "completed", details
    assert "SAFE" in details["_text"], details["_text"]
