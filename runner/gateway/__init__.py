"""The gateway daemon: control socket server, one handler per verb, lifecycle and service install."""
