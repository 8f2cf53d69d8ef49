"""Restoring at other parallelisms: keyed state by key group, operator state by mode (KB-RESTORE-2, OS-1..3)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.capabilities import declared, supports
from statecert.conformance.helpers import (
    create_subtasks,
    key_group_of,
    keyed_backend,
    location_for,
    owner_of,
    snapshot_now,
)
from statecert.reference.checkpointing import take_snapshot
from statecert.reference.serializers import (
    ByteSerializer,
    IntSerializer,
    JavaBooleanSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    ShortSerializer,
    StringSerializer,
)
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.spec.errors import StateMigrationError
from statecert.spec.handles import CANONICAL_FORMAT, KeyGroupsStateHandle
from statecert.spec.metadata import CheckpointKind
from statecert.spec.state import VOID_NAMESPACE, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

KEYS = StringSerializer()
VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
LIST = ListStateDescriptor("l", element_serializer=LongSerializer())
SPLIT = ListStateDescriptor("split", element_serializer=LongSerializer())
UNION = ListStateDescriptor("union", element_serializer=LongSerializer())
BROADCAST = MapStateDescriptor("rules", user_key_serializer=StringSerializer(), user_value_serializer=LongSerializer())


def write_checkpoint(
    state_backend: Any,
    storage: Any,
    parallelism: int,
    keys: list[str],
    max_parallelism: int = 128,
    kind: CheckpointKind = CheckpointKind.CHECKPOINT,
) -> Any:
    """Each key k_i gets value i, and list [i, i+1] when i is a multiple of 3, in the subtask owning it (so a
    subtask's snapshot may hold the list state or not, as a state registered in only some subtasks: a restore takes
    the states of every handle, not those of the first); each subtask i holds split elements [100i, 100i+1, -1],
    union elements [i, -1] (-1 in every subtask: equal elements of two subtasks are two elements, not one) and the
    broadcast map {"r": 7}. Returns the loaded operator state."""
    subtasks = create_subtasks(state_backend, KEYS, parallelism, max_parallelism)
    for key, (value, elements) in written(keys).items():
        keyed = owner_of(subtasks, key, max_parallelism)
        keyed.get_or_create_state(VALUE).update(value)
        if elements is not None:
            keyed.get_or_create_state(LIST).add_all(elements)
    for s in subtasks if supports(declared(state_backend), "operator_state") else ():
        s.operator.get_list_state(SPLIT).add_all([100 * s.index, 100 * s.index + 1, -1])
        s.operator.get_union_list_state(UNION).add_all([s.index, -1])
        s.operator.get_broadcast_state(BROADCAST).put("r", 7)
    access = storage.create_checkpoint_storage("job")
    location = (
        access.initialize_location_for_savepoint(1)
        if kind.is_savepoint
        else access.initialize_location_for_checkpoint(1)
    )
    pointer = take_snapshot(subtasks, location, 1, max_parallelism, kind=kind)
    for s in subtasks:
        s.dispose()
    return storage.load_checkpoint(pointer).operator("op")


def written(keys: list[str]) -> dict[str, tuple[int, list[int] | None]]:
    """What `write_checkpoint` writes per key: (value, list or None)."""
    return {k: (i, [i, i + 1] if i % 3 == 0 else None) for i, k in enumerate(keys)}


def read_back(state_backend: Any, operator: Any, parallelism: int, max_parallelism: int = 128) -> dict[str, Any]:
    out: dict[str, Any] = {"keyed": {}, "split": [], "union": [], "broadcast": []}
    for s in create_subtasks(state_backend, KEYS, parallelism, max_parallelism, restore_from=operator):
        value, lst = s.keyed.get_or_create_state(VALUE), s.keyed.get_or_create_state(LIST)
        for key in list(s.keyed.get_keys("v", VOID_NAMESPACE)):
            assert key not in out["keyed"], (
                f"KB-RESTORE-2: restore at parallelism {parallelism}: expected key {key} in one subtask, got it in two"
            )
            s.keyed.set_current_key(key)
            out["keyed"][key] = (value.value(), lst.get())
        if supports(declared(state_backend), "operator_state"):
            out["split"].append(s.operator.get_list_state(SPLIT).get())
            out["union"].append(sorted(s.operator.get_union_list_state(UNION).get()))
            out["broadcast"].append(sorted(s.operator.get_broadcast_state(BROADCAST).items()))  # any order (OS-3)
        s.dispose()
    return out


KEY_LIST = [f"key-{i}" for i in range(600)]


def _rescaled(
    state_backend: Any, storage: Any, old: int, new: int, keys: list[str], max_parallelism: int = 128
) -> tuple[list[str], dict[str, Any]]:
    """`keys` written at parallelism `old` and read back at `new`: the keys missing, and those read back wrong as
    (expected, got)."""
    operator = write_checkpoint(state_backend, storage, old, keys, max_parallelism)
    got = read_back(state_backend, operator, new, max_parallelism)["keyed"]
    expected = written(keys)
    missing = sorted(set(expected) - set(got))
    return missing, {k: (expected[k], got[k]) for k in got if got.get(k) != expected.get(k)}


@pytest.mark.requirement("KB-RESTORE-2", "KB-RESTORE-1")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize(("old", "new"), [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)])
def test_rescale_keeps_every_key(state_backend: Any, storage: Any, old: int, new: int) -> None:
    missing, wrong = _rescaled(state_backend, storage, old, new, KEY_LIST)
    assert not missing and not wrong, (
        f"KB-RESTORE-2, KB-RESTORE-1: {old}->{new}: missing {missing[:5]}, wrong (expected, got) "
        f"{list(wrong.items())[:5]}"
    )


@pytest.mark.requirement("KB-RESTORE-2", "KG-2", "KG-4")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize(("max_parallelism", "old", "new"), [(1, 1, 1), (7, 3, 5), (1000, 4, 7), (32768, 3, 2)])
def test_rescale_keeps_every_key_at_any_max_parallelism(
    state_backend: Any, storage: Any, max_parallelism: int, old: int, new: int
) -> None:
    """KG-4 allows any max parallelism in 1..32768, not only the powers of two Flink's default picks (KG-5): keys
    land in `murmur % max parallelism` (KG-2), a modulo that a bit mask equals only for powers of two, and Flink's
    largest max parallelism needs key groups up to 32767."""
    missing, wrong = _rescaled(state_backend, storage, old, new, KEY_LIST[:200], max_parallelism)
    assert not missing and not wrong, (
        f"KB-RESTORE-2: {old}->{new} at max parallelism {max_parallelism}: missing {missing[:5]}, "
        f"wrong (expected, got) {list(wrong.items())[:5]}"
    )


@pytest.mark.requirement("KB-RESTORE-2")
@pytest.mark.capability("rescaling")
@given(
    st.integers(1, 12),
    st.integers(1, 12),
    st.sampled_from([8, 128]),
    st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=40),
)
def test_restore_at_any_parallelism(
    tmp_path_factory: Any, certification: Any, old: int, new: int, max_parallelism: int, keys: list[str]
) -> None:
    """KB-RESTORE-2 over generated parallelisms, max parallelisms and keys."""
    old, new = min(old, max_parallelism), min(new, max_parallelism)
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("rescale")))
    backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    operator = write_checkpoint(backend, storage, old, keys, max_parallelism)
    got = read_back(backend, operator, new, max_parallelism)["keyed"]
    assert got == written(keys), (
        f"KB-RESTORE-2: {old}->{new} at max parallelism {max_parallelism}: expected {written(keys)}, got {got}"
    )


@pytest.mark.requirement("KB-RESTORE-1", "KB-RESTORE-2")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize("order", ["without it first", "with it first"])
def test_a_state_of_only_one_old_subtask_survives_a_merging_restore(
    tmp_path_factory: Any, certification: Any, order: str
) -> None:
    """Two subtasks hold state "v"; only the second also registered "only-here" (its keys alone needed it). Their
    handles restored together at parallelism 1, in either order, give both states whole: a restore that takes the
    states described by the first handle it reads loses "only-here"."""
    only_here = MapStateDescriptor("only-here", user_key_serializer=KEYS, user_value_serializer=LongSerializer())
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("merge")))
    factory = certification.new_backend(tmp_path_factory.mktemp("local"))
    handles, expected = [], {}
    for index in (0, 1):
        with keyed_backend(factory, parallelism=2, index=index) as backend:
            owned = [k for k in KEY_LIST if key_group_of(k) in backend.key_group_range][:20]
            for i, key in enumerate(owned):
                backend.set_current_key(key)
                backend.get_or_create_state(VALUE).update(i)
                expected[key] = (i, {"u": i} if index == 1 else {})
                if index == 1:
                    backend.get_or_create_state(only_here).put("u", i)
            handles.append(snapshot_now(backend, location_for(storage)))  # both subtasks of checkpoint 1
    restore = handles[::-1] if order == "with it first" else handles
    with keyed_backend(factory, restore=restore) as merged:
        got = {}
        for key in expected:
            merged.set_current_key(key)
            got[key] = (merged.get_or_create_state(VALUE).value(), dict(merged.get_or_create_state(only_here).items()))
    wrong = {k: (expected[k], got[k]) for k in expected if got[k] != expected[k]}
    assert not wrong, f"KB-RESTORE-2: two subtasks' handles restored at parallelism 1, {order}: (expected, got) {wrong}"


JAVA_KEYED = {
    "int": (IntSerializer(), st.integers(-(2**31), 2**31 - 1)),
    "short": (ShortSerializer(), st.integers(-(2**15), 2**15 - 1)),
    "byte": (ByteSerializer(), st.integers(-128, 127)),
    "long": (LongSerializer(), st.integers(-(2**63), 2**63 - 1)),
    "java-double": (JavaDoubleSerializer(), st.floats(allow_nan=False)),
    "java-bool": (JavaBooleanSerializer(), st.booleans()),
}


@pytest.mark.requirement("KB-RESTORE-2", "KG-1")
@pytest.mark.capability("rescaling")
@pytest.mark.parametrize("key_type", sorted(JAVA_KEYED))
@given(data=st.data(), old=st.integers(1, 5), new=st.integers(1, 5))
def test_keys_of_every_java_key_type_rescale_to_their_key_groups(
    state_backend: Any, storage: Any, key_type: str, data: st.DataObject, old: int, new: int
) -> None:
    """Keys hashed like Flink's INT, SHORT, BYTE, LONG, DOUBLE and BOOLEAN keys (negative ones too) are found, after
    a rescaled restore, in the subtask owning their key group by the key serializer's hash."""
    serializer, values = JAVA_KEYED[key_type]
    keys = data.draw(st.lists(values, min_size=1, max_size=30, unique_by=serializer.serialize))
    subtasks = create_subtasks(state_backend, serializer, old, 128)
    for i, key in enumerate(keys):
        owner_of(subtasks, key, 128, serializer).get_or_create_state(VALUE).update(i)
    job = f"job-{uuid.uuid4().hex}"  # the storage outlives hypothesis' examples: one job each
    location = storage.create_checkpoint_storage(job).initialize_location_for_checkpoint(1)
    pointer = take_snapshot(subtasks, location, 1, 128)
    for s in subtasks:
        s.dispose()
    restored = create_subtasks(
        state_backend, serializer, new, 128, restore_from=storage.load_checkpoint(pointer).operator("op")
    )
    try:
        for i, key in enumerate(keys):
            got = owner_of(restored, key, 128, serializer).get_or_create_state(VALUE).value()
            assert got == i, (
                f"KB-RESTORE-2: {key_type} key {key!r} after rescaling {old} -> {new}: expected {i}, got {got}"
            )
    finally:
        for s in restored:
            s.dispose()


@pytest.mark.requirement("KB-RESTORE-4")
def test_changed_max_parallelism_is_refused(state_backend: Any, storage: Any) -> None:
    operator = write_checkpoint(state_backend, storage, 2, KEY_LIST[:10])
    with pytest.raises(StateMigrationError):
        create_subtasks(state_backend, KEYS, 2, 256, restore_from=operator)


@pytest.mark.requirement("OS-1")
@pytest.mark.capability("operator_state", "rescaling")
@pytest.mark.parametrize(("old", "new"), [(3, 2), (2, 5), (4, 4), (5, 1)])
def test_split_list_elements_go_to_exactly_one_subtask(state_backend: Any, storage: Any, old: int, new: int) -> None:
    shares = read_back(state_backend, write_checkpoint(state_backend, storage, old, []), new)["split"]
    elements = [e for share in shares for e in share]
    expected = Counter(e for i in range(old) for e in (100 * i, 100 * i + 1, -1))
    assert Counter(elements) == expected, (
        f"OS-1: {old}->{new}: expected the elements {expected}, got the shares {shares}"
    )
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1, f"OS-1: uneven split {sizes}"


@pytest.mark.requirement("OS-2")
@pytest.mark.capability("operator_state")
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (3, 3),
        pytest.param(3, 2, marks=pytest.mark.capability("rescaling")),
        pytest.param(2, 5, marks=pytest.mark.capability("rescaling")),
    ],
)
def test_union_list_goes_to_every_subtask(state_backend: Any, storage: Any, old: int, new: int) -> None:
    unions = read_back(state_backend, write_checkpoint(state_backend, storage, old, []), new)["union"]
    expected = sorted([*range(old), *[-1] * old])
    assert unions == [expected] * new, f"OS-2: {old}->{new}: expected {expected} in every subtask, got {unions}"


def _union_checkpoint(state_backend: Any, storage: Any, unions: list[list[int]], splits: list[list[int]]) -> Any:
    """A checkpoint of one subtask per entry of `unions`, subtask i holding union elements `unions[i]` and split
    elements `splits[i]`; the loaded operator state."""
    subtasks = create_subtasks(state_backend, KEYS, len(unions), 128)
    for s, union, split in zip(subtasks, unions, splits, strict=True):
        s.operator.get_union_list_state(UNION).add_all(union)
        s.operator.get_list_state(SPLIT).add_all(split)
    pointer = take_snapshot(subtasks, location_for(storage), 1, 128)
    for s in subtasks:
        s.dispose()
    return storage.load_checkpoint(pointer).operator("op")


PER_SUBTASK = st.lists(st.integers(-3, 3), max_size=4)  # few values: equal elements across subtasks are common


@pytest.mark.requirement("OS-2", "OS-7")
@pytest.mark.capability("operator_state")
@pytest.mark.parametrize(
    "change",
    [
        "same",
        pytest.param("higher", marks=pytest.mark.capability("rescaling")),
        pytest.param("lower", marks=pytest.mark.capability("rescaling")),
    ],
)
@given(data=st.data())
def test_union_list_reaches_every_subtask_on_every_restore(
    tmp_path_factory: Any, certification: Any, change: str, data: st.DataObject
) -> None:
    """Generated per-subtask union elements (beside split elements) restored at the same, a higher and a lower
    parallelism: every new subtask reads every old subtask's union elements, a restart from a checkpoint at unchanged
    parallelism included (OS-2), and at unchanged parallelism each subtask keeps its own split elements (OS-7)."""
    old = data.draw(st.integers(2 if change == "lower" else 1, 4), label="old parallelism")
    new = {"same": old, "higher": old + data.draw(st.integers(1, 3), label="added"), "lower": old - 1}[change]
    unions = data.draw(st.lists(PER_SUBTASK, min_size=old, max_size=old), label="union elements per subtask")
    splits = data.draw(st.lists(PER_SUBTASK, min_size=old, max_size=old), label="split elements per subtask")
    storage = FileSystemCheckpointStorage(str(tmp_path_factory.mktemp("union")))
    backend = certification.new_backend(tmp_path_factory.mktemp("local"))
    restored = read_back(backend, _union_checkpoint(backend, storage, unions, splits), new)
    expected = sorted(e for union in unions for e in union)
    assert restored["union"] == [expected] * new, (
        f"OS-2: union list state of {old} subtasks {unions} restored at parallelism {new}: expected every subtask "
        f"to read {expected}, got {restored['union']}"
    )
    if change == "same":
        assert restored["split"] == splits, (
            f"OS-7: split list state {splits} restored at the same parallelism {old}: expected each subtask's own "
            f"elements in order, got {restored['split']}"
        )


@pytest.mark.requirement("OS-3")
@pytest.mark.capability("operator_state", "rescaling")
@pytest.mark.parametrize(("old", "new"), [(3, 2), (2, 5), (2, 2)])
def test_broadcast_state_is_whole_in_every_subtask(state_backend: Any, storage: Any, old: int, new: int) -> None:
    maps = read_back(state_backend, write_checkpoint(state_backend, storage, old, []), new)["broadcast"]
    assert maps == [[("r", 7)]] * new, "OS-3: maps: expected [[('r', 7)]] * new"


@pytest.mark.requirement("SP-1", "SP-2", "IF-7")
@pytest.mark.capability("canonical_savepoints", "rescaling")
@pytest.mark.parametrize("direction", ["ours-into-reference", "reference-into-ours"])
def test_canonical_savepoint_restores_across_backends(
    state_backend: Any, reference_backend: Any, storage: Any, direction: str
) -> None:
    """A canonical savepoint of 100 keys at parallelism 3 restores at parallelism 5 in the other backend. The
    backend under test labels its canonical streams `canonical` (IF-7): a backend labelling them as its own native
    format, and reading that label back as canonical itself, makes savepoints no other backend restores."""
    writer, reader = (
        (state_backend, reference_backend) if direction == "ours-into-reference" else (reference_backend, state_backend)
    )
    operator = write_checkpoint(writer, storage, 3, KEY_LIST[:100], kind=CheckpointKind.SAVEPOINT_CANONICAL)
    if direction == "ours-into-reference":
        labels = sorted(
            {
                f"{type(h).__name__} ({getattr(h, 'snapshot_format', '-')})"
                for subtask in operator.subtask_states.values()
                for h in subtask.managed_keyed_state
                if not (isinstance(h, KeyGroupsStateHandle) and h.snapshot_format == CANONICAL_FORMAT)
            }
        )
        assert not labels, (
            f"IF-7: the keyed handles of a canonical savepoint: expected KeyGroupsStateHandle with snapshot_format "
            f"{CANONICAL_FORMAT!r}, got {labels}"
        )
    got = read_back(reader, operator, 5)["keyed"]
    assert got == written(KEY_LIST[:100]), f"SP-1, SP-2, IF-7: {direction}: state differs"
