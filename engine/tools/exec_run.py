"""The exec tool's run: a decided command made into a spec and started (on the host: in its pinned view)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from engine import fairpool
from engine.commands.hostoutside import NOTHING_OUTSIDE
from engine.commands.hostroots import refuse_hidden_cwd, workdir_note
from engine.commands.pinned import (
    PinnedView,
    in_checked_cwd,
    kept_host_view,
    open_checked_dir,
    pinned_view,
    view_for,
)
from engine.commands.treecode import ANCHOR
from engine.commands.verified import DEFAULT_SHELL, VerifiedRun, verify
from engine.config.model import Config
from engine.protocol.requests import ExecRequest
from engine.results import ToolResult
from engine.statefs import state_dir
from engine.tools.exec_host import capped, host_outside
from engine.tools.exec_request import ExecContext, Prepared, Sessions


class ExecRunner:
    """ExecTool's part that starts a decided command (the tool holds the state named here)."""

    _config: Callable[[], Config]
    sessions: Sessions

    def _spec(
        self,
        prepared: Prepared,
        call: ExecRequest,
        ctx: ExecContext,
        command: str,
        *,
        detached: bool = False,
    ) -> Any:
        from engine.sessions.launcher import RunSpec, clamp_yield_ms, run_timeout
        from engine.sessions.registry import derive_session_name

        exec_cfg = self._config().exec_for(ctx.agent_id)
        background = bool(call.background) or detached
        yield_requested = call.yield_ms is not None
        timeout_sec = run_timeout(
            call.timeout, background=background, yields=yield_requested, default=exec_cfg.timeout_sec
        )
        return RunSpec(
            command=command,
            cwd=prepared.cwd,
            env=prepared.env,
            pty=bool(call.pty),
            yield_ms=0 if background else clamp_yield_ms(call.yield_ms, exec_cfg.background_ms),
            background=background,
            timeout_sec=timeout_sec,
            scope_key=ctx.scope_key,
            operator=ctx.operator,
            # Its system events go where it is filed: an operator's run never tells an agent's queue.
            session_key=None if ctx.operator or ctx.filed_under else ctx.session_key or None,
            notify_on_exit=False if detached else exec_cfg.notify_on_exit,
            notify_on_exit_empty_success=exec_cfg.notify_on_exit_empty_success,
            host=prepared.host,
            # Named from what the agent asked, not from the pinned rendering that runs (sealed copies of a
            # script read as `bash /…/python3 -c 'import sys,os;…'`).
            name=derive_session_name(prepared.command),
            launcher=prepared.launcher,
            warnings=list(prepared.warnings),
        )

    async def _run(
        self,
        prepared: Prepared,
        call: ExecRequest,
        ctx: ExecContext,
        command: str,
        *,
        detached: bool = False,
        session_id: str | None = None,
        instance: str = "",
        input_refused: str = "",
        input_refused_unless_full: str = "",
    ) -> ToolResult:
        """Start `command` over verified content (raises StaleContent when a bound file changed)."""
        run = await self._verified(prepared, command)
        view = PinnedView()
        cwd_fd = None
        try:
            cwd_fd = self._cwd_fd(prepared)
            anchor = f"{ANCHOR}{cwd_fd}" if cwd_fd is not None else None
            host = self._host_view(prepared, ctx)
            view = await self._pinned(
                prepared,
                run,
                anchor,
                host=host,
                agent_id=ctx.agent_id,
                owner=ctx.owner,
                operator=ctx.operator,
                own=ctx.operators_own,
            )
            spec = self._spec(prepared, call, ctx, run.command, detached=detached)
            # The cwd checked against the decided directory in the view itself when it can (the fd then
            # closed before the command), else in the shell.
            in_view = cwd_fd is not None and view.check_cwd(cwd_fd)
            # A terminal session's terminal made in the run's own /dev/pts (the only one it can reach).
            spec.pty_in_view = spec.pty and view.terminal()
            started = run.command if cwd_fd is None or in_view else in_checked_cwd(cwd_fd, run.command)
            spec.argv = view.argv(DEFAULT_SHELL, started) or (
                [DEFAULT_SHELL, "-c", started] if cwd_fd is not None and not in_view else None
            )
            if prepared.host == "gateway" and not host:  # (the view joins it itself)
                spec.argv = capped(spec.argv or spec.resolved_argv(), ctx.owner, operator=ctx.operator)
            if view.env:
                spec.env = {**(spec.env or {}), **view.env}
            content = prepared.decision.content if prepared.host == "gateway" else None
            if content is not None and content.env:  # pinned at the decision (a pyenv shim's version)
                spec.env = {**(spec.env or {}), **dict(content.env)}
            spec.pass_fds = (*run.fds, *view.fds, *(() if cwd_fd is None else (cwd_fd,)))
            spec.session_id = session_id
            spec.instance = instance
            spec.input_refused = input_refused
            spec.input_refused_unless_full = input_refused_unless_full
            result = await self.sessions.run(spec)
        finally:
            run.close()  # the child holds its own copies of the fds once spawned
            view.close()
            if cwd_fd is not None:
                os.close(cwd_fd)
        # Where it ran, in the words every result uses (node runs say `node <name>` in the gateway's hub).
        container = getattr(prepared.launcher, "container", None) if prepared.host == "sandbox" else None
        result.details.setdefault("ranOn", f"sandbox {container}" if container else prepared.host)
        return result

    def _host_view(self, prepared: Prepared, ctx: ExecContext) -> bool:
        """Whether the run gets the host view (engine.commands.hostview): every gateway-host run, at
        every security level, unless the operator set hostView = "none"."""
        if prepared.host != "gateway" or self._config().exec_for(ctx.agent_id).host_view == "none":
            return False
        outside = host_outside(
            self._config(),
            ctx.agent_id,
            prepared.cwd,
            ctx.owner,
            operator=ctx.operator,
            own=ctx.operators_own,
        )
        refuse_hidden_cwd(prepared.cwd, str(state_dir()), outside)
        note = workdir_note(str(state_dir()), outside)
        for line in (*outside.refused, *([note] if note is not None else [])):
            if line not in prepared.warnings:
                prepared.warnings.append(line)
        return True

    async def _pinned(
        self,
        prepared: Prepared,
        run: VerifiedRun,
        anchor: str | None = None,
        *,
        host: bool = False,
        agent_id: str = "main",
        owner: str | None = None,
        operator: bool = False,
        own: bool = False,
    ) -> PinnedView:
        """The private view the run starts in: the state dir hidden and the trusted configs read-only
        (`host`), git pointed at the repository vetted, every file a host tool or a script takes code
        from a read-only copy of the bytes checked (issue 27 §4, §5)."""
        d = prepared.decision
        if prepared.host != "gateway" or (
            (d.tree is None or d.tree.vets_nothing) and not run.rereads and not run.mirrors
        ):
            # nothing to pin (view_for's answer too): the kept host view, a few stats and no thread hop
            # once its keeper is up (made in a thread: bwrap runs then)
            if not host:
                return PinnedView()
            outside = host_outside(self._config(), agent_id, prepared.cwd, owner, operator=operator, own=own)
            kept = kept_host_view(outside)
            if kept is not None:
                return kept
            return await fairpool.offload(
                fairpool.blocking, functools.partial(pinned_view, None, host=True, outside=outside)
            )
        outside = (
            host_outside(self._config(), agent_id, prepared.cwd, owner, operator=operator, own=own)
            if host
            else NOTHING_OUTSIDE
        )
        return await fairpool.offload(
            fairpool.blocking, functools.partial(view_for, d.tree, run, anchor, host=host, outside=outside)
        )

    @staticmethod
    def _cwd_fd(prepared: Prepared) -> int | None:
        """The cwd the decision was made in, opened once and checked by inode: the tree is re-vetted
        through this fd and the child runs only in the directory it holds (in_checked_cwd), so a
        directory exchanged at the cwd's path after the check is never where the command runs."""
        d = prepared.decision
        if prepared.host != "gateway" or d.tree is None or not d.identity:
            return None
        return open_checked_dir(prepared.cwd, d.identity)

    async def _verified(self, prepared: Prepared, command: str) -> VerifiedRun:
        d = prepared.decision
        if prepared.host != "gateway" or d.content is None:
            return VerifiedRun(command)
        pinned = d.enforced_command if command == d.enforced_command else d.pinned_command
        if any(item.writable for item in d.content.items):
            # Agent-writable files are read whole and copied: off the event loop.
            return await fairpool.offload(
                fairpool.blocking, functools.partial(verify, d.content, command, pinned)
            )
        return verify(d.content, command, pinned)
