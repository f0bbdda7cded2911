"""What the gateway knows of each node beyond its config: the session keys it gave the node (a node's
`system.event`, a background session's exit reported after its run answered, is filed only under a key the
gateway itself sent that node) and the node id each configured node first presented (pinned, so no other
node can take it, connected or not). Kept on disk: node sessions outlive a gateway restart."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from engine import jsontext, statefs
from engine.nodes.wire import is_node_id
from engine.principals import key_owner

log = logging.getLogger("exechost.gateway.nodes")

FILE_NAME = "node-keys.json"
# Each owner (an agent, or the operator for keys that name none) has its own share of a node's keys: past
# it, that owner's key given longest ago is forgotten. One pool for all let agent main's 1,030 trivial runs
# evict ops's key, and ops's background exit notice was then dropped as "never given".
MAX_KEYS_PER_OWNER = 1024
# All owners together, per node (what the file holds): past it, the owner holding the most loses its oldest.
MAX_KEYS_PER_NODE = 4096
MAX_IDS = 4096
# The pins by bytes too (each id and the name it is pinned to, as text): a count alone let one long id fill
# the file. An id is at most wire.HELLO_ID_CHARS of ASCII and a name a config key, so this holds thousands.
MAX_ID_BYTES = 256 * 1024


class NodeKeys:
    """{node name: {session key: when it was last given (ms)}}, written when a key is new to a node."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self._keys: dict[str, dict[str, int]] = {}
        # The same keys by owner, oldest first ({node: {owner: {key: None}}}): shares kept without a scan.
        self._owned: dict[str, dict[str, dict[str, None]]] = {}
        self._ids: dict[str, str] = {}  # node id -> the [nodes.<name>] that first presented it
        self._id_bytes = 0  # what _ids holds, counted as MAX_ID_BYTES counts it
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
                owned = self._owned[name] = {}
                for k in self._keys[name]:
                    owned.setdefault(_owner(k), {})[k] = None
        ids = data.get("ids") if isinstance(data, dict) else None
        if isinstance(ids, dict):  # read as a hello's id is: only well-formed ids, within the same bounds
            for node_id, name in ids.items():
                if is_node_id(node_id) and isinstance(name, str) and len(name) <= MAX_ID_BYTES // 2:
                    self._ids[node_id] = name
                    self._id_bytes += _pin_bytes(node_id, name)
            self._trim_ids()

    def give(self, node: str, key: str) -> None:
        """`node` runs work under `key` from now on (a run was sent there with it). Forgets the oldest key
        of the same owner past its share, then, past the node's cap, the oldest of whoever holds the most
        (the giver when it ties): what one owner gives never forgets another's key while that one holds
        no more than the giver."""
        keys = self._keys.setdefault(node, {})
        owned = self._owned.setdefault(node, {})
        owner = _owner(key)
        mine = owned.setdefault(owner, {})
        new = key not in keys
        keys.pop(key, None)
        keys[key] = int(time.time() * 1000)
        mine.pop(key, None)
        mine[key] = None
        if not new:
            return
        if len(mine) > MAX_KEYS_PER_OWNER:
            self._forget(node, owner)
        if len(keys) > MAX_KEYS_PER_NODE:
            most = max(len(held) for held in owned.values())
            biggest = (
                owner if len(mine) == most else next(o for o, held in owned.items() if len(held) == most)
            )
            self._forget(node, biggest)
        self._save()

    def _forget(self, node: str, owner: str) -> None:
        """Forget `owner`'s key on `node` given longest ago."""
        held = self._owned[node][owner]
        oldest = next(iter(held))
        del held[oldest], self._keys[node][oldest]
        if not held:
            del self._owned[node][owner]

    def given(self, node: str, key: str) -> bool:
        return key in self._keys.get(node, {})

    def holder(self, node_id: str) -> str | None:
        """The node name this id is pinned to, if any."""
        return self._ids.get(node_id)

    def pin(self, node: str, node_id: str) -> None:
        """`node` presented `node_id`: pinned to it. The first name to present an id keeps it while that
        name is configured (removing the node, or editing node-keys.json, frees it). Written or OSError, the
        pin undone (fresh round 18 c: a pin kept only in memory was gone after a restart, and another node
        took the id): the caller refuses the link, and the next hello pins it again."""
        if not is_node_id(node_id):  # the hello's reader refuses it first; kept here whoever calls
            raise ValueError(f"node {node}: not a node id; not pinned")
        if self._ids.get(node_id) == node:
            return
        before, before_bytes = dict(self._ids), self._id_bytes
        self._drop_id(node_id)
        self._ids[node_id] = node
        self._id_bytes += _pin_bytes(node_id, node)
        self._trim_ids()
        try:
            self._write()
        except OSError:
            self._ids, self._id_bytes = before, before_bytes
            raise

    def _trim_ids(self) -> None:
        """Past the count or the bytes, the ids pinned longest ago are forgotten first."""
        while self._ids and (len(self._ids) > MAX_IDS or self._id_bytes > MAX_ID_BYTES):
            self._drop_id(next(iter(self._ids)))

    def _drop_id(self, node_id: str) -> None:
        name = self._ids.pop(node_id, None)
        if name is not None:
            self._id_bytes -= _pin_bytes(node_id, name)

    def forget_ids(self, keep: set[str]) -> None:
        """Ids pinned to names no longer configured are free again."""
        gone = [i for i, name in self._ids.items() if name not in keep]
        for node_id in gone:
            self._drop_id(node_id)
        if gone:
            self._save()

    def held(self, node: str, owner: str) -> int:
        """How many of `node`'s keys `owner` holds ("" for keys that name no agent)."""
        return len(self._owned.get(node, {}).get(owner, {}))

    def _write(self) -> None:
        data = {"version": 1, "nodes": self._keys, "ids": self._ids}
        statefs.atomic_write(self.path, json.dumps(data) + "\n")

    def _save(self) -> None:
        try:
            self._write()
        except OSError as exc:  # the run goes ahead; its later session events may be dropped
            log.warning("%s not written: %s", self.path, exc)


def _pin_bytes(node_id: str, name: str) -> int:
    """What one pin costs in the file: the id and the name as UTF-8, and JSON's quotes and separators."""
    return len(node_id.encode()) + len(name.encode()) + 6


def _owner(key: str) -> str:
    """Whose share a key counts in: the agent it names, or "" (the operator) when it names none."""
    return key_owner(key) or ""
