"""engine.fairpool: a principal's calls never hold more workers than its share, and a burst on a pool with
idle workers gets as many workers as it may use (idle ones woken once each, the rest started)."""

from __future__ import annotations

import asyncio
import threading

from engine import fairpool
from engine.fairpool import FairPool
from tests.helpers.gateway import wait_until


async def test_a_principal_holds_at_most_its_share_and_another_still_runs() -> None:
    pool = FairPool("t-share", workers=4, per_principal=3)
    release = threading.Event()
    entered: list[int] = []

    def slow() -> int:
        entered.append(1)
        release.wait(120)
        return 1

    # Warm the pool first: idle workers must each be woken once, not all notified for the same call.
    assert await asyncio.gather(*(pool.run("a", lambda: 0) for _ in range(4))) == [0, 0, 0, 0]
    burst = [asyncio.ensure_future(pool.run("a", slow)) for _ in range(6)]
    try:
        await wait_until(lambda: len(entered) == 3, timeout=20)
        assert pool.waiting("a") == 3  # its share (3) runs; the rest waits in its own queue
        assert await asyncio.wait_for(pool.run("b", lambda: "b ran"), timeout=20) == "b ran"
    finally:
        release.set()
        assert await asyncio.gather(*burst) == [1] * 6


async def test_offload_runs_an_agents_call_in_its_pool_and_the_operators_on_the_default_pool() -> None:
    pool = FairPool("t-offload", workers=1)
    names: list[str] = []

    def where() -> None:
        names.append(threading.current_thread().name)

    await fairpool.offload(pool, where)  # no agent acting: the operator's lane

    async def as_agent() -> None:
        fairpool.act_as("a", "conn-1")
        await fairpool.offload(pool, where)

    await asyncio.ensure_future(as_agent())  # its own task: the context stays there
    await fairpool.offload(pool, where)
    assert [n.startswith("t-offload") for n in names] == [False, True, False], names


async def test_agents_holding_every_shared_worker_leave_the_lanes_worker_free() -> None:
    """Fresh round 18 b: two agents each hold a worker with a long call; a third agent's call waits, and the
    lane's (the operator's) call still starts at once on the worker kept for it."""
    pool = FairPool("t-lane", workers=2, lane=fairpool.OPERATOR_QUEUE)
    release = threading.Event()
    entered: list[str] = []

    def slow(who: str) -> str:
        entered.append(who)
        release.wait(120)
        return who

    held = [asyncio.ensure_future(pool.run(who, lambda who=who: slow(who))) for who in ("a", "b", "c")]
    try:
        await wait_until(lambda: len(entered) == 2, timeout=20)
        assert await asyncio.wait_for(pool.run(fairpool.OPERATOR_QUEUE, lambda: "own"), timeout=20) == "own"
        assert len(entered) == 2 and pool.waiting("c") + pool.waiting("a") + pool.waiting("b") == 1
    finally:
        release.set()
        assert sorted(await asyncio.gather(*held)) == ["a", "b", "c"]


async def test_a_pool_without_a_lane_is_held_by_its_workers() -> None:
    """The same two long calls on a pool with no lane hold both workers: the third call waits (what the
    lane is for)."""
    pool = FairPool("t-nolane", workers=2)
    release = threading.Event()
    entered: list[str] = []

    def slow(who: str) -> str:
        entered.append(who)
        release.wait(120)
        return who

    held = [asyncio.ensure_future(pool.run(who, lambda who=who: slow(who))) for who in ("a", "b")]
    try:
        await wait_until(lambda: len(entered) == 2, timeout=20)
        third = asyncio.ensure_future(pool.run(fairpool.OPERATOR_QUEUE, lambda: "own"))
        await wait_until(lambda: pool.waiting(fairpool.OPERATOR_QUEUE) == 1, timeout=20)
        assert not third.done()
    finally:
        release.set()
        assert sorted(await asyncio.gather(*held)) == ["a", "b"]
    assert await third == "own"
