"""A bwrap sandbox's runtime record (its keeper's pid and start time): how a later gateway finds what runs."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from engine import statefs

RUNTIME_DIR = "sandbox-bwrap"


def runtime_dir() -> Path:
    return statefs.state_dir() / RUNTIME_DIR


def record_path(name: str) -> Path:
    return runtime_dir() / f"{name}.json"


def log_path(name: str) -> Path:
    return runtime_dir() / f"{name}.log"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (/proc/<pid>/stat field 22): a pid plus this names one
    process, never a later one that got the number again."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if fields[:1] in ([b"Z"], [b"X"]):
        return None  # ended, not yet reaped: gone as far as its sandbox is concerned
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def write_record(name: str, record: dict[str, Any]) -> None:
    """Temp file and rename, without fsync: a record outlives nothing its processes do not (a reboot ends
    both), and the cold path is milliseconds."""
    path = record_path(name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a writer's own
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(record))
    os.replace(tmp, path)


def read_record(name: str) -> dict[str, Any] | None:
    try:
        text = statefs.read_text(record_path(name))
        data = json.loads(text) if text else None
    except (OSError, ValueError, statefs.StateFileError):
        return None
    return data if isinstance(data, dict) else None


def alive(record: dict[str, Any]) -> bool:
    pid, start = record.get("pid"), record.get("start")
    return isinstance(pid, int) and pid > 0 and start is not None and start_time(pid) == start


def children(pid: int, *, grandchildren: bool = False) -> list[int]:
    """pid's children (or their children) by /proc/<pid>/task/*/children."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found.extend(int(x) for x in fh.read().split())
    except (OSError, ValueError):
        return []
    if grandchildren:
        return [g for child in found for g in children(child)]
    return found


def list_sandboxes() -> list[dict[str, Any]]:
    """This install's bwrap sandboxes (their records), each with `running`."""
    try:
        names = sorted(p.name[:-5] for p in runtime_dir().glob("*.json"))
    except OSError:
        return []
    rows = []
    for name in names:
        record = read_record(name)
        if record is not None:
            rows.append({**record, "name": name, "running": alive(record)})
    return rows
