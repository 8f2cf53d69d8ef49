"""Key groups (chapter KG) against independent ports of Flink's formulas."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.serializers import (
    ByteSerializer,
    IntSerializer,
    JavaBooleanSerializer,
    JavaDoubleSerializer,
    LongSerializer,
    MsgpackSerializer,
    ShortSerializer,
    StringSerializer,
)
from statecert.spec.keygroups import (
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    check_parallelism,
    compute_default_max_parallelism,
    flink_murmur_hash,
    key_group_range_for_operator,
    operator_index_for_key_group,
)

M32 = 0xFFFFFFFF
INT32 = st.integers(-(2**31), 2**31 - 1)
MAX_PARALLELISM = st.integers(1, 32768)


def _int32(x: int) -> int:
    x &= M32
    return x - 2**32 if x >= 2**31 else x


def java_murmur_hash(code: int) -> int:
    """Flink's MathUtils.murmurHash, transcribed line by line from the Java source (the oracle)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & M32

    code &= M32
    code = (code * 0xCC9E2D51) & M32
    code = rotl(code, 15)
    code = (code * 0x1B873593) & M32
    code = rotl(code, 13)
    code = (code * 5 + 0xE6546B64) & M32
    code ^= 4
    code ^= code >> 16
    code = (code * 0x85EBCA6B) & M32
    code ^= code >> 13
    code = (code * 0xC2B2AE35) & M32
    code ^= code >> 16
    signed = _int32(code)
    if signed >= 0:
        return signed
    return -signed if signed != -(2**31) else 0


def java_string_hash(s: str) -> int:
    """Java's String.hashCode as the power sum s[0]*31^(n-1) + ... over UTF-16 code units."""
    units = [
        int.from_bytes(s.encode("utf-16-be", "surrogatepass")[i : i + 2], "big")
        for i in range(0, len(s.encode("utf-16-be", "surrogatepass")), 2)
    ]
    n = len(units)
    return _int32(sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)))


@pytest.mark.requirement("KG-2")
@given(INT32)
def test_murmur_hash_matches_flinks_math_utils(code: int) -> None:
    assert flink_murmur_hash(code) == java_murmur_hash(code), f"flink_murmur_hash({code})"


@pytest.mark.requirement("KG-2")
def test_murmur_hash_of_int_min_is_zero_or_non_negative() -> None:
    for code in (-(2**31), -1, 0, 1, 2**31 - 1):
        assert flink_murmur_hash(code) >= 0, f"flink_murmur_hash({code}) = {flink_murmur_hash(code)}"


@pytest.mark.requirement("KG-1")
@given(st.text())
def test_string_key_hash_is_javas_string_hash_code(s: str) -> None:
    assert StringSerializer().key_hash(s) == java_string_hash(s), f"StringSerializer().key_hash({s!r})"


@pytest.mark.requirement("KG-1")
@given(st.integers(-(2**63), 2**63 - 1))
def test_long_key_hash_is_javas_long_hash_code(v: int) -> None:
    expected = _int32((v & 0xFFFFFFFFFFFFFFFF) ^ ((v & 0xFFFFFFFFFFFFFFFF) >> 32))
    assert LongSerializer().key_hash(v) == expected, f"LongSerializer().key_hash({v})"


@pytest.mark.requirement("KG-1")
@pytest.mark.parametrize(
    ("serializer", "bits"), [(IntSerializer(), 32), (ShortSerializer(), 16), (ByteSerializer(), 8)]
)
@given(data=st.data())
def test_java_integer_types_hash_to_their_value(serializer: Any, bits: int, data: st.DataObject) -> None:
    """Java's Integer/Short/Byte.hashCode is the value: Flink jobs keyed by Types.INT put -5 elsewhere than
    Types.LONG does (Long.hashCode(-5) == 4)."""
    v = data.draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
    assert serializer.key_hash(v) == v, f"{type(serializer).__name__}().key_hash({v})"
    assert serializer.deserialize(serializer.serialize(v)) == v
    with pytest.raises(ValueError, match="does not fit"):
        serializer.key_hash(2 ** (bits - 1))


@pytest.mark.requirement("KG-1")
def test_int_and_long_keys_land_in_different_key_groups_as_in_flink() -> None:
    assert LongSerializer().key_hash(-5) == 4 and IntSerializer().key_hash(-5) == -5
    groups = {s.key_hash(-5) for s in (LongSerializer(), IntSerializer())}
    assert len({assign_to_key_group(h, 128) for h in groups}) == 2


@pytest.mark.requirement("KG-1")
@given(st.floats(allow_nan=True) | st.sampled_from([0.0, -0.0, float("inf"), float("nan")]))
def test_java_double_hash_is_javas_double_hash_code(v: float) -> None:
    bits = 0x7FF8000000000000 if v != v else struct.unpack(">Q", struct.pack(">d", v))[0]
    assert JavaDoubleSerializer().key_hash(v) == _int32(bits ^ (bits >> 32))
    assert JavaDoubleSerializer().key_hash(0.0) == 0 and JavaDoubleSerializer().key_hash(1.0) == 1072693248


@pytest.mark.requirement("KG-1")
def test_java_boolean_hash_is_javas_boolean_hash_code() -> None:
    assert JavaBooleanSerializer().key_hash(True) == 1231 and JavaBooleanSerializer().key_hash(False) == 1237


@pytest.mark.requirement("KG-1")
def test_key_groups_identical_across_interpreter_runs() -> None:
    program = (
        "import json;"
        "from statecert.reference.serializers import StringSerializer, LongSerializer, MsgpackSerializer;"
        "from statecert.spec.keygroups import assign_to_key_group as a;"
        "print(json.dumps([a(StringSerializer().key_hash(f'k{i}'),128) for i in range(200)]"
        " + [a(LongSerializer().key_hash(i),128) for i in range(200)]"
        " + [a(MsgpackSerializer().key_hash(['t', i]),128) for i in range(200)]))"
    )
    runs = []
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    here = (
        [assign_to_key_group(StringSerializer().key_hash(f"k{i}"), 128) for i in range(200)]
        + [assign_to_key_group(LongSerializer().key_hash(i), 128) for i in range(200)]
        + [assign_to_key_group(MsgpackSerializer().key_hash(["t", i]), 128) for i in range(200)]
    )
    assert runs[0] == runs[1] == runs[2] == here, "key groups differ between interpreter runs with other hash seeds"


@pytest.mark.requirement("KG-2", "KG-3")
@given(INT32, MAX_PARALLELISM)
def test_key_group_is_murmur_mod_max_parallelism(key_hash: int, max_parallelism: int) -> None:
    key_group = assign_to_key_group(key_hash, max_parallelism)
    assert key_group == java_murmur_hash(key_hash) % max_parallelism
    assert 0 <= key_group < max_parallelism


@pytest.mark.requirement("KG-4")
@pytest.mark.parametrize(("parallelism", "max_parallelism"), [(0, 128), (129, 128), (1, 0), (1, 32769), (-1, 4)])
def test_out_of_bounds_parallelism_is_rejected(parallelism: int, max_parallelism: int) -> None:
    with pytest.raises(ValueError, match="parallelism"):
        check_parallelism(parallelism, max_parallelism)


@pytest.mark.requirement("KG-4")
def test_bounds_are_accepted() -> None:
    check_parallelism(1, 1)
    check_parallelism(32768, 32768)
    assert len(key_group_range_for_operator(32768, 32768, 32767)) == 1


@pytest.mark.requirement("KG-5")
@pytest.mark.parametrize(
    ("parallelism", "expected"), [(1, 128), (85, 128), (86, 256), (100, 256), (1000, 2048), (30000, 32768)]
)
def test_default_max_parallelism_follows_flink(parallelism: int, expected: int) -> None:
    assert compute_default_max_parallelism(parallelism) == expected, f"compute_default_max_parallelism({parallelism})"


@pytest.mark.requirement("KG-5", "KG-4")
@pytest.mark.parametrize("parallelism", [0, -1, 32769, 2**31])
def test_default_max_parallelism_rejects_what_flink_rejects(parallelism: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.32768"):
        compute_default_max_parallelism(parallelism)


@pytest.mark.requirement("KG-6", "KG-7")
@given(st.data())
def test_ranges_partition_key_groups_and_agree_with_owner(data: st.DataObject) -> None:
    max_parallelism = data.draw(st.integers(1, 4096), label="max_parallelism")
    parallelism = data.draw(st.integers(1, max_parallelism), label="parallelism")
    covered = []
    for i in range(parallelism):
        rng = key_group_range_for_operator(max_parallelism, parallelism, i)
        assert rng.start == -(-i * max_parallelism // parallelism), f"start of range {i}"
        assert rng.end == ((i + 1) * max_parallelism - 1) // parallelism, f"end of range {i}"
        for g in (rng.start, rng.end):
            if not rng.is_empty:
                assert operator_index_for_key_group(max_parallelism, parallelism, g) == i
        covered.extend(rng)
    assert covered == list(range(max_parallelism)), "ranges are not contiguous, disjoint and complete"


@pytest.mark.requirement("KG-8")
@given(st.integers(0, 200), st.integers(-1, 200), st.integers(0, 200), st.integers(-1, 200))
def test_intersection_holds_exactly_common_key_groups(a: int, b: int, c: int, d: int) -> None:
    r1, r2 = KeyGroupRange.of(a, b), KeyGroupRange.of(c, d)
    assert set(r1.intersection(r2)) == set(r1) & set(r2)
    assert r1.intersection(r2).is_empty == (not set(r1) & set(r2))


@pytest.mark.requirement("KG-6")
@given(INT32, st.integers(1, 256), st.data())
def test_a_key_goes_to_the_subtask_whose_range_holds_its_key_group(key_hash: int, max_par: int, data: Any) -> None:
    parallelism = data.draw(st.integers(1, max_par))
    index = assign_key_to_parallel_operator(key_hash, max_par, parallelism)
    key_group = assign_to_key_group(key_hash, max_par)
    assert key_group in key_group_range_for_operator(max_par, parallelism, index), (key_hash, max_par, parallelism)
