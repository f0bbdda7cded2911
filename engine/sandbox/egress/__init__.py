"""Egress by domain: a sandbox's only route out is a host-side proxy that decides each name (DESIGN §9).

`engine.config.egress` decides a name by the allow/deny lists, `addresses` resolves it and refuses what is
not public or denied by address, `proxy` is the HTTP forward proxy (plain requests and CONNECT) on one Unix
socket per sandbox, `handoff` receives the sandbox's socket and lets go of what the sandbox sent off the
event loop, `sockio` reads and writes that socket whatever its flags say, `forwarder` builds the static
in-sandbox helper that hands each loopback connection to the Unix socket, `log` keeps the connection
history. The gateway (runner/egress.py) supplies the asks, grants and events.
"""
