"""The keyed state kinds, namespaces, merging and TTL (chapters KS and TTL), for every reference backend."""

from __future__ import annotations

from typing import Any

import pytest

from statecert.conformance.helpers import key_group_of, keyed_backend, location_for, snapshot_now
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.spec.errors import IllegalStateError, InvalidStateValueError
from statecert.spec.state import (
    VOID_NAMESPACE,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

NS = StringSerializer()
VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
LIST = ListStateDescriptor("l", element_serializer=StringSerializer())
MAP = MapStateDescriptor("m", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
REDUCING = ReducingStateDescriptor("r", reduce_function=lambda a, b: a + b, serializer=LongSerializer())


class Average:
    """An aggregate function: (sum, count) accumulator, mean result."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        return [acc[0] + value, acc[1] + 1]

    def get_result(self, acc: list[int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


AGGREGATING = AggregatingStateDescriptor("a", aggregate_function=Average(), accumulator_serializer=MsgpackSerializer())


@pytest.fixture
def backend(state_backend: Any) -> Any:
    with keyed_backend(state_backend) as b:
        yield b


@pytest.mark.requirement("KS-1", "KB-STATE-1")
def test_every_kind_is_offered(backend: Any) -> None:
    backend.set_current_key("k")
    for descriptor in (VALUE, LIST, MAP, REDUCING, AGGREGATING):
        state = backend.get_or_create_state(descriptor)
        assert hasattr(state, "clear"), (
            f"KS-1, KB-STATE-1: get_or_create_state({descriptor.kind.value}) returned {state!r}"
        )


@pytest.mark.requirement("KS-2")
def test_same_name_gives_state_over_same_entries(backend: Any) -> None:
    backend.set_current_key("k")
    backend.get_or_create_state(VALUE).update(7)
    again = backend.get_or_create_state(ValueStateDescriptor("v", serializer=LongSerializer()))
    assert again.value() == 7, "KS-2: again.value(): expected 7"


@pytest.mark.requirement("KS-3", "KB-KEY-1")
def test_keys_and_namespaces_are_isolated(backend: Any) -> None:
    state = backend.get_partitioned_state("w1", VALUE, NS)
    backend.set_current_key("a")
    assert backend.get_current_key() == "a" and backend.current_key_group == key_group_of("a"), (
        "KS-3, KB-KEY-1: expected backend.get_current_key() == 'a' and backend.current_key_group == key_group_of('a')"
    )
    state.update(1)
    state.set_current_namespace("w2")
    state.update(2)
    backend.set_current_key("b")
    assert state.value() is None, "KS-3, KB-KEY-1: key b sees key a's value"
    backend.set_current_key("a")
    assert state.value() == 2, "KS-3, KB-KEY-1: state.value(): expected 2"
    state.set_current_namespace("w1")
    assert state.value() == 1, "KS-3, KB-KEY-1: namespace w1 sees namespace w2's value"


@pytest.mark.requirement("KS-4")
@pytest.mark.parametrize("descriptor", [VALUE, LIST, MAP, REDUCING, AGGREGATING], ids=lambda d: d.kind.value)
def test_clear_leaves_no_entry(backend: Any, descriptor: Any) -> None:
    state = backend.get_or_create_state(descriptor)
    for key in ("a", "b"):
        backend.set_current_key(key)
        {
            "value": lambda: state.update(1),
            "list": lambda: state.add("x"),
            "map": lambda: state.put("x", 1),
            "reducing": lambda: state.add(1),
            "aggregating": lambda: state.add(1),
        }[descriptor.kind.value]()
    assert backend.num_state_entries(descriptor.name) == 2, (
        "KS-4: backend.num_state_entries(descriptor.name): expected 2"
    )
    state.clear()
    assert backend.num_state_entries(descriptor.name) == 1, "KS-4: clear() of key b left its entry"
    backend.set_current_key("a")
    state.clear()
    assert backend.num_state_entries(descriptor.name) == 0, (
        "KS-4: backend.num_state_entries(descriptor.name): expected 0"
    )
    assert backend.num_state_entries() == 0, "KS-4: backend.num_state_entries(): expected 0"


@pytest.mark.requirement("KS-4")
def test_entry_counts_are_per_state(backend: Any) -> None:
    value, lst = backend.get_or_create_state(VALUE), backend.get_or_create_state(LIST)
    for i in range(5):
        backend.set_current_key(f"k{i}")
        value.update(i)
        if i < 2:
            lst.add("x")
    counts = (backend.num_state_entries("v"), backend.num_state_entries("l"), backend.num_state_entries())
    assert counts == (5, 2, 7), f"KS-4: num_state_entries('v'), ('l'), () gave {counts}, expected (5, 2, 7)"
    assert backend.num_state_entries("never-registered") == 0, (
        "KS-4: backend.num_state_entries('never-registered'): expected 0"
    )


@pytest.mark.requirement("KS-NS-1")
@pytest.mark.parametrize("access", ["read", "write"])
def test_none_namespace_is_rejected(backend: Any, access: str) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(VALUE, NS)
    try:
        state.set_current_namespace(None)
    except InvalidStateValueError:
        return  # refused at once
    with pytest.raises(InvalidStateValueError):
        state.value() if access == "read" else state.update(1)
        pytest.fail(f"KS-NS-1: set_current_namespace(None) then a {access}: expected InvalidStateValueError, got none")
    count = backend.num_state_entries()
    assert count == 0, f"KS-NS-1: set_current_namespace(None) then a {access}: expected nothing stored, got {count}"


@pytest.mark.requirement("KS-VALUE-1", "KS-VALUE-3")
def test_value_state_update_value_and_clear_by_none(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(ValueStateDescriptor("d", serializer=LongSerializer(), default=42))
    assert state.value() == 42, "KS-VALUE-1, KS-VALUE-3: state.value(): expected 42"
    state.update(5)
    assert state.value() == 5, "KS-VALUE-1, KS-VALUE-3: state.value(): expected 5"
    state.update(None)
    assert state.value() == 42 and backend.num_state_entries("d") == 0, (
        "KS-VALUE-1, KS-VALUE-3: expected state.value() == 42 and backend.num_state_entries('d') == 0"
    )


@pytest.mark.requirement("KS-VALUE-2")
def test_default_is_a_fresh_copy(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(ValueStateDescriptor("d", serializer=MsgpackSerializer(), default=[1]))
    first = state.value()
    first.append(2)
    assert state.value() == [1], "KS-VALUE-2: mutating a returned default changed the default"


@pytest.mark.requirement("KS-LIST-1", "KS-LIST-2")
def test_list_state_order_update_and_empty(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(LIST)
    assert state.get() is None, "KS-LIST-1, KS-LIST-2: state.get(): expected None"
    state.add("a")
    state.add_all(["b", "c"])
    assert state.get() == ["a", "b", "c"], "KS-LIST-1, KS-LIST-2: state.get(): expected ['a', 'b', 'c']"
    state.update(["z"])
    assert state.get() == ["z"], "KS-LIST-1, KS-LIST-2: state.get(): expected ['z']"
    state.update([])
    assert state.get() is None and backend.num_state_entries("l") == 0, (
        "KS-LIST-1, KS-LIST-2: expected state.get() is None and backend.num_state_entries('l') == 0"
    )
    state.add("x")
    state.clear()
    assert state.get() is None, "KS-LIST-1, KS-LIST-2: state.get(): expected None"


READS = {
    "value": lambda state: state.value(),
    "list": lambda state: state.get(),
    "map": lambda state: (
        state.get("a"),
        state.contains("a"),
        list(state.items()),
        list(state.keys()),
        list(state.values()),
        list(state.iterator()),
        state.is_empty(),
    ),
    "reducing": lambda state: state.get(),
    "aggregating": lambda state: state.get(),
}


@pytest.mark.requirement("KS-5")
@pytest.mark.parametrize("descriptor", [VALUE, LIST, MAP, REDUCING, AGGREGATING], ids=lambda d: d.kind.value)
def test_reading_nothing_creates_no_entry(backend: Any, descriptor: Any) -> None:
    backend.set_current_key("k")
    READS[descriptor.kind.value](backend.get_or_create_state(descriptor))
    count = backend.num_state_entries(descriptor.name)
    keys = list(backend.get_keys(descriptor.name, VOID_NAMESPACE))
    assert (count, keys) == (0, []), (
        f"KS-5: every read of {descriptor.kind.value} state for key k with nothing stored: expected no entry and no "
        f"key, got {count} entries, keys {keys}"
    )


ADDING_NOTHING = {
    "list add_all([])": (LIST, "KS-LIST-2", lambda state: state.add_all([])),
    "list update([])": (LIST, "KS-LIST-2", lambda state: state.update([])),
    "map put_all({})": (MAP, "KS-MAP-3", lambda state: state.put_all({})),
}


@pytest.mark.requirement("KS-LIST-2", "KS-MAP-3")
@pytest.mark.parametrize("call", sorted(ADDING_NOTHING))
def test_adding_nothing_leaves_no_entry(backend: Any, call: str) -> None:
    descriptor, rid, add_nothing = ADDING_NOTHING[call]
    backend.set_current_key("k")
    add_nothing(backend.get_or_create_state(descriptor))
    count = backend.num_state_entries(descriptor.name)
    keys = list(backend.get_keys(descriptor.name, VOID_NAMESPACE))
    assert (count, keys) == (0, []), (
        f"{rid}: {call} for key k with nothing stored: expected no entry and no key, got {count} entries, keys {keys}"
    )


@pytest.mark.requirement("KS-LIST-2", "KS-LIST-3")
def test_list_writes_take_any_iterable(backend: Any) -> None:
    """`add_all` and `update` take an Iterable (spec/state.py), so a one-shot generator too: a backend that walks
    it twice (once to refuse None, once to store) stores nothing; a None met late still leaves the state unchanged."""
    backend.set_current_key("k")
    state = backend.get_or_create_state(LIST)
    state.add_all(x for x in ["a", "b"])
    after_add_all = state.get()
    state.update(x for x in ["c", "d", "e"])
    after_update = state.get()
    state.add_all(iter(("f",)))
    got = (after_add_all, after_update, state.get())
    want = (["a", "b"], ["c", "d", "e"], ["c", "d", "e", "f"])
    assert got == want, f"KS-LIST-2: add_all, update, add_all of generators: expected {want}, got {got}"
    for op in ("add_all", "update"):
        with pytest.raises(InvalidStateValueError):
            getattr(state, op)(x for x in ["x", None])
        assert state.get() == want[-1], f"KS-LIST-3: {op} of a generator ending in None changed the list"


@pytest.mark.requirement("KS-LIST-3")
@pytest.mark.parametrize("op", ["add", "add_all", "update"])
def test_list_rejects_none_and_stays_unchanged(backend: Any, op: str) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(LIST)
    state.add("keep")
    with pytest.raises(InvalidStateValueError):
        if op == "add":
            state.add(None)
        else:
            getattr(state, op)(["x", None])
    assert state.get() == ["keep"], f"KS-LIST-3: list changed after a rejected {op}"


@pytest.mark.requirement("KS-MAP-1", "KS-MAP-2", "KS-MAP-3")
def test_map_state_operations(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(MAP)
    got = (state.get("a"), state.contains("a"))
    assert got == (None, False), f"KS-MAP-1: get('a'), contains('a') of an empty map: expected (None, False), got {got}"
    state.put("a", 1)
    state.put_all({"b": 2, "c": 3})
    got = (state.get("a"), state.contains("b"))
    assert got == (1, True), (
        f"KS-MAP-1: put('a', 1), put_all(b, c), then get('a'), contains('b'): expected (1, True), got {got}"
    )
    items = sorted(state.items())
    assert items == [("a", 1), ("b", 2), ("c", 3)], (
        f"KS-MAP-3: put('a', 1), put_all({{'b': 2, 'c': 3}}), then items(): expected a, b, c, got {items}"
    )
    got = (sorted(state.keys()), sorted(state.values()))
    assert got == (["a", "b", "c"], [1, 2, 3]), f"KS-MAP-2: keys(), values() of a, b, c: got {got}"
    state.remove("b")
    got = (state.contains("b"), sorted(state.keys()))
    assert got == (False, ["a", "c"]), (
        f"KS-MAP-1: remove('b') of a, b, c, then contains('b'), keys(): expected (False, ['a', 'c']), got {got}"
    )
    try:
        state.remove("z")
    except Exception as exc:
        raise AssertionError(f"KS-MAP-1: remove('z') of an absent user key: expected nothing, got {exc!r}") from exc
    items = sorted(state.items())
    assert items == [("a", 1), ("c", 3)], (
        f"KS-MAP-1: remove('z') of an absent user key: expected no change, got {items}"
    )


@pytest.mark.requirement("KS-MAP-4")
def test_removing_last_user_key_leaves_no_entry(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(MAP)
    state.put("a", 1)
    state.remove("a")
    assert state.is_empty() and backend.num_state_entries("m") == 0, (
        "KS-MAP-4: expected state.is_empty() and backend.num_state_entries('m') == 0"
    )


@pytest.mark.requirement("KS-MAP-5")
def test_map_iterator_remove_once_per_element(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(MAP)
    state.put_all({"a": 1, "b": 2, "c": 3})
    it = state.iterator()
    seen = []
    for key, _ in it:
        seen.append(key)
        if key == "b":
            it.remove()
            with pytest.raises(IllegalStateError):
                it.remove()
    assert sorted(seen) == ["a", "b", "c"], "KS-MAP-5: sorted(seen): expected ['a', 'b', 'c']"
    assert sorted(state.keys()) == ["a", "c"], "KS-MAP-5: sorted(state.keys()): expected ['a', 'c']"


@pytest.mark.requirement("KS-MAP-2", "KS-MAP-5")
def test_an_iteration_stays_on_the_key_and_namespace_it_was_created_for(backend: Any) -> None:
    state = backend.get_or_create_state(MAP, NS)
    where = [("k1", "n1"), ("k2", "n1"), ("k1", "n2")]
    for i, (key, ns) in enumerate(where):
        backend.set_current_key(key)
        state.set_current_namespace(ns)
        state.put_all({"a": i, "b": i})
    backend.set_current_key("k1")
    state.set_current_namespace("n1")
    items, iterator = state.items(), state.iterator()
    backend.set_current_key("k2")  # the other key and namespace become current before either is consumed
    state.set_current_namespace("n2")
    got = sorted(items)
    assert got == [("a", 0), ("b", 0)], f"KS-MAP-2: items() of k1/n1, consumed while k2/n2 is current, gave {got}"
    first = next(iterator)
    assert first in (("a", 0), ("b", 0)), f"KS-MAP-2: iterator() of k1/n1 returned {first} while k2/n2 is current"
    iterator.remove()
    remaining = {}
    for key, ns in where:
        backend.set_current_key(key)
        state.set_current_namespace(ns)
        remaining[(key, ns)] = sorted(state.keys())
    expected = {("k1", "n1"): sorted({"a", "b"} - {first[0]}), ("k2", "n1"): ["a", "b"], ("k1", "n2"): ["a", "b"]}
    assert remaining == expected, (
        f"KS-MAP-5: remove() of k1/n1's iterator after returning {first}, called while k2/n2 is current: "
        f"expected {expected}, got {remaining}"
    )


@pytest.mark.requirement("KS-RED-1")
def test_reducing_state(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(REDUCING)
    assert state.get() is None, "KS-RED-1: state.get(): expected None"
    for v in (1, 2, 3):
        state.add(v)
    assert state.get() == 6, "KS-RED-1: state.get(): expected 6"


@pytest.mark.requirement("KS-RED-2")
def test_adding_none_to_reducing_state_leaves_its_value_unchanged(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(REDUCING)
    for held, adds in ((None, ()), (6, (1, 2, 3))):
        for v in adds:
            state.add(v)
        try:
            state.add(None)
            outcome = "returned"
        except InvalidStateValueError:
            outcome = "raised InvalidStateValueError"
        got = state.get()
        assert got == held, (
            f"KS-RED-2: add(None) {outcome} on reducing state holding {held!r}: expected the value unchanged, "
            f"got {got!r}"
        )
    state.add(4)
    assert state.get() == 10, f"KS-RED-2: add(4) after add(None) on 6: expected 10, got {state.get()!r}"


@pytest.mark.requirement("KS-AGG-1")
def test_aggregating_state(backend: Any) -> None:
    backend.set_current_key("k")
    state = backend.get_or_create_state(AGGREGATING)
    assert state.get() is None, "KS-AGG-1: state.get(): expected None"
    for v in (2, 4, 9):
        state.add(v)
    assert state.get() == 5, "KS-AGG-1: state.get(): expected 5"


MERGE_CASES = {
    # target, source1, source2 contents before the merge
    "spread": ([1], [2], [3]),
    "one-source-empty": ([1], [], [3]),
    "all-empty": ([], [], []),
    "all-in-target": ([1, 2, 3], [], []),
    "all-in-one-source": ([], [1, 2, 3], []),
}


@pytest.mark.requirement("KS-MERGE-1", "KS-MERGE-2", "KS-MERGE-3")
@pytest.mark.parametrize("case", sorted(MERGE_CASES))
@pytest.mark.parametrize("kind", ["list", "reducing", "aggregating"])
def test_merge_namespaces(backend: Any, case: str, kind: str) -> None:
    descriptor = {
        "list": ListStateDescriptor("ml", element_serializer=LongSerializer()),
        "reducing": REDUCING,
        "aggregating": AGGREGATING,
    }[kind]
    backend.set_current_key("k")
    state = backend.get_or_create_state(descriptor, NS)
    contents = dict(zip(("t", "s1", "s2"), MERGE_CASES[case], strict=False))
    for ns, values in contents.items():
        state.set_current_namespace(ns)
        for v in values:
            state.add(v)
    state.merge_namespaces("t", ["s1", "s2"])
    state.set_current_namespace("t")
    everything = [v for vs in contents.values() for v in vs]
    expected: Any = {
        "list": sorted(everything) or None,
        "reducing": sum(everything) if everything else None,
        "aggregating": sum(everything) / len(everything) if everything else None,
    }[kind]
    got = state.get()
    assert (sorted(got) if kind == "list" and got else got) == expected, (
        f"KS-MERGE-1, KS-MERGE-2, KS-MERGE-3: merge {case}: expected {expected}, got {got}"
    )
    for source in ("s1", "s2"):
        state.set_current_namespace(source)
        assert state.get() is None, (
            f"KS-MERGE-1, KS-MERGE-2, KS-MERGE-3: merge {case}: source {source} still holds a value"
        )
    assert backend.num_state_entries(descriptor.name) == (1 if everything else 0), (
        "KS-MERGE-1, KS-MERGE-2, KS-MERGE-3: backend.num_state_entries(descriptor.name): expected 1 if "
        "everything else 0"
    )


WRITE_TWICE = {
    "value": lambda state: (state.update(1), state.update(2)),
    "list": lambda state: state.add_all(["x", "y"]),
    "map": lambda state: state.put_all({"x": 1, "y": 2}),
    "reducing": lambda state: (state.add(1), state.add(2)),
    "aggregating": lambda state: (state.add(1), state.add(2)),
}


@pytest.mark.requirement("KB-KEYS-1")
@pytest.mark.parametrize("descriptor", [VALUE, LIST, MAP, REDUCING, AGGREGATING], ids=lambda d: d.kind.value)
def test_key_iteration_per_namespace(backend: Any, descriptor: Any) -> None:
    """Two writes (two list elements, two map user keys) per key and namespace: each key once per namespace."""
    state = backend.get_partitioned_state("w1", descriptor, NS)
    for key in ("a", "b", "c"):
        backend.set_current_key(key)
        state.set_current_namespace("w1")
        WRITE_TWICE[descriptor.kind.value](state)
        if key != "c":
            state.set_current_namespace("w2")
            WRITE_TWICE[descriptor.kind.value](state)
    name = descriptor.name
    got = (sorted(backend.get_keys(name, "w1")), sorted(backend.get_keys(name, "w2")))
    assert got == (["a", "b", "c"], ["a", "b"]), (
        f"KB-KEYS-1: get_keys({name!r}, 'w1'), get_keys({name!r}, 'w2') of {descriptor.kind.value} state: expected "
        f"['a', 'b', 'c'], ['a', 'b'], got {got[0]}, {got[1]}"
    )
    pairs = sorted(backend.get_keys_and_namespaces(name))
    expected = [("a", "w1"), ("a", "w2"), ("b", "w1"), ("b", "w2"), ("c", "w1")]
    assert pairs == expected, (
        f"KB-KEYS-1: get_keys_and_namespaces({name!r}) of {descriptor.kind.value} state: expected {expected}, "
        f"got {pairs}"
    )


SEPARATORS = ("", "\x00", "|", ":", "/")


def _running_into_each_other(separator: str, tail: str = "n") -> tuple[tuple[str, str], tuple[str, str]]:
    """Two (key, namespace) pairs in one key group that join into the same text with `separator` between key and
    namespace (plain concatenation for ""): ("a", m + sep + tail) and ("a" + sep + m, tail)."""
    middle = next(f"m{i}" for i in range(10_000) if key_group_of("a") == key_group_of(f"a{separator}m{i}"))
    return ("a", f"{middle}{separator}{tail}"), (f"a{separator}{middle}", tail)


def _read_pair(backend: Any, key: str, namespace: str) -> tuple[Any, Any]:
    backend.set_current_key(key)
    value = backend.get_partitioned_state(namespace, VALUE, NS).value()
    return value, sorted(backend.get_partitioned_state(namespace, MAP, NS).items())


@pytest.mark.requirement("KS-3", "KB-KEYS-1", "KB-RESTORE-1")
def test_keys_and_namespaces_whose_bytes_run_into_each_other_stay_apart(state_backend: Any, storage: Any) -> None:
    """Keys and namespaces are told apart by their bytes as a pair, not by the bytes joined: a backend with a flat
    composite key (key bytes, then namespace bytes, then a map's user key bytes, without lengths or with a
    separator a key may contain, where Flink's RocksDB backend writes lengths when a key could be ambiguous) makes
    one entry of ("a", "m7n0") and ("a" + "m7", "n0"). Every pair here shares its key group; each holds its own
    value and map, alone in `get_keys`, through a snapshot, and after the other is cleared."""
    pairs = [pair for i, sep in enumerate(SEPARATORS) for pair in _running_into_each_other(sep, f"n{i}")]
    expected = {pair: (i, [(f"u{i}", i)]) for i, pair in enumerate(pairs)}
    # map user keys that run into the key: ("a", void, "m7u") and ("am7", void, "u")
    flat = MapStateDescriptor("flat", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())
    (key, _), (longer_key, _) = _running_into_each_other("")
    user_keys = {key: f"{longer_key[len(key) :]}u", longer_key: "u"}
    with keyed_backend(state_backend) as backend:
        for (key, namespace), (value, entries) in expected.items():
            backend.set_current_key(key)
            backend.get_partitioned_state(namespace, VALUE, NS).update(value)
            backend.get_partitioned_state(namespace, MAP, NS).put_all(dict(entries))
        for i, (k, user_key) in enumerate(user_keys.items()):
            backend.set_current_key(k)
            backend.get_or_create_state(flat).put(user_key, i)
        handle = snapshot_now(backend, location_for(storage))
        backends = {"as written": backend}
        with keyed_backend(state_backend, restore=[handle]) as restored:
            backends["restored"] = restored
            for when, b in backends.items():
                got = {pair: _read_pair(b, *pair) for pair in pairs}
                wrong = {pair: (expected[pair], got[pair]) for pair in pairs if got[pair] != expected[pair]}
                assert not wrong, f"KS-3: {when}, (key, namespace): (expected, got) {list(wrong.items())[:3]}"
                for key, namespace in pairs:
                    listed = sorted(b.get_keys("v", namespace))
                    assert listed == [key], (
                        f"KB-KEYS-1: {when}, get_keys('v', {namespace!r}): expected {[key]}, got {listed}"
                    )
                flat_state = b.get_or_create_state(flat)
                for i, (k, user_key) in enumerate(user_keys.items()):
                    b.set_current_key(k)
                    got_items = sorted(flat_state.items())
                    assert got_items == [(user_key, i)], (
                        f"KS-3: {when}, key {k!r}: map items expected {[(user_key, i)]}, got {got_items}"
                    )
            (key, namespace), (other_key, other_namespace) = pairs[:2]
            restored.set_current_key(key)
            restored.get_partitioned_state(namespace, VALUE, NS).clear()
            restored.get_partitioned_state(namespace, MAP, NS).clear()
            left = _read_pair(restored, other_key, other_namespace)
            assert left == expected[(other_key, other_namespace)], (
                f"KS-3: clear() of ({key!r}, {namespace!r}) changed ({other_key!r}, {other_namespace!r}): "
                f"expected {expected[(other_key, other_namespace)]}, got {left}"
            )
