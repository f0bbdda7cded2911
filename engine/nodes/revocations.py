"""The revocations each node must still hear (`<state>/node-revocations.json`): a node down at a revoke is
told on its next link, by this gateway or the next one, so what a revoked agent left running there stops."""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import jsontext, statefs
from engine.nodes.wire import AgentRevoke
from engine.principals import valid_name

log = logging.getLogger("exechost.nodes")

FILE_NAME = "node-revocations.json"
# Revocations kept: past it the oldest goes (logged), so the file stays small whatever a node never answers.
MAX_KEPT = 512
# Revocations this process made that its file does not hold yet (a full disk, an unwritable state dir): the
# nodes are told from the file and from these alike, so a revoke reaches every connected node whatever the
# disk; the next write of the file that succeeds takes them in. Kept per file path: every Revocations of one
# state dir in this process (the revoke's, the gateway's delivery) sees the same ones.
_UNWRITTEN: dict[Path, list[Revocation]] = {}
_UNWRITTEN_LOCK = threading.Lock()


@dataclass
class Revocation:
    """One revoke of one agent, and the configured nodes that answered it."""

    wire: AgentRevoke
    at_ms: int
    acked: set[str] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {**self.wire.to_json(), "atMs": self.at_ms, "acked": sorted(self.acked)}

    @classmethod
    def from_json(cls, d: Any) -> Revocation | None:
        if not isinstance(d, dict):
            return None
        try:
            wire = AgentRevoke.from_json(d)
        except ValueError:
            return None
        acked = d.get("acked")
        names = {a for a in acked if isinstance(a, str)} if isinstance(acked, list) else set()
        at = d.get("atMs")
        return cls(wire, at if isinstance(at, int) else 0, names)


class Revocations:
    """Read and written whole under a file lock (the gateway and an offline `agents revoke` both add): a
    revoke and a link-up are rare, and the file is small. Blocking: call from a thread on the loop."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME

    def _held(self) -> list[Revocation]:
        with _UNWRITTEN_LOCK:
            return list(_UNWRITTEN.get(self.path, ()))

    def _load(self) -> list[Revocation]:
        """The file's revocations, then those this process could not write to it yet."""
        rows = self._load_file()
        ids = {r.wire.revocation for r in rows}
        return [*rows, *(r for r in self._held() if r.wire.revocation not in ids)]

    def _load_file(self) -> list[Revocation]:
        try:
            text = statefs.read_text(self.path)
            data = jsontext.loads(text) if text else {}
        except (OSError, ValueError, statefs.StateFileError) as exc:
            log.warning("%s unreadable (%s): started over", self.path, exc)
            data = {}
        rows = data.get("revocations") if isinstance(data, dict) else None
        found = [Revocation.from_json(r) for r in rows] if isinstance(rows, list) else []
        return [r for r in found if r is not None]

    def _save(self, rows: list[Revocation]) -> None:
        if len(rows) > MAX_KEPT:
            for gone in rows[: len(rows) - MAX_KEPT]:
                log.warning("node revocation of %s dropped unanswered by some node", gone.wire.agent)
            rows = rows[-MAX_KEPT:]
        body = json.dumps({"revocations": [r.to_json() for r in rows]}, indent=1)
        statefs.atomic_write(self.path, body)
        with _UNWRITTEN_LOCK:
            _UNWRITTEN.pop(self.path, None)  # the file holds every one now

    def add(
        self, agent: str, credential_stamp: str, rotated: bool = False, *, durable: bool = False
    ) -> Revocation:
        """A revoke (or a rotation: `rotated`) every node must hear: kept until each configured node
        answered it. `durable` (a process that ends before any node hears it: the offline CLI): written
        or OSError, never kept only in this process (fresh round 18 c)."""
        if not valid_name(agent):
            raise ValueError(f"invalid agent {agent!r}")
        made = Revocation(
            AgentRevoke(agent, secrets.token_hex(16), credential_stamp, rotated), int(time.time() * 1000)
        )
        with _UNWRITTEN_LOCK:
            _UNWRITTEN.setdefault(self.path, []).append(made)  # owed from now, whatever the disk says
        try:
            with statefs.file_lock(self.path):
                self._save(self._load())
        except (OSError, statefs.StateFileError) as exc:
            if durable:
                with _UNWRITTEN_LOCK:
                    held = _UNWRITTEN.get(self.path, [])
                    held[:] = [r for r in held if r is not made]
                raise OSError(
                    f"{self.path}: the revocation of {agent} owed to the nodes could not be written ({exc}; "
                    "is the state dir's disk full?)"
                ) from exc
            log.warning(
                "%s could not be written (%s): the revocation of %s is kept in this process, and the nodes "
                "are told from it (a restart before it is written loses it)",
                self.path,
                exc,
                agent,
            )
        return made

    def pending(self) -> int:
        """Revocations some configured node has not answered yet."""
        return len(self._load()) if self.path.exists() else len(self._held())

    def owed(self, node: str) -> list[AgentRevoke]:
        """What `node` has not answered yet, oldest first (read without the lock: the file is replaced
        whole, never torn)."""
        return [r.wire for r in self._load() if node not in r.acked]

    def acked(self, node: str, revocation: str, nodes: Iterable[str]) -> None:
        """`node` answered `revocation`; one every configured node (`nodes`) answered is forgotten."""
        configured = set(nodes)
        with _UNWRITTEN_LOCK:
            held = _UNWRITTEN.get(self.path, [])
            for row in held:
                if row.wire.revocation == revocation:
                    row.acked.add(node)
            held[:] = [r for r in held if not configured <= r.acked]
        try:
            with statefs.file_lock(self.path):
                rows = self._load()
                for row in rows:
                    if row.wire.revocation == revocation:
                        row.acked.add(node)
                self._save([r for r in rows if not configured <= r.acked])
        except (
            OSError,
            statefs.StateFileError,
        ) as exc:  # told again on its next link: a node hears a revocation twice harmlessly
            log.warning("%s could not be written (%s): node %s's answer is not kept", self.path, exc, node)
