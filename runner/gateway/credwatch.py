"""Connections stay who they were: re-decided on a config, token or credential change; revoke, rotate."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from engine import principals
from engine.nodes import revoking
from engine.protocol.frames import ErrorFrame, Hello
from engine.sandbox import bwraplimits, hostrevocations
from engine.tools import exec_host
from runner.gateway.connection import Connection
from runner.gateway.liveprincipal import principal_now, proof_holds, removed_credentials, stale
from runner.gateway.services import Services
from runner.gateway.tokenfiles import CredentialFiles, GatewayTokens

log = logging.getLogger("exechost.gateway")

FILES_EVERY_S = 1.0  # how often the token files and the config are looked at with nothing else to look


class CredentialWatch:
    """The gateway server's part that keeps each live connection's principal current (GatewayServer holds
    the state named here)."""

    state_dir: Path
    services: Services
    connections: set[Connection]
    _tokens: GatewayTokens
    _tokens_seen: int
    _credentials: CredentialFiles
    _revocations: int
    _revoking: set[str]
    _loop: asyncio.AbstractEventLoop | None
    _rechecks: set[asyncio.Task[Any]]

    def _tokens_now(self) -> int:
        """The tokens' generation, looked at now; a change starts a recheck, which drops the live holders
        of a replaced token (an idle console hears no request to be refused at)."""
        now = self._tokens.generation()
        if now != self._tokens_seen:
            self._tokens_seen = now
            self._spawn_recheck()
        return now

    async def _revoked_meanwhile(self, hello: Hello, who: tuple[str, str], revocations: int) -> bool:
        """A revoke of this credential runs, or one ran while it was being looked up and took it. Looked at
        again after each lookup (a revoke may run during it, and read nothing of this connection yet), and
        False only with no await between the last look and the caller's add of the connection."""
        if not who[1]:
            return False
        while True:
            if who[1] in self._revoking:
                return True
            if self._revocations == revocations:
                return False
            revocations = self._revocations
            if await asyncio.to_thread(principals.lookup, self.state_dir, hello.credential) is None:
                return True

    async def recheck(self) -> list[str]:
        """Decide every live connection's principal again from the current config and credentials
        (liveprincipal.principal_now) and close those that are no longer who they were (a revoked or
        re-minted credential, an unmapped account, `anonymous = "none"`, a replaced gateway or operator
        token); returns their agents. The proofs asks were made under that no longer hold (an unmapped
        account, `anonymous = "none"`) are ended first: those asks are settled as denied, and what was
        approved under them never starts (engine.approvals.generations)."""
        config = self.services.config()
        tokens = self._tokens
        self.services.approvals.end_proofs(lambda key: proof_holds(key, config, tokens))
        conns = list(self.connections)
        gone = await asyncio.to_thread(stale, conns, config, self.state_dir, tokens)
        # A credential no longer on disk as presented (removed or re-minted by hand) ends as a rotation
        # ends it: what was asked with it is settled, its runs in flight ask and reach out no more. Every
        # credential a pending ask names is compared with the files, not only the live connections': an
        # agent that asked and hung up is ended all the same.
        ended = {
            (conn.credential, principals.credential_id(conn.presented))
            for conn in gone
            if conn.credential and conn.presented
        }
        named = self.services.approvals.credentials_named()
        ended |= set(await asyncio.to_thread(removed_credentials, self.state_dir, named - ended))
        for agent, credential in ended:
            self.services.approvals.revoke_credential(agent, credential)
        await self._drop(gone)
        return [conn.agent for conn in gone]

    def listeners(self) -> list[Connection]:
        """The live connections an event may go to now: the token files and the config are looked at
        (three stats), and a connection no longer who it was (a replaced token, `anonymous = "none"`)
        hears nothing more; it is dropped here, before the recheck that change started gets to it. So an
        idle cut-off connection is not sent the next session output (fresh round 16 b)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if not on_loop:  # (events are sent on the loop; a look from elsewhere only reads)
            return list(self.connections)
        live = self.services.live_config
        live.get()
        tokens = self._tokens_now()
        heard: list[Connection] = []
        cut: list[Connection] = []
        for conn in self.connections:
            (heard if self._still_configured(conn, tokens) else cut).append(conn)
        if cut:
            self._cut(cut)
            task = asyncio.get_running_loop().create_task(finish_all(cut))
            self._rechecks.add(task)  # (kept referenced until done)
            task.add_done_callback(self._rechecks.discard)
        return heard

    async def _watch_files(self) -> None:
        """The token files and the config looked at every second on their own (two or three stats): a
        change re-decides every live connection and ends the proofs it cut off (their asks, their runs'
        egress) with nobody connecting or sending a request."""
        while True:
            await asyncio.sleep(FILES_EVERY_S)
            self.look_at_files()

    def look_at_files(self) -> None:
        """One look of the watch: the config, the gateway's and operator's tokens, the agents' credentials."""
        with contextlib.suppress(Exception):  # (a broken edit: LiveConfig keeps the last good one)
            self.services.live_config.get()
        self._tokens_now()
        if self._credentials.changed():
            self._spawn_recheck()

    def _still_configured(self, conn: Connection, tokens: int | None = None) -> bool:
        """Before a request is acted upon: when the config or the gateway or operator token changed since
        this connection's principal was decided, decide those parts again (the uid mapping, `anonymous`,
        the tokens it proved) on the loop, so the request that made the gateway reload its config is not
        acted upon under the old one either, nor a request on a replaced token. `tokens`: the tokens'
        generation already looked at now."""
        live = self.services.live_config
        config = live.get()
        if conn.other_account:
            tokens = conn.tokens_generation
        elif tokens is None:
            tokens = self._tokens_now()
        if conn.config_generation == live.generation and conn.tokens_generation == tokens:
            return True
        now = principal_now(conn, config, self.state_dir, credentials=False, tokens=self._tokens)
        if now != conn.agent:
            return False
        conn.config_generation, conn.tokens_generation = live.generation, tokens
        return True

    def config_changed(self) -> None:
        """The config on disk changed (LiveConfig reloaded it, maybe off the loop): re-decide every
        live connection, as `agents.refresh` does."""
        with contextlib.suppress(Exception):  # best effort: a view records what it names anyway
            exec_host.config_secrets(self.services.config())
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._spawn_recheck)

    def _spawn_recheck(self) -> None:
        task = asyncio.get_running_loop().create_task(self.recheck())
        self._rechecks.add(task)
        task.add_done_callback(self._rechecks.discard)

    async def revoke_agent(self, agent: str) -> tuple[bool, int]:
        """Revoke `agent`'s credential: first stop reading every connection it holds (in one loop turn, so
        nothing it sends from now on is acted upon), then remove the credential, then flush and close
        those connections together (a client that never reads costs one flush timeout, not one each)."""
        # Its credentialed connections and those of the Unix account mapped to it (which has no credential
        # to remove, but is the agent as much: what it sent before the revoke is not acted upon either).
        conns = [
            conn
            for conn in list(self.connections)
            if conn.credential == agent or (conn.other_account and not conn.operator and conn.agent == agent)
        ]
        for conn in conns:
            conn.stop_reading()
            self.connections.discard(conn)  # no event of anyone's reaches it from now on
        self._revoking.add(agent)  # a handshake finishing meanwhile is refused; after, it looks again
        nodes = self.services.nodes.revocations
        try:
            # Durable intent first (engine.nodes.revoking): the host's kill and the nodes' revocation are
            # owed before the credential goes, so a crash at any step leaves them to the next gateway.
            removed = (await asyncio.to_thread(revoking.revoke, self.state_dir, agent, nodes.configured()))[0]
        finally:
            self._revoking.discard(agent)
            self._revocations += 1
        # What it asked before the revoke is not run after it: its pending asks are denied, a run approved
        # but not started yet never starts, and its sandboxes' egress refuses from now on (a new generation).
        self.services.approvals.revoke_agent(agent)
        # and what it left running on the gateway host stops: every process of its host runs' group
        await asyncio.to_thread(bwraplimits.kill_host_group, agent)
        await asyncio.to_thread(hostrevocations.settle, self.state_dir, [agent])  # (only once it was done)
        await self._drop(conns)
        await self.recheck()
        # and on every node (kept already; one down now hears it on its next link); the answer waits for
        # the nodes that are up
        try:
            await nodes.send()
        except Exception:  # (the file could not be written: the revoke here stands, and says so in the log)
            log.exception("agent %s: the revocation could not be sent to its nodes", agent)
        return removed, len(conns)

    async def rotate_agent(self, agent: str) -> tuple[str, int]:
        """`agents add NAME --rotate` as one verb, in revoke's order: stop reading the agent's credentialed
        connections, mint the new credential (the old one stops), then close them; (token, dropped)."""
        conns = [conn for conn in list(self.connections) if conn.credential == agent]
        for conn in conns:
            conn.stop_reading()
            self.connections.discard(conn)
        self._revoking.add(agent)
        nodes = self.services.nodes.revocations
        try:
            # The nodes' rotated revocation is owed before the new credential is minted (as a revoke's)
            token, old = await asyncio.to_thread(revoking.rotate, self.state_dir, agent, nodes.configured())
        finally:
            self._revoking.discard(agent)
            self._revocations += 1
        if old is not None:
            # What the old credential asked is not run after it stopped, as a revoke (and the next
            # gateway's restore, which finds the credential no longer holds) ensures (fresh round 8 o).
            self.services.approvals.revoke_credential(agent, principals.credential_id(old))
        await self._drop(conns)
        await self.recheck()
        if old is not None:
            # and on every node (kept already): the old credential's runs there are refused and lose their
            # way out (runner.node.revoke)
            try:
                await nodes.send()
            except Exception:
                log.exception("agent %s: the rotation could not be sent to its nodes", agent)
        return token, len(conns)

    async def _drop(self, conns: list[Connection]) -> None:
        self._cut(conns)
        await finish_all(conns)

    def _cut(self, conns: list[Connection]) -> None:
        for conn in conns:
            conn.stop_reading()
            self.connections.discard(conn)
            conn.send(ErrorFrame(code="auth", message="agent credential revoked or no longer this agent's"))


async def finish_all(conns: list[Connection]) -> None:
    await asyncio.gather(*(conn.finish() for conn in conns))
