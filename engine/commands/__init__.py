"""Command analysis: parse, unwrap, resolve and match a shell command; the host exec environment."""
