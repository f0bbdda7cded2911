"""Whether the host's /proc hides each account's processes from the others (`hidepid`): with agents on Unix
accounts of their own, a /proc that shows every process gives each agent the command lines of the others'
programs (fresh round 12 a): exechost keeps its own argvs free of command text (engine.commands.offargv),
the programs a command runs have the argvs they give themselves; the gateway says so when it starts."""

from __future__ import annotations

from engine.config.model import Config

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
    "agents on their own Unix accounts can read the command lines of each other's running programs in /proc "
    "(it is mounted without hidepid): exechost puts no command text on the argvs it makes, but a command's "
    "programs show their own arguments (`curl -H 'Authorization: …'`); mount it with `hidepid=invisible` "
    "(docs/SECURITY.md, the strong setup, step 5)"
)


def warning(config: Config, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """WARNING when an agent is mapped to a Unix account of its own (`uid`/`user` in agents.list) and /proc
    shows every account's processes to the others; None otherwise. A warning, not a refusal: the host's
    /proc is the operator's to mount, and a gateway with it unmounted still keeps every other boundary."""
    mapped = any(agent.uid is not None for agent in config.agents.values())
    return WARNING if mapped and not hides_processes(mountinfo) else None
