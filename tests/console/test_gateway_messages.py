"""The console's link turns each pushed event into its typed message, one per EventName it shows."""

from __future__ import annotations

from console.messages import ApprovalRequested, GatewayEvent, SessionExited
from engine.protocol.methods import EventName

# Output and activity go straight into the pane buffers; exec.waiting is a caller's, egress rows are listed.
NOT_POSTED = {
    EventName.SESSION_OUTPUT,
    EventName.SESSION_ACTIVITY,
    EventName.EXEC_WAITING,
    EventName.EGRESS_CONNECTION,
}


def test_every_shown_event_has_its_own_message() -> None:
    kinds = {}
    for name in EventName:
        msg = GatewayEvent.of(name, {"id": "x"})
        if name in NOT_POSTED:
            assert msg is None, name
            continue
        assert msg is not None and msg.event == name and msg.data == {"id": "x"}, name
        kinds[name] = type(msg)
    assert len(set(kinds.values())) == len(kinds)  # no two events share a handler's message
    assert kinds[EventName.APPROVAL_REQUESTED] is ApprovalRequested
    assert kinds[EventName.SESSION_EXITED] is SessionExited
    assert GatewayEvent.of("no.such.event", {}) is None
