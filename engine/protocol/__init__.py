"""The gateway control socket: frames, the method/event/topic names, and the client."""
