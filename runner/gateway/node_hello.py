"""Whether a node's hello is taken: the id it presents is its own (it names no other configured node, is
pinned to no other, held by no other link), and the state dir it names is recorded only when it is its own."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
from collections.abc import Iterable

from engine.commands import gatewaydirs, hostoutside
from engine.config.model import Config
from engine.nodes.link import NodeError, NodeLink
from engine.nodes.select import normalize_node_key
from engine.nodes.wire import Hello
from engine.principals import MAIN_AGENT
from runner.gateway.node_keys import NodeKeys

log = logging.getLogger("exechost.gateway.nodes")


def check_hello(
    config: Config, keys: NodeKeys, links: Iterable[NodeLink], link: NodeLink, hello: Hello
) -> None:
    """A link whose hello presents a node id that another configured node presented first (pinned in
    node-keys.json), or that another connected link holds, is refused before it is connected: nothing
    it sends is read (a node cannot pass itself off as another, whether that one is up or not)."""
    nodes = config.nodes
    keys.forget_ids(set(nodes))
    for name, cfg in nodes.items():
        # A node id is the node's own word, and selection ranks an exact id above the operator's own
        # facts about a node (its address, its display name): an id naming another node is refused.
        if name != link.name and names_node(hello.node_id, name, cfg.host, cfg.display_name):
            log.warning(
                "node %s claims node id %r, which names node %s; refused", link.name, hello.node_id, name
            )
            raise NodeError(
                f"node {link.name} claims node id {hello.node_id!r}, which names node {name} (its name, "
                f"address or display name); refused (check {link.name}'s node.json)",
                "INVALID_REQUEST",
            )
    pinned = keys.holder(hello.node_id)
    if pinned is not None and pinned != link.name:
        log.warning("node %s claims node id %s, pinned to node %s; refused", link.name, hello.node_id, pinned)
        raise NodeError(
            f"node {link.name} claims node id {hello.node_id}, which node {pinned} holds; refused (check "
            f"{link.name}'s node.json)",
            "INVALID_REQUEST",
        )
    for other in links:
        held = other.hello.node_id if other.hello is not None and other.state == "connected" else None
        if other is not link and held == hello.node_id:
            log.warning(
                "node %s claims node id %s, which node %s holds; refused", link.name, held, other.name
            )
            raise NodeError(
                f"node {link.name} claims node id {held}, which node {other.name} holds; "
                f"refused (check {link.name}'s node.json)",
                "INVALID_REQUEST",
            )
    try:  # durable or the link is refused (fresh round 18 c): a pin lost at a restart frees the id
        keys.pin(link.name, hello.node_id)
    except OSError as exc:
        raise NodeError(
            f"node {link.name}: its node id {hello.node_id} could not be pinned ({exc}; is the state dir's "
            "disk full?): not linked until it can be",
            "UNAVAILABLE",
        ) from exc


def record_state_dir(config: Config, link: NodeLink, hello: Hello) -> None:
    """A node of this account on this machine names its state dir: recorded to be covered in host views,
    only when it proves to be that node's own."""
    if hello.place and hello.place == gatewaydirs.place() and hello.state_dir.startswith(os.sep):
        # A node of this account on this machine: its state dir (another agent's node-run /tmp copy,
        # its sandboxes' workspaces and control FIFOs) is covered in every host view of ours too, as
        # another gateway's is (fresh round 15 b), wherever its HOME recorded it. `place` is no secret
        # and the path is the node's word: recorded only when the directory proves to be that node's
        # own, made by this account, where no run writes (a node naming the operator's project would
        # otherwise hide it from every host run, for good: fresh round 16 b).
        writable = [w for agent in (MAIN_AGENT, *config.agents) for w in config.exec_for(agent).host_writable]
        if gatewaydirs.node_state_dir(hello.state_dir, hello.node_id, writable):
            try:  # durable or the link is refused (fresh round 18 c): owed, tried again at the next record
                gatewaydirs.record(hostoutside.home_dir(), hello.state_dir)
            except gatewaydirs.RecordError as exc:
                raise NodeError(
                    f"node {link.name}: {exc}: not linked until it can be", "UNAVAILABLE"
                ) from exc
        else:
            log.warning(
                "node %s names %s as its state dir on this machine, which is not its own: not recorded",
                link.name,
                hello.state_dir[:300],
            )


def names_node(node_id: str, name: str, host: str, display_name: str | None) -> bool:
    """Whether a node id would be read as this node's name, address or display name (engine.nodes.select
    normalises names; an address is compared as the IP it is)."""
    wanted = node_id.strip()
    key = normalize_node_key(wanted)
    if wanted in (name, host) or (
        key and key in {normalize_node_key(name), normalize_node_key(display_name or "")}
    ):
        return True
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host)) == wanted
    return False
