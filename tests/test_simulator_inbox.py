"""A simulated task's inbox against a sorted-list model: priority events (unaligned barriers, SIM-5) overtake
everything queued, the rest leave in order of arrival, channel and sequence (FIFO per channel, SIM-2), and a task
waiting for input takes the next arrival at once."""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.simulator.inbox import Inbox, Order

Step = tuple[str, int, int]  # ("put", priority, channel) | ("get", 0, 0) | ("cancel", 0, 0) | ("tick", 0, 0)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 1), st.integers(0, 3)),
        st.tuples(st.sampled_from(["get", "cancel", "tick"]), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@pytest.mark.requirement("SIM-2", "SIM-5")
@given(steps)
def test_the_inbox_takes_messages_in_the_order_a_sorted_queue_would(script: list[Step]) -> None:
    env = simpy.Environment()
    inbox = Inbox(env)
    model: list[tuple[Order, Any]] = []
    waiting: simpy.Event | None = None  # our pending get, if any
    sequence = [0] * 4
    now = 0.0
    for kind, priority, channel in script:
        if kind == "tick":
            now += 1.0
        elif kind == "put":
            sequence[channel] += 1
            order: Order = (priority, now, channel, sequence[channel])
            entry = (channel, f"m{channel}.{sequence[channel]}", priority == 1)
            inbox.put(order, entry)
            if waiting is not None:
                assert waiting.triggered and waiting.value == entry, (
                    f"a waiting get takes the arrival {entry}; got {waiting.value if waiting.triggered else 'nothing'}"
                )
                waiting = None
            else:
                model.append((order, entry))
        elif kind == "get" and waiting is None:
            event = inbox.get()
            if model:
                model.sort()
                expected = model.pop(0)[1]
                assert event.triggered and event.value == expected, f"get(): expected {expected}, got {event.value}"
            else:
                assert not event.triggered, "get() on an empty inbox waits for the next arrival"
                waiting = event
        elif kind == "cancel" and waiting is not None:
            inbox.cancel(waiting)
            waiting = None
        assert inbox.queued() == [entry for _, entry in sorted(model)], "queued(): the messages not taken, in order"
        assert inbox.priority_first() == (bool(model) and min(model)[0][0] == 0)
    while model:
        model.sort()
        assert inbox.pop() == model.pop(0)[1]
