"""exec-approvals.sock: OpenClaw's wire format, the hardened server, the local exec host."""
