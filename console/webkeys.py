"""The web console's one-use keys: engine.webkeys (shared with the gateway's browser door)."""

from engine.webkeys import SECRET_TTL_S, TICKET_TTL_S, OneUseKeys

__all__ = ["SECRET_TTL_S", "TICKET_TTL_S", "OneUseKeys"]
