"""The sandbox's small C helpers (the egress forwarder, the landlock helper) are built once, statically, into
the bin dir the sandboxes mount: one way to build, stamp and install them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def build(compiler: str, source: Path, target: Path, stamp: Path, digest: str) -> str | None:
    """Build `source` into `target` (installed by rename: a running sandbox never sees half a file) and
    record `digest` in `stamp`; None when done, else the compiler's complaint."""
    with tempfile.TemporaryDirectory(prefix=f"exechost-{target.name}-") as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [compiler, "-static", "-Os", "-s", "-o", str(out), str(source)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            return done.stderr.strip()[-800:]
        temp = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copyfile(out, temp)
        os.chmod(temp, 0o755)  # noqa: S103 - executed by the sandbox's user, as the bin dir's busybox
        os.replace(temp, target)
    stamp.write_text(digest + "\n")
    os.chmod(stamp, 0o644)
    return None
