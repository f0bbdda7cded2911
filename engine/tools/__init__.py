"""The agent-facing tools (`exec`, `process`) end to end."""
