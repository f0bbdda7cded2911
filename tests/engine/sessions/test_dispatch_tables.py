"""The session actions and the session host's commands are dispatched by tables: every name has its one
handler, and no handler is unreachable."""

from __future__ import annotations

from engine.sessions import host_io as hio
from engine.sessions.actions import ACTIONS, HANDLERS
from engine.sessions.host_main import COMMANDS, SESSION_COMMANDS


def test_every_process_action_has_one_handler() -> None:
    assert set(HANDLERS) | {"list"} == set(ACTIONS)  # `list` needs no session: run_action answers it


def test_every_host_command_kind_has_one_handler() -> None:
    kinds = {hio.WRITE, hio.EOF, hio.RESIZE, hio.SIGNAL, hio.CLOSE}
    assert set(SESSION_COMMANDS) == kinds
    assert set(COMMANDS) == {hio.SPAWN, hio.HOLD, hio.LIST, hio.ATTACH, hio.FORGET, hio.BYE}
    assert not set(COMMANDS) & kinds
