"""`exechost events [--session KEY]`: system events (exec finished/denied …) queued for agent sessions."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from typing import Any

from engine import principals, statefs
from engine.config.loader import config_path, load_config
from engine.display import REPORT, visible
from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable, RemoteError
from engine.protocol.handshake import credential_for
from engine.protocol.methods import EventName, Topic
from engine.protocol.requests import Events
from engine.protocol.syncclient import SyncClient
from engine.sessions.spool import SPOOL_NAME, EventSpool
from engine.statefs import StateFileError
from runner.cli.common import Subparsers, add_json_arg, agent_arg, emit
from runner.cli.gateway import (
    EXIT_UNAVAILABLE,
    CliFailure,
    cli_failures,
    run_verb,
    running_client,
    running_or_fail,
)


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "events",
        help="show system events queued for agent sessions",
        description="System events: follow-ups of approved commands, background exits, overrides.",
    )
    p.add_argument("--session", default="", metavar="KEY", help="only this session key")
    p.add_argument("--agent", type=agent_arg, metavar="ID", help="as this agent (its events only)")
    p.add_argument("--drain", action="store_true", help="remove the events shown (as the agent would)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until interrupted")
    add_json_arg(p)
    p.set_defaults(func=run_verb(cmd_events))


def cmd_events(args: argparse.Namespace) -> int:
    query = Events(drain=args.drain, session_key=args.session or None)
    client: SyncClient | None
    if args.follow or args.drain:
        # Both need the gateway (its live events; delivery is its to record): none running is said, and
        # none is started just for this (issue 30).
        what = "`events --follow` follows its live events" if args.follow else "`events --drain` asks it"
        client = running_or_fail(what, agent=args.agent)
        if args.follow:
            client.close()
            return _follow(args)
    else:
        client = running_client(agent=args.agent)
    if client is None:
        events = _from_disk(args)
    else:
        events = []
        with client, cli_failures():
            while True:  # the gateway answers a page at a time: a large backlog is read in several
                page = client.request(query)
                events += page.get("events", [])
                if page.get("next") is None:
                    break
                query = replace(query, cursor=page["next"])
    lines = [f"[{e['sessionKey']}] {e['text']}" for e in events]
    text = "\n".join(lines) if lines else "No events."
    emit(text, {"events": events}, args.json)
    return 0


def _from_disk(args: argparse.Namespace) -> list[dict[str, Any]]:
    """No gateway running: the undelivered events it left on disk, as it would show them to this caller
    (an agent: only keys in its own namespace), changing nothing."""
    state = statefs.state_dir()
    agent = principals.MAIN_AGENT
    try:
        credential = credential_for(state, args.agent, None)
    except (GatewayUnavailable, RemoteError) as exc:
        raise CliFailure(str(exc), EXIT_UNAVAILABLE) from None
    if credential:
        found = principals.lookup(state, credential)
        if found is None:
            raise CliFailure("the agent credential is not one this state dir minted", EXIT_UNAVAILABLE)
        try:
            config = load_config(config_path())
        except Exception:  # (a config the gateway would refuse: it keeps its last one)
            config = None
        if config is not None and not config.admits(found):  # the gateway refuses it at its hello
            raise CliFailure(config.unlisted(found), EXIT_UNAVAILABLE)
        agent = found
    spool = EventSpool(state / SPOOL_NAME)
    try:
        queues = spool.peek()
    except StateFileError as exc:
        raise CliFailure(str(exc), 1) from None
    print(f"exechost: no gateway is running; events read from {spool.path}", file=sys.stderr)
    wanted = principals.own_key(agent, args.session) if args.session else ""
    keys = [wanted] if wanted else [k for k in queues if principals.owns_key(agent, k)]
    return [{"sessionKey": k, "text": text} for k in keys for text in queues.get(k, [])]


def _follow(args: argparse.Namespace) -> int:
    def show(data: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(data, ensure_ascii=False), flush=True)
        else:
            key, text = data.get("sessionKey"), data.get("text")
            print(f"[{visible(key)}] {visible(text, newline=REPORT, tabs=True)}", flush=True)

    async def go() -> None:
        client = await ControlClient.connect(
            client="cli", name="cli events", agent=args.agent, autostart=False
        )
        try:
            await client.subscribe([Topic.EVENTS])  # first, so nothing falls between backlog and stream
            # An agent's key as the gateway files it: inside its own namespace (engine.principals).
            wanted = principals.own_key(client.agent, args.session) if client.agent else args.session
            query = Events(session_key=args.session or None)
            seen = set()
            while True:
                backlog = await client.request(query)
                for item in backlog.get("events", []):
                    seen.add((item.get("sessionKey"), item.get("text")))
                    show(item)
                if backlog.get("next") is None:
                    break
                query = replace(query, cursor=backlog["next"])
            async for ev in client.events():
                if (ev.data.get("sessionKey"), ev.data.get("text")) in seen:
                    seen.discard((ev.data.get("sessionKey"), ev.data.get("text")))
                    continue
                other_key = args.session and ev.data.get("sessionKey") != wanted
                if ev.event != EventName.SYSTEM_EVENT or other_key:
                    continue
                show(ev.data)
        finally:
            await client.close()

    try:
        asyncio.run(go())
    except GatewayUnavailable as exc:
        raise CliFailure(f"gateway unavailable: {exc}", EXIT_UNAVAILABLE) from None
    print("exechost: gateway connection closed", file=sys.stderr)
    return 1
