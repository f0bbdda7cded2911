"""Each principal's budget of unreadable requests on one node link. The gateway names a request's
principal (the agent it runs for) in its id, `<principal>/<n>`; a request the node cannot read is
answered INVALID_REQUEST and counted against that principal only, and past its budget that principal's
requests are refused on this link while everyone else's are still served: one agent's values can never
get the link everyone shares closed. A line with no sound id cannot be addressed or counted: it still
closes the link (only a broken gateway sends one)."""

from __future__ import annotations

MAX_BAD_FRAMES = 64  # unreadable requests answered per principal and link; past it, its requests are refused
MAX_PRINCIPALS = 1024  # principals counted on one link; more is a gateway making ids up: the link closes


def principal(request_id: str) -> str:
    """Whose request this is: what the gateway put before the id's last `/` ("" for its own)."""
    return request_id.rpartition("/")[0]


class BadFrames:
    def __init__(self) -> None:
        self._spent: dict[str, int] = {}

    def count(self, request_id: str) -> bool:
        """One more unreadable request of this id's principal; False when the link must close instead."""
        who = principal(request_id)
        if who not in self._spent and len(self._spent) >= MAX_PRINCIPALS:
            return False
        self._spent[who] = self._spent.get(who, 0) + 1
        return True

    def refused(self, request_id: str) -> str | None:
        """Why this request is refused unread (its principal spent its budget), or None."""
        who = principal(request_id)
        if self._spent.get(who, 0) < MAX_BAD_FRAMES:
            return None
        return (
            f"INVALID_REQUEST: too many unreadable requests for {who or 'the gateway'} on this link "
            f"({MAX_BAD_FRAMES}); its requests are refused until the next link"
        )
