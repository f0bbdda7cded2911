"""The attack corpus: every hole found in exechost, performed for real, which must keep failing.

Each test runs the attack as an agent would (through the gateway, the CLI or a socket) and asserts that
nothing ran that nobody allowed, usually by a marker file that must not appear. A change that makes any
of these pass the attacker's way is a regression, whatever else it fixes.
"""
