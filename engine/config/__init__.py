"""config.toml: the keys (each declared once), loading with file:line errors, comment-keeping writes."""
