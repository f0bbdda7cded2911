"""Remote nodes over SSH: identity (node.json), the JSON-lines wire, selection, and the gateway's link."""
