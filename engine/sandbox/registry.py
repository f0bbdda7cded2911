"""sandbox-registry.json: which containers exist for which scope, when made and used, with what config."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine import jsontext, statefs
from engine.errors import ExecHostError

REGISTRY_FILE = "sandbox-registry.json"


class RegistryError(ExecHostError):
    """The registry file exists but is not a registry; it is left untouched."""


@dataclass
class RegistryEntry:
    containerName: str
    sessionKey: str
    createdAtMs: int
    lastUsedAtMs: int
    image: str
    configHash: str | None = None
    backendId: str = "docker"
    agentId: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RegistryEntry:
        return cls(
            containerName=str(raw["containerName"]),
            sessionKey=str(raw.get("sessionKey", "")),
            createdAtMs=int(raw.get("createdAtMs", 0)),
            lastUsedAtMs=int(raw.get("lastUsedAtMs", 0)),
            image=str(raw.get("image", "")),
            configHash=raw.get("configHash"),
            backendId=str(raw.get("backendId", "docker")),
            agentId=raw.get("agentId"),
        )


def now_ms() -> int:
    return int(time.time() * 1000)


class Registry:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or statefs.state_dir() / REGISTRY_FILE

    def _parse(self, text: str | None) -> list[RegistryEntry]:
        if text is None or not text.strip():
            return []
        try:
            data = jsontext.loads(text)
            raw_entries = data["entries"]
            if not isinstance(raw_entries, list):
                raise TypeError("entries is not a list")
            return [RegistryEntry.from_dict(e) for e in raw_entries]
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryError(f"Invalid sandbox registry format: {self.path}: {exc}") from exc

    def read(self) -> list[RegistryEntry]:
        """Lenient read for list and prune: an unreadable file reads as empty (never rewritten by this)."""
        try:
            return self._parse(statefs.read_text(self.path))
        except (RegistryError, OSError, statefs.StateFileError):
            return []

    def read_strict(self) -> list[RegistryEntry]:
        return self._parse(statefs.read_text(self.path))

    def mutate(self, fn: Callable[[list[RegistryEntry]], list[RegistryEntry]]) -> list[RegistryEntry]:
        """Read strictly, apply `fn`, write atomically — all under the file lock."""
        with statefs.file_lock(self.path):
            entries = fn(self.read_strict())
            payload = {"entries": [asdict(e) for e in entries]}
            statefs.atomic_write(self.path, json.dumps(payload, indent=2) + "\n")
            return entries

    def upsert(self, entry: RegistryEntry) -> None:
        """Insert or update; an existing entry keeps its original createdAtMs and image (reference §6.4)."""

        def apply(entries: list[RegistryEntry]) -> list[RegistryEntry]:
            for i, old in enumerate(entries):
                if old.containerName == entry.containerName:
                    entry.createdAtMs = old.createdAtMs or entry.createdAtMs
                    entry.image = old.image or entry.image
                    entries[i] = entry
                    return entries
            return [*entries, entry]

        self.mutate(apply)

    def replace(self, entry: RegistryEntry) -> None:
        """A recreated container: a fresh record under the same name."""
        self.mutate(lambda es: [e for e in es if e.containerName != entry.containerName] + [entry])

    def touch(self, name: str, at_ms: int | None = None) -> None:
        stamp = at_ms or now_ms()

        def apply(entries: list[RegistryEntry]) -> list[RegistryEntry]:
            for e in entries:
                if e.containerName == name:
                    e.lastUsedAtMs = max(e.lastUsedAtMs, stamp)
            return entries

        self.mutate(apply)

    def remove(self, name: str) -> None:
        self.mutate(lambda es: [e for e in es if e.containerName != name])

    def get(self, name: str) -> RegistryEntry | None:
        return next((e for e in self.read() if e.containerName == name), None)
