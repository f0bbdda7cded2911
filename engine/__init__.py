"""exechost's UI-free core: policy, approvals, command analysis, sessions, sandboxes and wire codecs."""
