"""The system-event spool: undelivered events on disk, so a gateway restart or crash loses none of them."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path

from engine import jsontext, ostext
from engine.principals import key_owner
from engine.statefs import StateFileError, atomic_write, refuse_symlink

log = logging.getLogger(__name__)

SPOOL_NAME = "events.json"
MAX_TEXT_CHARS = 4096  # an event is a notice (a header and ≤400 chars of output), never a log
MAX_KEYS = 512
MAX_BYTES = 512 * 1024  # the whole spool as written; beyond it the oldest events of the largest queues go
# Both caps are shared fairly: past one, what goes is the oldest of the owner (the agent a key names; an
# ownerless key is the operator's) that holds the most, so one agent writing many events never pushes
# another's undelivered events off the disk, where a crash would lose them.
VERSION = 1


class EventSpool:
    """`<state>/events.json` ({version, queues: {sessionKey: [text…]}}), rewritten atomically (temp file,
    fsync, rename) on every change, so a reader or a crash never sees half of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None

    def load(self) -> dict[str, list[str]]:
        """The queues left by the last gateway; an unreadable spool is reported and kept aside, never
        silently replaced (DESIGN §3)."""
        try:
            raw = _read(self.path)
        except (OSError, StateFileError, UnicodeDecodeError) as exc:
            self.problem = f"undelivered events not loaded from {self.path}: {exc}"
            log.error("%s", self.problem)
            return {}
        if raw is None:
            return {}
        try:
            return _parse(raw)
        except (ValueError, KeyError) as exc:
            aside = self.path.with_name(f"{self.path.name}.bad")
            self.path.replace(aside)
            self.problem = f"undelivered events in {self.path} unreadable ({exc}); kept as {aside}"
            log.error("%s", self.problem)
            return {}

    def peek(self) -> dict[str, list[str]]:
        """The queues as on disk, changing nothing (what `exechost events` shows with no gateway running);
        StateFileError when the file cannot be read or is not a spool."""
        try:
            raw = _read(self.path)
            return {} if raw is None else _parse(raw)
        except (OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
            raise StateFileError(f"undelivered events in {self.path} unreadable ({exc})") from None

    def save(self, queues: dict[str, list[str]]) -> None:
        """Write every queue (bounded); a failure is logged and kept in `problem`: delivery goes on."""
        kept = {k: [t[:MAX_TEXT_CHARS] for t in v] for k, v in queues.items() if v}
        if len(kept) > MAX_KEYS:  # the owner with the most keys loses its written-to-longest-ago ones
            by_owner: dict[str | None, list[str]] = {}
            for key in kept:
                by_owner.setdefault(key_owner(key), []).append(key)
            excess = len(kept) - MAX_KEYS
            for _ in range(excess):
                mine = max(by_owner.values(), key=len)
                del kept[mine.pop(0)]
        data = _encode(kept)
        if len(data) > MAX_BYTES:
            data = _trim(kept)
        try:
            atomic_write(self.path, data)
            self.problem = None
        except (OSError, StateFileError) as exc:
            self.problem = f"undelivered events not saved to {self.path}: {exc}"
            log.error("%s", self.problem)


def _parse(raw: str) -> dict[str, list[str]]:
    data = jsontext.loads(raw)
    queues = data["queues"] if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(queues, dict):
        raise ValueError("not an events spool")
    out: dict[str, list[str]] = {}
    for key, texts in list(queues.items())[:MAX_KEYS]:
        if isinstance(key, str) and key.strip() and isinstance(texts, list):
            out[ostext.shown(key)] = [ostext.shown(t)[:MAX_TEXT_CHARS] for t in texts if isinstance(t, str)]
    return out


def _trim(kept: dict[str, list[str]]) -> bytes:
    """Drop oldest events from `kept` until it encodes within MAX_BYTES, each time from the largest queue
    of the owner holding the most; the encoding. Shares are measured in the cap's unit, each event's bytes
    as written (UTF-8, escapes and all): counted in characters, an agent's 4-byte ones held 4x the disk
    per "character" and another agent's ASCII events were trimmed in their place."""
    sizes = {key: [_size(t) for t in texts] for key, texts in kept.items()}
    data = _encode(kept)
    while len(data) > MAX_BYTES:
        held: Counter[str | None] = Counter()
        for key, each in sizes.items():
            held[key_owner(key)] += sum(each)
        owner = max(held, key=lambda who: held[who])
        largest = max((k for k in kept if key_owner(k) == owner), key=lambda k: sum(sizes[k]))
        cut = max(1, len(kept[largest]) // 4)
        del kept[largest][:cut], sizes[largest][:cut]
        if not kept[largest]:
            del kept[largest], sizes[largest]
        data = _encode(kept)
    return data


def _size(text: str) -> int:
    """An event's bytes in the spool: its JSON string as written (UTF-8, escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _encode(queues: dict[str, list[str]]) -> bytes:
    """UTF-8 only: SystemEvents.enqueue shows every text (engine.ostext); anything else is shown here."""
    text = json.dumps({"version": VERSION, "queues": queues}, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(
            {"version": VERSION, "queues": ostext.shown_json(queues)}, ensure_ascii=False
        ).encode()


def _read(path: Path) -> str | None:
    """The spool's text; surrogatepass reads back what an older gateway wrote of a lone surrogate (its
    three bytes, which a strict read refused, losing every queue), shown by _parse."""
    refuse_symlink(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode("utf-8", "surrogatepass")
