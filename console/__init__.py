"""The Textual operator console; importing this package does not load Textual (the CLI imports it lazily)."""
