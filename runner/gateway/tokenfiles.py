"""The gateway's and the operator's tokens as their files hold them now, like an agent's credential: a
replaced gateway.json or operator.json takes effect at the next handshake and drops live holders of the
old one (issue 27 §1: a token read once at start kept a leaked one working until a restart)."""

from __future__ import annotations

import hmac
import os
import threading
from pathlib import Path

from engine import principals
from engine.protocol.frames import OPERATOR_TOKEN_NAME, TOKEN_NAME, read_token, token_path


def token_id(token: str) -> str:
    """Which gateway or operator token made a proof (runner.gateway.liveprincipal): a digest, as
    principals.credential_id, never the token; 64 bits, as a replacing token is random (nobody chooses it
    to share the old one's id)."""
    return principals.credential_id(token)[:16]


class TokenFile:
    """One token file, re-read only when its stat identity changes (a stat per look: cheap). "" when the
    file is missing or malformed: such a token matches nothing (`matches`)."""

    def __init__(self, path: Path, name: str) -> None:
        self._state = path
        self._name = name
        self._path = str(token_path(path, name))
        self._lock = threading.Lock()  # looked at on the loop and from a recheck's thread
        self._key: tuple[int, ...] | None = None
        self._token = ""
        self.changes = 0  # times the token it holds changed after the first read

    def current(self) -> str:
        try:
            st = os.stat(self._path)
            key: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except OSError:
            key = None
        if key is not None and key == self._key:
            return self._token  # (set before its key: a reader that sees the new key sees its token)
        with self._lock:
            if key != self._key or self._key is None:
                # Read after the stat: what is read is at least as new as the identity kept for it.
                token = read_token(self._state, self._name) or ""
                if token != self._token and self._key is not None:
                    self.changes += 1
                self._token = token
                self._key = key
            return self._token

    def id(self) -> str:
        """The id of the token the file holds now ("" when none): what a proof it made names."""
        token = self.current()
        return token_id(token) if token else ""

    def matches(self, presented: str) -> bool:
        """Whether `presented` is the token the file holds now (constant time; nothing matches no token)."""
        token = self.current()
        return bool(token) and hmac.compare_digest(presented.encode(), token.encode())


class GatewayTokens:
    """The gateway token (gateway.json: any client of this account) and the operator token (operator.json)."""

    def __init__(self, state_dir: Path) -> None:
        self.gateway = TokenFile(state_dir, TOKEN_NAME)
        self.operator = TokenFile(state_dir, OPERATOR_TOKEN_NAME)

    def generation(self) -> int:
        """Looks at both files now; a count that moves whenever either token changed."""
        self.gateway.current()
        self.operator.current()
        return self.seen()

    def seen(self) -> int:
        """That count as last looked at (no stat)."""
        return self.gateway.changes + self.operator.changes


class CredentialFiles:
    """The agents' credential files as a whole, by their stat identities (one scandir per look): a
    credential re-minted, restored or removed on disk by hand (an offline `agents add --rotate`) shows as
    a change, and the gateway drops the live holders of the old one as it does for a replaced gateway
    token (fresh round 17 b: they ran commands until somebody ran `agents refresh`)."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = principals.agents_dir(state_dir)
        self._key: tuple[tuple[object, ...], ...] | None = None

    def changed(self) -> bool:
        """Looks now; True when anything in the directory changed since the last look (never the first)."""
        key = self._identity()
        moved = self._key is not None and key != self._key
        self._key = key
        return moved

    def _identity(self) -> tuple[tuple[object, ...], ...]:
        try:
            with os.scandir(self._dir) as entries:
                found = []
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    found.append((entry.name, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size))
        except OSError:
            return ()
        return tuple(sorted(found))
