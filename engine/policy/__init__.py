"""Exec policy: the precedence chain, /exec and /elevated directives, one decision per command."""
