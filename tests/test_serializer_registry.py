"""The spec's serializer registry (SER-4): what a backend written from the spec alone restores old serializers with."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference import serializers as builtin
from statecert.spec.errors import StateMigrationError
from statecert.spec.serializer_registry import ENTRY_POINT_GROUP, register_serializer, restore_serializer
from statecert.spec.serializers import SerializerSnapshot

BUILTINS: list[Any] = [
    builtin.StringSerializer(),
    builtin.LongSerializer(),
    builtin.IntSerializer(),
    builtin.ShortSerializer(),
    builtin.ByteSerializer(),
    builtin.DoubleSerializer(),
    builtin.BooleanSerializer(),
    builtin.JavaDoubleSerializer(),
    builtin.JavaBooleanSerializer(),
    builtin.BytesSerializer(),
    builtin.VoidNamespaceSerializer(),
    builtin.MsgpackSerializer(),
    builtin.TupleSerializer(builtin.StringSerializer(), builtin.EnumSerializer(["x", "y"])),
    builtin.EnumSerializer(["a", "b", "c"]),
    builtin.RecordSerializer([("total", builtin.LongSerializer(), 0), ("name", builtin.StringSerializer(), "")]),
]

# Run in a fresh interpreter: only the spec is imported, as in a backend that never imports statecert.reference.
SPEC_ONLY_PROCESS = """
import json, sys
from statecert.spec.serializer_registry import restore_serializer
from statecert.spec.serializers import SerializerSnapshot
assert not any(m.startswith("statecert.reference") for m in sys.modules), "the spec imported the reference"
out = []
for plain in json.load(sys.stdin):
    restored = restore_serializer(SerializerSnapshot.from_plain(plain))
    out.append(restored.snapshot_configuration().to_plain())
json.dump(out, sys.stdout)
"""


def builtin_ids() -> set[str]:
    """Ids of the serializers `statecert.reference.serializers` defines."""
    ids = set()
    pending = [builtin.BaseSerializer]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__ == builtin.__name__ and "serializer_id" in cls.__dict__:
            ids.add(cls.serializer_id)
    return ids


@pytest.mark.requirement("SER-4")
def test_every_builtin_serializer_is_offered_through_the_entry_point_group() -> None:
    offered = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    missing = builtin_ids() - offered
    assert not missing, f"built-in serializers without an entry point in {ENTRY_POINT_GROUP!r}: {sorted(missing)}"
    assert {s.serializer_id for s in BUILTINS} == builtin_ids(), "BUILTINS must hold one of each built-in serializer"


@pytest.mark.requirement("SER-2", "SER-4")
def test_a_process_that_imports_only_the_spec_restores_every_builtin_serializer() -> None:
    plain = [s.snapshot_configuration().to_plain() for s in BUILTINS]
    done = subprocess.run(
        [sys.executable, "-c", SPEC_ONLY_PROCESS], input=json.dumps(plain), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == plain, "restore_serializer(snapshot).snapshot_configuration() != snapshot"


@pytest.mark.requirement("SER-4")
def test_a_registered_restore_function_is_used_and_a_rejected_configuration_is_a_migration_error() -> None:
    def from_snapshot(snapshot: SerializerSnapshot) -> Any:
        return builtin.EnumSerializer(list(snapshot.config["symbols"]))

    register_serializer("statecert-tests-symbols", from_snapshot)
    restored = restore_serializer(SerializerSnapshot("statecert-tests-symbols", 1, {"symbols": ["p", "q"]}))
    assert restored.deserialize(restored.serialize("q")) == "q"
    with pytest.raises(StateMigrationError, match="statecert-tests-symbols"):
        restore_serializer(SerializerSnapshot("statecert-tests-symbols", 1, {"other": 1}))


@pytest.mark.requirement("SER-4")
def test_serializers_nested_past_the_recursion_limit_are_a_migration_error() -> None:
    """A hostile snapshot may nest `tuple` serializers 340 deep (1,020 containers, within the 1,024 msgpack reads):
    restoring it is a StateMigrationError, not a RecursionError out of the backend's restore."""
    level = b"\x83" + b"".join(msgpack.packb(x) for x in ("id", "tuple", "version", 1, "config", {"fields": []}))
    prefix = level[: -len(b"\x90")] + b"\x91"  # the fields: an array of one, the next level
    plain = msgpack.unpackb(prefix * 340 + msgpack.packb({"id": "long", "version": 1, "config": {}}))
    with pytest.raises(StateMigrationError, match="nests serializers too deeply"):
        restore_serializer(SerializerSnapshot.from_plain(plain))


@pytest.mark.requirement("SER-4", "FMT-8")
@given(
    serializer_id=st.sampled_from(["tuple", "enum", "record"]),
    config=st.recursive(
        st.none() | st.integers() | st.text(max_size=3) | st.binary(max_size=3),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["fields", "values", "name"]), inner)
        ),
        max_leaves=8,
    ),
)
def test_a_configuration_of_any_shape_restores_or_is_a_migration_error(serializer_id: str, config: Any) -> None:
    """A forged snapshot gives a serializer a configuration of the wrong shape (a field that is a number where a
    snapshot is expected...): restoring it gives a serializer or a StateMigrationError, never an AttributeError or
    another exception out of the factory."""
    try:
        restore_serializer(SerializerSnapshot(serializer_id, 1, config))
    except StateMigrationError:
        pass
    except Exception as exc:
        pytest.fail(
            f"SER-4: restore_serializer({serializer_id!r}, config {config!r}): expected a serializer or "
            f"StateMigrationError, got {exc!r}"
        )


@pytest.mark.requirement("SER-4", "FMT-8")
@given(snapshot=st.one_of(st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2)))
def test_a_serializer_snapshot_that_is_not_a_map_is_a_value_error(snapshot: object) -> None:
    """`SerializerSnapshot.from_plain` of anything but a map (a forged snapshot: None, a number, a list) raises
    ValueError, which every reader turns into its documented error, never AttributeError."""
    try:
        SerializerSnapshot.from_plain(snapshot)  # type: ignore[arg-type]
    except ValueError:
        return
    raise AssertionError(f"SER-4: SerializerSnapshot.from_plain({snapshot!r}): expected ValueError, got a snapshot")
