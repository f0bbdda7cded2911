"""Egress by domain: a sandbox's only route out is a host-side proxy that decides each name (DESIGN §9).

`engine.config.egress` decides a name by the allow/deny lists, `addresses` resolves it and refuses what is
not public or denied by address, `proxy` is the HTTP forward proxy (plain requests and CONNECT) on one Unix
socket per sandbox, `sockio` reads and writes the sandbox's socket whatever its flags say, `forwarder`
builds the static in-sandbox helper that hands each loopback connection to that socket, `log` keeps the
connection history. The gateway (runner/egress.py) supplies the asks, grants and events.
"""
