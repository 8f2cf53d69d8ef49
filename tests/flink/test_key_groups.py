"""KG-1, KG-2, KG-5, KG-6, KG-7 asked of Flink's `KeyGroupRangeAssignment` in a JVM: the key group of generated keys
of every key type statecert hashes like Java, each operator's key-group range and each key group's owner for
generated max parallelisms and parallelisms, the default max parallelism. Any difference is a statecert bug."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecert.reference.serializers import (
    ByteSerializer,
    IntSerializer,
    JavaBooleanSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    ShortSerializer,
    StringSerializer,
)
from statecert.spec.keygroups import (
    assign_to_key_group,
    compute_default_max_parallelism,
    key_group_range_for_operator,
    operator_index_for_key_group,
)
from tests.flink.referee import Referee, hex_text

pytestmark = pytest.mark.flink

max_parallelisms = st.one_of(st.integers(1, 32768), st.sampled_from([1, 128, 256, 4096, 32768]))
KEYS = {
    "string": (StringSerializer(), st.text(max_size=40)),
    "long": (LongSerializer(), st.integers(-(2**63), 2**63 - 1)),
    "int": (IntSerializer(), st.integers(-(2**31), 2**31 - 1)),
    "short": (ShortSerializer(), st.integers(-(2**15), 2**15 - 1)),
    "byte": (ByteSerializer(), st.integers(-(2**7), 2**7 - 1)),
    "double": (JavaDoubleSerializer(), st.floats(allow_nan=True, allow_infinity=True)),
    "boolean": (JavaBooleanSerializer(), st.booleans()),
}


def _word(key_type: str, key: object) -> str:
    """A key as the referee reads it: strings as hex, doubles as their raw bits, the rest as Java prints them."""
    if key_type == "string":
        return hex_text(str(key))
    if key_type == "double":
        return str(struct.unpack(">q", struct.pack(">d", key))[0])
    return str(key).lower()


@pytest.mark.requirement("KG-1", "KG-2")
@pytest.mark.parametrize("key_type", sorted(KEYS))
@settings(max_examples=200, deadline=None)
@given(data=st.data(), max_parallelism=max_parallelisms)
def test_a_keys_key_group_is_the_one_flink_assigns(
    flink: Referee, key_type: str, data: st.DataObject, max_parallelism: int
) -> None:
    serializer, strategy = KEYS[key_type]
    keys = data.draw(st.lists(strategy, min_size=1, max_size=50))
    ours = [assign_to_key_group(serializer.key_hash(k), max_parallelism) for k in keys]
    words = [_word(key_type, k) for k in keys]
    theirs = [int(g) for g in flink.ask("kg", key_type, max_parallelism, *words)]
    differing = [(k, o, t) for k, o, t in zip(keys, ours, theirs, strict=True) if o != t]
    assert not differing, (
        f"KG-2: assign_to_key_group({type(serializer).__name__}.key_hash(key), {max_parallelism}): expected Flink's "
        f"KeyGroupRangeAssignment.assignToKeyGroup for a {key_type} key, got (key, statecert, Flink) {differing[:5]}"
    )


@pytest.mark.requirement("KG-6", "KG-7")
@settings(max_examples=300, deadline=None)
@given(data=st.data(), max_parallelism=max_parallelisms)
def test_each_operators_key_group_range_and_each_key_groups_owner_are_flinks(
    flink: Referee, data: st.DataObject, max_parallelism: int
) -> None:
    parallelism = data.draw(st.integers(1, min(max_parallelism, 512)) | st.just(max_parallelism))
    ours = [key_group_range_for_operator(max_parallelism, parallelism, i) for i in range(parallelism)]
    bounds = [int(b) for b in flink.ask("ranges", max_parallelism, parallelism)]
    theirs = list(zip(bounds[::2], bounds[1::2], strict=True))
    assert [(r.start, r.end) for r in ours] == theirs, (
        f"KG-7: key_group_range_for_operator({max_parallelism}, {parallelism}, i) for every i: expected Flink's "
        f"computeKeyGroupRangeForOperatorIndex {theirs[:8]}..., got {[(r.start, r.end) for r in ours][:8]}..."
    )
    owners = [operator_index_for_key_group(max_parallelism, parallelism, g) for g in range(max_parallelism)]
    flink_owners = [int(i) for i in flink.ask("owners", max_parallelism, parallelism)]
    assert owners == flink_owners, (
        f"KG-6: operator_index_for_key_group({max_parallelism}, {parallelism}, g) for every g: expected Flink's "
        "computeOperatorIndexForKeyGroup, got a different owner for key groups "
        f"{[g for g, (o, t) in enumerate(zip(owners, flink_owners, strict=True)) if o != t][:10]}"
    )


@pytest.mark.requirement("KG-5")
@settings(max_examples=300, deadline=None)
@given(parallelism=st.integers(1, 32768) | st.integers(-5, 0) | st.integers(32769, 2**31 - 1))
def test_the_default_max_parallelism_is_flinks_and_so_is_what_it_refuses(flink: Referee, parallelism: int) -> None:
    theirs = flink.ask("defaultmax", parallelism)
    try:
        ours = [str(compute_default_max_parallelism(parallelism))]
    except ValueError:
        ours = ["error", "java.lang.IllegalArgumentException"]
    assert ours == theirs, (
        f"KG-5: compute_default_max_parallelism({parallelism}): expected Flink's computeDefaultMaxParallelism "
        f"{theirs}, got {ours}"
    )
