"""A node's identity file `<state>/node.json` ({version, nodeId, displayName}, 0600), created on first run."""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from engine import statefs
from engine.nodes.wire import node_id_problem

NODE_FILE_VERSION = 1


@dataclass(frozen=True)
class NodeIdentity:
    node_id: str
    display_name: str

    def to_json(self) -> dict[str, object]:
        return {"version": NODE_FILE_VERSION, "nodeId": self.node_id, "displayName": self.display_name}


def load_or_create(state_dir: Path | None = None) -> NodeIdentity:
    """Read node.json, filling what is missing (a fresh id, the machine's name), and save it back (§5.2)."""
    state = state_dir if state_dir is not None else statefs.state_dir()
    path = state / "node.json"
    raw = statefs.read_text(path)
    data: dict[str, object] = {}
    if raw is not None:
        try:
            loaded = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc}); fix or remove it") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a JSON object")
        data = loaded
    node_id = data.get("nodeId")
    if not isinstance(node_id, str) or not node_id.strip():
        node_id = str(uuid.uuid4())
    problem = node_id_problem(node_id.strip())
    if problem is not None:  # a gateway refuses its hello: said here, where it can be fixed
        raise ValueError(f"{path}: nodeId refused: {problem}; fix it, or remove it for a fresh one")
    name = data.get("displayName")
    if not isinstance(name, str) or not name.strip():
        name = socket.gethostname() or node_id[:8]
    ident = NodeIdentity(node_id=node_id.strip(), display_name=name.strip())
    statefs.atomic_write(path, json.dumps(ident.to_json(), indent=2) + "\n")
    return ident
