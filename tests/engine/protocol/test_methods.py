"""Every control-socket method is declared once (engine.protocol.methods) and has exactly one handler."""

from __future__ import annotations

from engine.protocol.methods import TOPICS, EventName, Method, Topic
from runner.gateway.handlers import HANDLERS


def test_every_method_has_one_handler_and_every_handler_a_method() -> None:
    assert set(HANDLERS) == {m.value for m in Method}
    assert all(isinstance(key, Method) for key in HANDLERS)


def test_names_are_unique_and_topics_match() -> None:
    assert len({m.value for m in Method}) == len(Method)
    assert len({e.value for e in EventName}) == len(EventName)
    assert tuple(t.value for t in Topic) == TOPICS
