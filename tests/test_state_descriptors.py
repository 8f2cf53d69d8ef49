"""The spec's state descriptors refuse names KS-2 does not allow, and its TTL configuration durations TTL-1 does not,
when they are made, so no backend meets one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.serializers import LongSerializer
from statecert.spec.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    TtlConfig,
    ValueStateDescriptor,
    check_state_name,
)

DESCRIPTORS: list[type[StateDescriptor]] = [
    ValueStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    AggregatingStateDescriptor,
]


@pytest.mark.parametrize("descriptor", DESCRIPTORS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", ["a\x00b", "\x00", "a\ud800b", "\udfff", "ok\udbff"])
def test_a_descriptor_refuses_a_name_with_nul_or_a_lone_surrogate(descriptor: type[StateDescriptor], name: str) -> None:
    with pytest.raises(ValueError, match="KS-2") as raised:
        descriptor(name)
    assert repr(name) in str(raised.value), f"{descriptor.__name__}({name!r}): the message names it: {raised.value}"


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00")))
def test_every_other_text_is_a_name(name: str) -> None:
    descriptor = ValueStateDescriptor(name, serializer=LongSerializer())
    assert descriptor.name == name, f"ValueStateDescriptor({name!r}).name: expected {name!r}, got {descriptor.name!r}"


@given(st.text(alphabet=st.characters(codec=None, categories=["Cs"]), min_size=1), st.text(), st.text())
def test_a_lone_surrogate_anywhere_is_refused(surrogates: str, before: str, after: str) -> None:
    with pytest.raises(ValueError, match="KS-2"):
        check_state_name(before + surrogates + after)


def test_a_name_is_text() -> None:
    with pytest.raises(TypeError, match="KS-2"):
        ValueStateDescriptor(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl_ms", [0, -1, 2**63, 2**64])
def test_a_ttl_outside_java_long_milliseconds_is_refused(ttl_ms: int) -> None:
    with pytest.raises(ValueError, match="TTL-1"):
        TtlConfig(ttl_ms)


@pytest.mark.parametrize("ttl_ms", [1, 2**62, 2**63 - 1])
def test_a_ttl_up_to_long_max_is_a_ttl(ttl_ms: int) -> None:
    assert TtlConfig(ttl_ms).ttl_ms == ttl_ms, f"TtlConfig({ttl_ms}).ttl_ms"
