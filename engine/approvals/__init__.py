"""Approvals: exec-approvals.json (schema, store), pending asks, and the exec-approvals.sock."""
