"""JSON from peers and files we do not trust: a `[[[[…` line is a clear ValueError, never a RecursionError.

Python's decoder recurses per nesting level, and so does every later walk over what it returned (our
validation, `json.dumps` of an echo). One nesting limit, checked here, keeps all of them safe.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # our deepest legitimate shape (exec params, the approvals file) is under 8


class TooDeep(ValueError):
    """The JSON nests deeper than MAX_DEPTH."""


def loads(data: str | bytes, **kwargs: Any) -> Any:
    """`json.loads` that refuses nesting deeper than MAX_DEPTH with a ValueError (TooDeep)."""
    try:
        value = json.loads(data, **kwargs)
    except RecursionError:
        raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep") from None
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    # Iterative: the point is to never recurse on attacker-chosen depth.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_DEPTH:
                    raise TooDeep(f"JSON nested more than {MAX_DEPTH} levels deep")
                stack.append((child, depth + 1))
