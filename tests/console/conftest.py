"""Fixtures the console's end-to-end tests share."""

from tests.helpers.tmux import tmux_server  # noqa: F401  (a tmux server of the test's own)
