"""`exechost agents add|list|revoke NAME`: the operator mints and revokes per-agent credentials."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pwd
import time

from engine import principals, statefs
from engine.config.loader import config_path, load_config
from engine.config.model import Config
from engine.nodes import revoking
from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable
from engine.protocol.requests import AgentsRevoke, AgentsRotate
from engine.sandbox import hostrevocations
from runner.cli import UsageError
from runner.cli.common import Subparsers, add_json_arg, agent_arg, emit


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "agents",
        help="mint, list and revoke per-agent credentials (the operator's)",
        description="Each agent proves who it is with its own credential (or its own Unix account, see "
        "[[agents.list]] uid/user): the gateway never takes an agent's name from a request.",
    )
    sub = p.add_subparsers(dest="agents_command", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="mint a credential for NAME and print it (once)")
    add.add_argument("name", type=agent_arg, metavar="NAME")
    add.add_argument("--rotate", action="store_true", help="replace NAME's credential (the old one stops)")
    add_json_arg(add)
    add.set_defaults(func=cmd_add)
    listing = sub.add_parser("list", help="agents holding a credential (never the tokens)")
    add_json_arg(listing)
    listing.set_defaults(func=cmd_list)
    revoke = sub.add_parser("revoke", help="revoke NAME's credential; its live connections are dropped")
    revoke.add_argument("name", type=agent_arg, metavar="NAME")
    add_json_arg(revoke)
    revoke.set_defaults(func=cmd_revoke)


def _rotate_live(agent: str) -> dict[str, object] | None:
    """A running gateway rotates (`agents.rotate`): it stops the agent's connections, mints, then drops
    them, so the old credential never acts after the new one exists. None when no gateway answers."""

    async def go() -> dict[str, object]:
        client = await ControlClient.connect(client="cli", name="cli agents", autostart=False, operator=True)
        try:
            return await client.request(AgentsRotate(agent=agent))
        finally:
            await client.close()

    with contextlib.suppress(GatewayUnavailable, ConnectionError, OSError):
        return asyncio.run(go())
    return None


def _config() -> Config | None:
    """The config as the gateway would read it; None when it cannot be read (the gateway refuses that
    config too, keeping its last good one, and decides every connection itself)."""
    try:
        return load_config(config_path())
    except Exception:
        return None


def cmd_add(args: argparse.Namespace) -> int:
    state = statefs.state_dir()
    config = _config()
    if config is not None and not config.admits(args.name):
        # A credential for an agent the list does not name connects as nobody: say so now, not at the
        # agent's first hello (and never mint a token that would start working when an entry appears).
        emit(
            f"not minted: {config.unlisted(args.name)}",
            {"agent": args.name, "error": "unlisted", "config": str(config.path)},
            args.json,
        )
        return 1
    exists = principals.read_token(state, args.name) is not None
    if exists and not args.rotate:
        emit(
            f"agent {args.name!r} already has a credential (`--rotate` replaces it, `revoke` removes it)",
            {"agent": args.name, "error": "exists"},
            args.json,
        )
        return 1
    live = _rotate_live(args.name) if exists else None
    if live is not None:
        token, dropped = str(live["token"]), int(live.get("dropped") or 0)  # type: ignore[call-overload]
    elif exists:  # no gateway runs: each node is owed the rotation (kept before the new one is minted)
        token, dropped = revoking.rotate(state, args.name, _nodes_configured())[0], 0
    else:
        token, dropped = principals.mint(state, args.name), 0
    path = principals.agents_dir(state) / f"{args.name}.json"
    text = (
        f"{token}\n\nAgent {args.name}'s credential (also in {path}, 0600). Give it to that agent only: "
        f"EXECHOST_AGENT_TOKEN=<token> for `exechost exec|process|mcp`, or `exechost mcp "
        f"--agent-token-file FILE`."
    )
    emit(text, {"agent": args.name, "token": token, "path": str(path), "dropped": dropped}, args.json)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    creds = principals.listing(statefs.state_dir())
    config = _config()
    listed = {c.agent: config is None or config.admits(c.agent) for c in creds}
    rows = [{"agent": c.agent, "createdAtMs": c.created_ms, "listed": listed[c.agent]} for c in creds]
    lines = [
        f"{c.agent}  minted {time.strftime('%Y-%m-%d %H:%M', time.localtime(c.created_ms / 1000))}"
        + ("" if listed[c.agent] else "  (not in [[agents.list]]: refused at connect)")
        for c in creds
    ]
    emit(
        "\n".join(lines) if lines else "No agent credentials (the gateway token alone is agent main).",
        {"agents": rows},
        args.json,
    )
    return 0


def _revoke_live(agent: str) -> dict[str, object] | None:
    """A running gateway revokes: it stops the agent's connections before the credential goes, so nothing
    the agent sends after the revoke is acted upon. None when no gateway answers."""

    async def go() -> dict[str, object]:
        client = await ControlClient.connect(client="cli", name="cli agents", autostart=False, operator=True)
        try:
            return await client.request(AgentsRevoke(agent=agent))
        finally:
            await client.close()

    with contextlib.suppress(GatewayUnavailable, ConnectionError, OSError):
        return asyncio.run(go())
    return None


def _nodes_configured() -> bool:
    """No gateway runs: whether the revoke must wait for the next one's link to each node
    (engine.nodes.revocations), so what the agent left running there ends then."""
    try:
        return bool(load_config(config_path()).nodes)
    except Exception:  # (a config the gateway would refuse too: keep the revocation anyway)
        return True


def _mapped_account(agent: str) -> int | None:
    """No gateway runs: the account the config maps to `agent`, if the config can be read."""
    config = _config()  # (None: the answer then just names no account)
    entry = config.agents.get(agent) if config is not None else None
    return entry.uid if entry is not None else None


def _not_revoked(agent: str, account: object, dropped: int, live: bool) -> str:
    """Why nothing was revoked, and what an agent mapped to a Unix account keeps until its mapping goes."""
    if not isinstance(account, int):
        return f"agent {agent!r} has no credential"
    try:
        who = f"{pwd.getpwuid(account).pw_name} (uid {account})"
    except KeyError:
        who = f"uid {account}"
    ended = (
        f"its {dropped} live connection(s), pending asks and host runs were ended; "
        if live
        else "its host runs were ended; "
    )
    return (
        f"agent {agent!r} has no credential to revoke: the Unix account {who} is its credential "
        f"([[agents.list]] in {config_path()}). {ended}it can connect again until that entry is removed"
    )


def cmd_revoke(args: argparse.Namespace) -> int:
    live = _revoke_live(args.name)
    if live is None:
        state = statefs.state_dir()
        # what it owes (the host's kill, each node's revocation) kept before the credential goes
        try:  # written before the credential goes, or the revoke is refused (no gateway will tell a node)
            removed, _old = revoking.revoke(state, args.name, _nodes_configured(), durable=True)
        except OSError as exc:
            raise UsageError(f"agent {args.name}'s credential is kept, not revoked: {exc}") from exc
        dropped = 0
        hostrevocations.end(args.name)  # now, where this process can; the next gateway again
    else:
        removed, dropped = bool(live.get("revoked")), int(live.get("dropped") or 0)  # type: ignore[call-overload]
    if not removed:
        account = _mapped_account(args.name) if live is None else live.get("account")
        details = {"agent": args.name, "revoked": False, "dropped": dropped, "account": account}
        emit(_not_revoked(args.name, account, dropped, live is not None), details, args.json)
        return 1
    text = f"revoked agent {args.name}'s credential" + (
        f"; dropped {dropped} live connection(s)" if dropped else ""
    )
    emit(text, {"agent": args.name, "revoked": True, "dropped": dropped}, args.json)
    return 0
