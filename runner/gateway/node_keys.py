"""Which session keys the gateway has given each node: a node's `system.event` (a background session's
exit, reported after the run that started it has answered) is filed only under a key the gateway itself
sent that node, so a node can never write into the queue of an agent whose work it was never given.
Kept on disk: a node session outlives a gateway restart and reports after it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from engine import jsontext, statefs

log = logging.getLogger("exechost.gateway.nodes")

FILE_NAME = "node-keys.json"
MAX_KEYS_PER_NODE = 1024  # past this the key given longest ago is forgotten


class NodeKeys:
    """{node name: {session key: when it was last given (ms)}}, written when a key is new to a node."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self._keys: dict[str, dict[str, int]] = {}
        try:
            text = statefs.read_text(self.path)
            data = jsontext.loads(text) if text else {}
        except (OSError, ValueError, statefs.StateFileError) as exc:
            log.warning(
                "%s unreadable (%s): node session events before this start are dropped", self.path, exc
            )
            data = {}
        nodes = data.get("nodes") if isinstance(data, dict) else None
        for name, keys in (nodes or {}).items():
            if isinstance(name, str) and isinstance(keys, dict):
                self._keys[name] = {
                    k: v for k, v in keys.items() if isinstance(k, str) and isinstance(v, int)
                }

    def give(self, node: str, key: str) -> None:
        """`node` runs work under `key` from now on (a run was sent there with it)."""
        keys = self._keys.setdefault(node, {})
        new = key not in keys
        keys.pop(key, None)
        keys[key] = int(time.time() * 1000)
        while len(keys) > MAX_KEYS_PER_NODE:
            del keys[next(iter(keys))]
        if new:
            self._save()

    def given(self, node: str, key: str) -> bool:
        return key in self._keys.get(node, {})

    def _save(self) -> None:
        try:
            statefs.atomic_write(self.path, json.dumps({"version": 1, "nodes": self._keys}) + "\n")
        except OSError as exc:  # the run goes ahead; its later session events may be dropped
            log.warning("%s not written: %s", self.path, exc)
