"""The node side of host=node: `exechost node serve --stdio`, run by the gateway over SSH."""
