"""Who an agent is: valid agent and node names, per-agent credentials, the session keys each agent owns."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from engine import jsontext, statefs
from engine.errors import InvalidInput

# One rule for agent and node names wherever they enter (config, CLI, wire): no `:` (session keys are
# `agent:<id>:…`, node session ids `node:<name>:…`), no `/`, no leading `.` (names become file names).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAIN_AGENT = "main"
# The legacy name of main (OpenClaw's `default` agent): the approvals file files it as main's, so no
# agent of its own may have it (fresh round 17 b: agent default's allow-always was main's).
LEGACY_MAIN = "default"
# The principal of the shared-scope sandbox's egress (every agent's commands run there as one uid): the `:`
# keeps it apart from every agent id by construction, an agent may well be called `shared`.
SHARED_SCOPE = "scope:shared"
AGENTS_DIR = "agents"
CREDENTIAL_ENV = "EXECHOST_AGENT_TOKEN"
SOCKET_ENV = "EXECHOST_GATEWAY_SOCKET"
TOKEN_PREFIX = "exa_"  # noqa: S105 - a prefix, not a secret; so a leaked token is recognisable for what it is


def valid_name(raw: object) -> bool:
    return isinstance(raw, str) and NAME_RE.fullmatch(raw) is not None


def check_agent(raw: object, what: str = "agent id") -> str:
    """The name, or InvalidInput: `../x`, `*`, `a:b` and empty names are refused."""
    if not valid_name(raw):
        raise InvalidInput(f"invalid {what} {raw!r} (1-64 letters, digits, _ . -; not starting with . _ -)")
    assert isinstance(raw, str)
    return raw


def check_node(raw: object) -> str:
    return check_agent(raw, "node name")


# What may select a node for host=node: a name, a display name (spaces), a node id or an IP (IPv6 has
# colons). Never a path: `../n1` normalises to `n1` and would quietly pick that node.
NODE_QUERY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.:-]{0,127}")


def check_node_query(raw: object) -> str:
    if not isinstance(raw, str) or not NODE_QUERY_RE.fullmatch(raw) or ".." in raw:
        raise InvalidInput(f"invalid node name {raw!r} (a node's name, display name, id or IP)")
    return raw


# ---- session keys: every agent owns `agent:<id>` and `agent:<id>:…` ------------------------------------


def owns_key(agent: str, key: str) -> bool:
    """True when `key` is in `agent`'s namespace (`agent:<id>` or `agent:<id>:…`). Every key names its
    owner: a key without an `agent:` prefix (a node's, an unknown session's, an operator's plain key)
    belongs to no agent, only to the operator, who sees every scope anyway (issue 27 §1)."""
    return key == f"agent:{agent}" or key.startswith(f"agent:{agent}:")


def key_owner(key: str) -> str | None:
    """The agent a key names (`agent:<id>[:…]`), or None for an ownerless (operator-only) key."""
    if not key.startswith("agent:"):
        return None
    name = key[len("agent:") :].split(":", 1)[0]
    return name if valid_name(name) else None


# The operator's own runs are filed here: a key no agent's `owns_key` matches, whatever agent the run names
# for policy (the principal that runs owns what it starts; docs/SECURITY.md, Principals).
OPERATOR_SCOPE = "operator"


def operator_key(key: str) -> str:
    """The scope an operator's own run is filed under, from the session key it named: `operator` for
    none, an ownerless key unchanged (already the operator's only), and an agent's key moved out of that
    agent's namespace (`agent:main:s1` is `operator:agent:main:s1`), so no agent lists, reads, types
    into or is told of the operator's run however the operator named it. Idempotent."""
    key = key.strip()
    if not key:
        return OPERATOR_SCOPE
    return key if key_owner(key) is None else f"{OPERATOR_SCOPE}:{key}"


def is_operators(scope: str) -> bool:
    """Whether a scope is the operator's own (`operator` or `operator:…`): no agent's key is ever one
    (an agent's keys are `agent:<id>…` by own_key; its sandbox scopes `agent:<id>…` or the shared one)."""
    return scope == OPERATOR_SCOPE or scope.startswith(f"{OPERATOR_SCOPE}:")


def operator_scope(scope: str) -> str:
    """The operator's own counterpart of the sandbox scope a call names (a browser's: its profile, cookies,
    tabs): always under `operator:`, unlike operator_key, since an ownerless scope such as the shared one
    is every agent's, not the operator's alone. `agent:main` is `operator:agent:main`. Idempotent."""
    scope = scope.strip()
    if not scope or is_operators(scope):
        return scope or OPERATOR_SCOPE
    return f"{OPERATOR_SCOPE}:{scope}"


def main_session(agent_id: str, key: str) -> bool:
    """Whether `key` names the agent's main session, in any of its spellings ("", `main`,
    `agent:<id>:main`; case-insensitively, one rule whatever the caller: issue 13)."""
    return key.strip().lower() in ("", "main", f"agent:{agent_id}:main".lower())


def canonical_session(agent_id: str, key: str) -> str:
    """One spelling per session: any spelling of the main session is `agent:<id>:main`, so what is kept
    under it (the operator's `/exec` lockdown) is found by every spelling that runs as it (fresh round 17 b:
    `MAIN` ran on the host as main, under none of `agent:main:main`'s overrides)."""
    return f"agent:{agent_id}:main" if main_session(agent_id, key) else key


def own_key(agent: str, key: str) -> str:
    """The scope a non-operator caller's `sessionKey` names: its own key unchanged, anything else moved
    into its own namespace (agent main's plain `s1` is `agent:main:s1`). A guessed `agent:victim:…` thus
    names an empty scope of the caller's and reads as "not found", never as the victim's data."""
    key = key.strip()
    if not key or owns_key(agent, key):
        return key
    return f"agent:{agent}:{key}"


# ---- per-agent credentials: <state>/agents/<name>.json, 0600 -------------------------------------------


@dataclass(frozen=True)
class Credential:
    agent: str
    created_ms: int
    path: Path


def agents_dir(state: Path) -> Path:
    return state / AGENTS_DIR


def _path(state: Path, agent: str) -> Path:
    return agents_dir(state) / f"{check_agent(agent)}.json"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(state: Path, agent: str) -> str:
    """A new token for `agent` (replacing any earlier one, which stops working); returns the token. The
    file holds the token itself so the operator's own CLI can act as the agent (`--agent NAME`)."""
    path = _path(state, agent)
    statefs.ensure_private_dir(state)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = {"version": 1, "agent": agent, "token": token, "createdAtMs": int(time.time() * 1000)}
    statefs.atomic_write(path, json.dumps(record) + "\n")
    return token


def _load(path: Path) -> dict[str, object] | None:
    try:
        text = statefs.read_text(path)
        data = jsontext.loads(text) if text is not None else None
    except (OSError, ValueError, statefs.StateFileError):
        return None
    return data if isinstance(data, dict) else None


def read_token(state: Path, agent: str) -> str | None:
    data = _load(_path(state, agent))
    token = data.get("token") if data else None
    return token if isinstance(token, str) and token.startswith(TOKEN_PREFIX) else None


def _entries(state: Path) -> list[tuple[Credential, str]]:
    """Every minted credential with its token, each file read once (symlinks, and files whose name and
    content disagree, are ignored)."""
    out: list[tuple[Credential, str]] = []
    try:
        names = sorted(os.listdir(agents_dir(state)))
    except OSError:
        return out
    for name in names:
        agent = name[: -len(".json")] if name.endswith(".json") else ""
        if not valid_name(agent):
            continue
        path = agents_dir(state) / name
        data = _load(path)
        token = data.get("token") if data else None
        if data is None or data.get("agent") != agent or not isinstance(token, str):
            continue
        created = data.get("createdAtMs")
        out.append((Credential(agent, created if isinstance(created, int) else 0, path), token))
    return out


def listing(state: Path) -> list[Credential]:
    """Every minted credential, by name (never the tokens)."""
    return [cred for cred, _token in _entries(state)]


def revoke(state: Path, agent: str) -> bool:
    """Remove `agent`'s credential; the unlink is durable (its directory fsynced) before this returns, so a
    crash right after a revoke never brings the credential back."""
    path = _path(state, agent)
    statefs.refuse_symlink(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def credential_id(token: str) -> str:
    """Which credential a call was made with, as the pending journal keeps it (engine.tools.resume): the
    token's digest (what a lookup compares), never the token."""
    return _digest(token)


def still_holds(state: Path, agent: str, credential: str) -> bool:
    """Whether the credential `credential_id` named is still `agent`'s on disk: False once it was revoked
    or re-minted (rotated), also while no gateway ran."""
    return any(
        cred.agent == agent and hmac.compare_digest(_digest(stored), credential)
        for cred, stored in _entries(state)
    )


def lookup(state: Path, token: str) -> str | None:
    """The agent a presented token belongs to, or None. Read from disk on every handshake, so a revoke
    or re-mint takes effect for the next connection without telling the gateway."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    wanted = _digest(token)
    found = None
    for cred, stored in _entries(state):
        # Compare digests in constant time, and look at every entry: timing says nothing about which.
        if hmac.compare_digest(_digest(stored), wanted):
            found = cred.agent
    return found


def token_from_env(path: str | None = None) -> str | None:
    """The agent credential a client presents: `--agent-token-file PATH`, else $EXECHOST_AGENT_TOKEN."""
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read agent token file {path}: {exc.strerror}") from None
        if text.startswith("{"):  # the credential file itself (`exechost agents add --json` / the .json)
            try:
                data = jsontext.loads(text)
            except ValueError:
                data = None
            text = str(data.get("token") or "") if isinstance(data, dict) else ""
        return text or None
    return os.environ.get(CREDENTIAL_ENV, "").strip() or None
