"""Each agent's gateway-host runs share a network namespace of their own (only `lo`), not the host's: in
the host's, one agent's dev server on 127.0.0.1 answered every other agent's runs, and the operator's
loopback services and a Docker engine on tcp://127.0.0.1 answered them all (fresh round 11 a). No list of
ports or addresses: nothing of the host's loopback is in the namespace at all.

One namespace per state dir and agent, held by `exechost-hostenter netkeep` (engine/commands/hostenter/net.c)
for as long as this process runs, like the agent's other private places (engine.commands.hostprivate): a
server one run of the agent leaves running answers the agent's later runs, and nobody else's. It is not
the kept view's (engine.commands.hostkeeper): that is re-made whenever the host's mounts change, and a
server would be cut off from the next run. A gateway that is not root holds it in a user namespace of its
own (the runs join that first; the kept view's bwrap is started inside it).

Outward traffic goes as the bwrap sandboxes' does: the egress forwarder listens on the namespace's
loopback and hands every connection to the gateway's egress proxy (runner.egress, the agent's
`[sandbox.egress]` allowlist, asks in the same inbox); runs find it through the proxy variables (EGRESS
sets how). No egress hub in this process (none set): no way out at all.

One namespace per credential generation, too (engine.approvals.generations): a revoke or rotation starts
a new generation, whose runs get a namespace and an egress listener of their own, and the old listener is
served under the old generation, so everything a run of the old credential set going (a tunnel it opened,
a server it left, a later connect) is cut and refused by the proxy, never carried into the new one.

And one per proof that made the run's caller the agent when that proof is not a credential (a uid mapping,
the gateway token alone: the stamp's `proof`): such runs get a namespace and a listener of their own, served
under that proof's generation too, so a config change that cuts the proof off cuts and refuses their way
out exactly as a revoke does the credential's, and the agent's other callers keep theirs.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.commands import nsholder

OWN, HOST = "own", "host"  # [tools.exec] hostNetwork
NETWORKS = (OWN, HOST)


@dataclass(frozen=True)
class Egress:
    """Where an agent's host runs send what leaves their namespace: the static forwarder started in it,
    the loopback port it listens on, the egress proxy's socket it hands connections to, and the env that
    points clients at it."""

    forwarder: str
    port: int
    socket: str
    env: dict[str, str] = field(default_factory=dict)
    fd: int = -1  # the forwarder's fd when `forwarder` names it (/proc/self/fd/N): passed to netkeep as N


@dataclass(frozen=True)
class Authority:
    """What a host run made now is authorized under: its agent's credential generation, and the proof
    (with its generation) that made its caller the agent when not a credential ("" for a credential)."""

    generation: int = 0
    proof: str = ""
    proof_generation: int = 0


# Set by the process's egress hub (runner.egress.EgressHub.start): serves `agent`'s host runs of one
# authority (listens on the socket it names) and says how to reach it; called from a worker thread. None:
# no hub, no egress.
EGRESS: Callable[[str, Authority | None], Egress | None] | None = None

# Set by the same hub: the authority a run made now is under, None when the run asking was authorized
# under a generation a revoke, a rotation or its proof's cut ended (it is then refused). Unset: none.
GENERATION: Callable[[str], Authority | None] | None = None


def egress_name(agent: str, authority: Authority | None = None) -> str:
    """The name the egress proxy serves an agent's host runs of one authority under (its connections' and
    asks' `sandbox`); `+` and `~` are in no agent's name, so no two (agent, authority) meet."""
    at = authority or Authority()
    name = f"hostnet.{agent}" if not at.generation else f"hostnet.{agent}+{at.generation}"
    return f"{name}~{at.proof}+{at.proof_generation}" if at.proof else name


@dataclass
class Holder(nsholder.Held):
    """`exechost-hostenter netkeep`: `ns` is the agent's network namespace."""

    env: dict[str, str] = field(default_factory=dict)  # the proxy variables, when it has a way out
    authority: Authority | None = None  # what it was made for (GENERATION)

    def words(self, helper: str) -> tuple[list[str], tuple[int, ...]] | None:
        """The words that put a run in this namespace (first of its view's), and this run's own copies of
        the fds they name (to pass and close once spawned); None once stopped."""
        fds = self.copies()
        if fds is None:
            return None
        user = "-" if len(fds) == 1 else str(fds[1])
        return [helper, "netns", str(fds[0]), user, "--"], fds


_holders: dict[tuple[str, str, str], Holder] = {}  # (state, agent, proof): one per proof, too
_lock = threading.Lock()


class Ended(Exception):
    """The run asking was authorized under a credential generation a revoke or rotation ended."""


def _authority(agent: str) -> Authority | None:
    if GENERATION is None:
        return None
    authority = GENERATION(agent)
    if authority is None:
        raise Ended(agent)
    return authority


def _key(state: str, agent: str, authority: Authority | None) -> tuple[str, str, str]:
    return state, agent, authority.proof if authority is not None else ""


def current(state: str, agent: str) -> Holder | None:
    """The agent's live namespace of its current credential generation, without blocking; None when it
    must be made, or when the run asking was authorized under an ended generation (it never joins one)."""
    try:
        authority = _authority(agent)
    except Ended:
        return None
    holder = _holders.get(_key(state, agent, authority))
    live = holder is not None and holder.alive() and holder.authority == authority
    return holder if live else None


def ensure(state: str, agent: str, helper: str) -> Holder | None:
    """The agent's namespace, made here when missing or of an ended generation (blocking: a fork and the
    egress hub's listener); None when it cannot be made, or the run asking was authorized under an ended
    generation (the run is then refused: HostViewError, never the host's network)."""
    with _lock:
        try:
            authority = _authority(agent)
        except Ended:
            return None
        holder = current(state, agent)
        if holder is not None:
            return holder
        old = _holders.pop(_key(state, agent, authority), None)
        if old is not None:
            old.stop()  # (runs still in it keep it until they end; its listener refuses them: a bump)
        holder = _start(agent, helper, authority)
        if holder is not None:
            _holders[_key(state, agent, authority)] = holder
        return holder


def _start(agent: str, helper: str, authority: Authority | None) -> Holder | None:
    way_out = EGRESS(agent, authority) if EGRESS is not None else None
    fwd = [way_out.forwarder, str(way_out.port), way_out.socket] if way_out is not None else ["-", "0", "-"]
    popen = subprocess.Popen(
        [helper, "netkeep", *fwd],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # no terminal's signal and no group kill of ours reaches it
        cwd="/",
        pass_fds=(way_out.fd,) if way_out is not None and way_out.fd >= 0 else (),
    )
    taken = nsholder.take(popen, "net")
    if taken is None:
        Holder(popen, -1, None).stop()
        return None
    _pid, net, user = taken
    env = dict(way_out.env) if way_out is not None else {}
    return Holder(popen, net, user, env=env, authority=authority)


def served(state: str) -> list[tuple[str, Authority | None]]:
    """(agent, authority) of `state`'s live namespaces that have a way out: a hub started after them (a
    gateway restarted in this process) serves them again, or their forwarder would find no proxy."""
    real = os.path.realpath(state)
    with _lock:
        return [
            (a, h.authority)
            for (s, a, _p), h in _holders.items()
            if os.path.realpath(s) == real and h.alive() and h.env
        ]


def stop(state: str | None = None) -> None:
    """End the namespaces of `state`, every agent's (every one of this process when None): a run still in
    one keeps it until the run ends."""
    with _lock:
        for key in [k for k in _holders if state is None or k[0] == state]:
            holder = _holders.pop(key, None)
            if holder is not None:
                holder.stop()
