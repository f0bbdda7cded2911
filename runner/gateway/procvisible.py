"""Whether the host's /proc hides each account's processes from the others (`hidepid`): with agents on Unix
accounts of their own, a /proc that shows every process gives each agent the command lines of the others'
runs (fresh round 12 a), which no view of exechost's can take back; the gateway says so when it starts."""

from __future__ import annotations

HIDING = ("hidepid=1", "hidepid=2", "hidepid=noaccess", "hidepid=invisible", "hidepid=ptraceable")


def proc_options(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The super options of the /proc this process sees (None: not found)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4] == "/proc" and " - proc " in line:
                    return line.rsplit(" ", 1)[-1].strip()
    except OSError:
        return None
    return None


def hides_processes(mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether another account's processes are hidden from an account in this /proc."""
    options = proc_options(mountinfo)
    return options is not None and any(o in HIDING for o in options.split(","))


WARNING = (
    "agents on their own Unix accounts can read each other's running commands in /proc (it is mounted "
    "without hidepid): mount it with `hidepid=invisible` (docs/SECURITY.md, the strong setup, step 5)"
)
