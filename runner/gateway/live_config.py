"""The gateway's config as it is on disk now: reloaded when the file changes, a broken edit kept out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from engine.config.loader import load_config
from engine.config.model import Config

log = logging.getLogger("exechost.gateway")


class LiveConfig:
    """`get()` stats the file per call (cheap, and edits apply at once) and reloads it when it changed. A
    broken edit keeps the last good config; `error` says why, and `on_error` hears each change of it."""

    def __init__(self, path: Path, on_error: Callable[[str | None], None]) -> None:
        self.path = path
        self.error: str | None = None
        self._on_error = on_error
        self._config: Config | None = None
        self._stamp: tuple[int, ...] | None = None
        # Hears each reload after the first (the server re-decides its live connections' principals).
        self.on_change: Callable[[], None] | None = None
        self.generation = 0  # reloads so far: a connection re-decided under an older one looks again

    def get(self) -> Config:
        try:
            st = self.path.stat()
            stamp: tuple[int, ...] | None = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        except OSError:
            stamp = None
        if self._config is None or stamp != self._stamp:
            try:
                first = self._config is None
                self._config = load_config(self.path)
                self._set_error(None)
                if not first:
                    self.generation += 1
                    if self.on_change is not None:
                        self.on_change()
            except Exception as exc:
                if self._config is None:
                    raise
                log.error("config reload failed, keeping the previous one: %s", exc)
                self._set_error(f"{exc} — still running on the last good config")
            self._stamp = stamp
        return self._config

    def problem(self) -> str | None:
        """Why the config on disk is not the one in force (a broken edit), else None."""
        self.get()  # a fix or a new breakage shows at once
        return self.error

    def _set_error(self, error: str | None) -> None:
        if error != self.error:
            self.error = error
            self._on_error(error)
