"""Sandboxes end: pruned when idle or too old, removed for the operator, forgotten with their egress."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from engine import fairpool, statefs
from engine.sandbox import docker_ops, runtimes
from engine.sandbox.backend import backend_named
from engine.sandbox.egress import forwarder
from engine.sandbox.pool import Pool
from engine.sandbox.registry import Registry, RegistryError, now_ms
from engine.sandbox.settings import SandboxSettings

PRUNE_INTERVAL_SEC = 5 * 60
# What a registry write can raise: a corrupt file, an unusable path, I/O. Anything else is a bug.
REGISTRY_ERRORS = (RegistryError, statefs.StateFileError, OSError)


class SandboxRemoval:
    """SandboxManager's part that ends sandboxes (the manager holds the state named here)."""

    _registry: Registry | None
    _known: dict[str, Any]
    _egress_dirs: set[str]
    _last_prune: float | None
    active: dict[str, int]
    pool: Pool
    egress_gone: Callable[[str], None] | None

    @property
    def registry(self) -> Registry:
        # Resolved lazily: the state dir may change between tests in one process.
        return self._registry or Registry()

    def forget(self, name: str) -> None:
        """The sandbox is gone: nothing of it stays known, and its egress socket and dir go too."""
        self._known.pop(name, None)
        self._egress_dirs.discard(name)
        if self.egress_gone is not None:
            self.egress_gone(name)
        forwarder.remove_dir(name)

    # -- prune ------------------------------------------------------------------------------------
    async def maybe_prune(self, settings: SandboxSettings, *, force: bool = False) -> list[str]:
        """Remove containers idle past idleHours or older than maxAgeDays; at most once per 5 min."""
        now = time.monotonic()
        if not force and self._last_prune is not None and now - self._last_prune < PRUNE_INTERVAL_SEC:
            return []
        self._last_prune = now
        if settings.max_age_days > 0:  # a spare is as old as its image: it goes like any container
            self.pool.expire(int(settings.max_age_days * 86_400_000))
        return await fairpool.to_thread(self._prune, settings.idle_hours, settings.max_age_days)

    def prune_pool(self, config: Any, *, everything: bool = False) -> list[str]:
        """Unclaimed pool containers whose key the config no longer asks for (all: `everything`); blocking.
        No Docker engine, no spares (a bwrap-only host prunes and recreates without one)."""
        try:
            return self.pool.prune(config, everything=everything)
        except docker_ops.SandboxUnavailable:
            return []

    def _prune(self, idle_hours: float, max_age_days: float) -> list[str]:
        if idle_hours <= 0 and max_age_days <= 0:
            return []
        stamp = now_ms()
        removed: list[str] = []
        for entry in self.registry.read():
            if self.active.get(entry.containerName, 0) > 0:
                continue  # a background job is still running in it
            idle = stamp - (entry.lastUsedAtMs or entry.createdAtMs)
            age = stamp - entry.createdAtMs
            if (idle_hours > 0 and idle > idle_hours * 3_600_000) or (
                max_age_days > 0 and age > max_age_days * 86_400_000
            ):
                backend_named(entry.backendId, entry.containerName).remove(entry.containerName)
                with contextlib.suppress(*REGISTRY_ERRORS):
                    self.registry.remove(entry.containerName)
                self.forget(entry.containerName)
                removed.append(entry.containerName)
        return removed

    # -- operator views ---------------------------------------------------------------------------
    def list_runtimes(self, config: Any) -> list[dict[str, Any]]:
        """Registry entries joined with live Docker state and the config they should have now."""
        return runtimes.list_runtimes(self.registry, config)

    def remove_runtime(self, name: str) -> bool:
        entry = None
        with contextlib.suppress(*REGISTRY_ERRORS):
            entry = self.registry.get(name)
        ok = backend_named(entry.backendId if entry else None, name).remove(name)
        with contextlib.suppress(*REGISTRY_ERRORS):  # the sandbox is gone; a stale row is pruned later
            self.registry.remove(name)
        self.forget(name)
        return ok
