"""exechost-hostenter `ro-cgroups` (hostView = "none" runs, engine.tools.exec_host.capped): the run's own
mount namespace has every cgroup hierarchy read-only, so a run without the view cannot leave its pids group,
join another agent's or lift a cap; not as root, the read-only flag is locked (it cannot remount)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.commands import hostkeeper

pytestmark = [
    pytest.mark.skipif(hostkeeper.helper_path() is None, reason="exechost-hostenter is not built (setup.sh)"),
    pytest.mark.skipif(not Path("/sys/fs/cgroup").is_dir(), reason="no cgroup hierarchies here"),
]

PROBE = (
    'grep " /sys/fs/cgroup" /proc/self/mountinfo | cut -d" " -f5,6; '
    "for f in /sys/fs/cgroup/pids/tasks /sys/fs/cgroup/memory/tasks; do "
    '[ -e $f ] && { (echo $$ > $f) 2>/dev/null && echo "wrote $f"; }; done; '
    "mkdir /sys/fs/cgroup/pids/exechost-probe 2>/dev/null && echo made-a-group; echo END"
)


def _helper() -> str:
    return str(hostkeeper.helper_path())


def test_every_cgroup_mount_is_read_only_and_nothing_is_written() -> None:
    done = subprocess.run(
        [_helper(), "ro-cgroups", "--", "sh", "-c", PROBE], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "END" and lines[:-1], done.stdout  # at least /sys/fs/cgroup itself
    assert all(line.split()[1].split(",")[0] == "ro" for line in lines[:-1]), lines
    # the host's mounts are untouched (only the run's own namespace)
    host = [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if " /sys/fs/cgroup" in line
    ]
    assert any(line.split()[5].startswith("rw") for line in host) or not host


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="runs the helper as nobody")
def test_not_as_root_the_read_only_flag_cannot_be_cleared(tmp_path: Path) -> None:
    helper = tmp_path / "hostenter"
    helper.write_bytes(Path(_helper()).read_bytes())
    helper.chmod(0o755)
    tmp_path.chmod(0o755)
    remount = (
        "python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
        # MS_REMOUNT | MS_BIND (no MS_RDONLY): make it writable again, in the run's own user namespace
        'r = libc.mount(None, b"/sys/fs/cgroup", None, 32 | 4096, None); '
        'print("remount", r, ctypes.get_errno())\''
    )
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    done = subprocess.run(
        [*as_nobody, str(helper), "ro-cgroups", "--", "sh", "-c", f"{remount}; {PROBE}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.startswith("remount -1 "), first  # EPERM: locked read-only
    assert rest[-1] == "END" and all(line.split()[1].startswith("ro") for line in rest[:-1]), rest
