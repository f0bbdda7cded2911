"""Headless services (gateway daemon, node runner) and the `exechost` command line."""
