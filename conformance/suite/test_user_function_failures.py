"""A user's function that raises inside `add` (KS-RED-1, KS-AGG-1): the exception comes out of that `add`, and the
add changes nothing, live or in what a snapshot holds. Flink's backends apply the function before they store or log
anything; a backend that stores the operand and folds it later, clears the old value first, or writes an operation to
its log before applying it, holds a value no add produced, or a log whose replay raises on every restore."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.helpers import keyed_backend, location_for, raised_from
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.state import AggregatingStateDescriptor, ReducingStateDescriptor

NAMESPACES = StringSerializer()
MODULUS = 2**61 - 1


class UserFunctionError(Exception):
    """What the user's function raises for a negative input."""


def _fold(accumulated: int, value: int) -> int:
    """Non-commutative (`fold(fold(a, b), c)` depends on the order of b and c); raises for a negative input."""
    if value < 0:
        raise UserFunctionError(f"refused {value}")
    return (accumulated * 31 + value) % MODULUS


class Folding:
    """An aggregate function applying `_fold` to an int accumulator, which it never changes in place."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: int, acc: int) -> int:
        return _fold(acc, value)

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return (a * 31 + b) % MODULUS


DESCRIPTORS = {
    "reducing": ReducingStateDescriptor("folded", reduce_function=_fold, serializer=LongSerializer()),
    "aggregating": AggregatingStateDescriptor(
        "folded", aggregate_function=Folding(), accumulator_serializer=LongSerializer()
    ),
}


def _expected(kind: str, held: int | None, value: int) -> int:
    """The model: reducing state holds the first value as it is, without calling the function, and folds later ones
    into it; aggregating state folds every value into a fresh accumulator (0)."""
    if held is None:
        return value if kind == "reducing" else _fold(0, value)
    return _fold(held, value)


VALUES = st.integers(-3, -1) | st.integers(0, 1_000)
"""Half of them negative: drawn from -3..1,000 alone, a raise came too rarely to meet a held value."""
ADDS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["n1", "n2"]), VALUES),
    min_size=1,
    max_size=40,
)
"""Adds as (key, namespace, value); the function raises for a negative value (reducing state holds a first value
without calling it)."""


@pytest.mark.requirement("KS-RED-1", "KS-AGG-1", "KB-RESTORE-1")
@pytest.mark.parametrize("kind", sorted(DESCRIPTORS))
@given(adds=ADDS)
def test_an_add_whose_function_raises_changes_nothing(
    certification: Any, tmp_path_factory: Any, kind: str, adds: list[tuple[str, str, int]]
) -> None:
    """Each add whose function raises lets the exception out and leaves every value as it was; the adds around it
    fold as if it had never been made, live, after a snapshot and restore, and in adds made after the restore."""
    descriptor = DESCRIPTORS[kind]
    rid = "KS-RED-1" if kind == "reducing" else "KS-AGG-1"
    model: dict[tuple[str, str], int] = {}
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("raising")))
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local"))) as backend:
        state = backend.get_or_create_state(descriptor, NAMESPACES)
        for key, namespace, value in adds:
            backend.set_current_key(key)
            state.set_current_namespace(namespace)
            call = f"{kind} state of key {key!r}, namespace {namespace!r}: add({value})"
            held = model.get((key, namespace))
            if value < 0 and (held is not None or kind == "aggregating"):  # a first value is reduced with nothing
                try:
                    state.add(value)
                except Exception as exc:
                    assert raised_from(exc, UserFunctionError), (  # as it is, or wrapped (Flink: an IOException)
                        f"{rid}: {call}: the function raised UserFunctionError, but add raised {exc!r}"
                    )
                else:
                    raise AssertionError(f"{rid}: {call}: the function raised UserFunctionError, add returned")
            else:
                state.add(value)
                model[(key, namespace)] = _expected(kind, held, value)
            got = state.get()
            assert got == model.get((key, namespace)), (
                f"{rid}: after {call}, get() gave {got!r}, expected {model.get((key, namespace))!r}"
            )
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    restore = [] if handle is None else [handle]  # a snapshot of no entries may be None (KB-SNAP-7)
    with keyed_backend(certification.new_backend(tmp_path_factory.mktemp("local")), restore=restore) as restored:
        state = restored.get_or_create_state(descriptor, NAMESPACES)
        for key in ("a", "b", "c"):
            for namespace in ("n1", "n2"):
                restored.set_current_key(key)
                state.set_current_namespace(namespace)
                got = state.get()
                expected = model.get((key, namespace))
                assert got == expected, (
                    f"KB-RESTORE-1: {kind} state of key {key!r}, namespace {namespace!r} restored as {got!r}, "
                    f"expected {expected!r}"
                )
                state.add(7)
                expected = _expected(kind, expected, 7)
                got = state.get()
                assert got == expected, (
                    f"{rid}: after the restore, add(7) to key {key!r}, namespace {namespace!r} gave {got!r}, "
                    f"expected {expected!r}"
                )
