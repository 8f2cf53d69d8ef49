"""Key types of scenario and job files (`[job] key_type`, KG-1): keys of a Java type, placed in key groups by that
type's `hashCode`, through failures, savepoints and rescaling on the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.key_types import KEY_TYPES, KeyType
from statecert.reference.serializers import IntSerializer, LongSerializer
from statecert.scenarios.catalog import resolve
from statecert.scenarios.loader import load_scenario
from statecert.scenarios.sim_runner import run_on_simulator
from statecert.scenarios.spark.state_reader import keyed_state_rows
from statecert.spec.errors import ScenarioError
from statecert.spec.keygroups import assign_to_key_group

NUMERIC = [t for t in KEY_TYPES if t != "string"]


@pytest.mark.requirement("KG-1")
@pytest.mark.parametrize("name", NUMERIC)
@given(sources=st.integers(1, 8), keys=st.integers(1, 16))
def test_numeric_key_types_give_distinct_keys_in_range_and_half_negative(name: str, sources: int, keys: int) -> None:
    key_type = KeyType(name, keys)
    names = [f"s{s}-k{i}" for s in range(sources) for i in range(keys)]
    typed = [key_type.of(n) for n in names]
    assert len(set(typed)) == len(names), f"KeyType({name!r}).of: expected distinct keys, got {typed}"
    serializer = key_type.serializer()
    for key in typed:  # every key is a value of the type: it serializes and round-trips
        assert serializer.deserialize(serializer.serialize(key)) == key
    assert sum(1 for k in typed if k < 0) == len(typed) // 2, f"expected half of {typed} negative"


@pytest.mark.requirement("KG-1")
@pytest.mark.parametrize("name", KEY_TYPES)
@given(index=st.integers(0, 100))
def test_the_second_shuffle_key_is_another_key_that_maps_back(name: str, index: int) -> None:
    key_type = KeyType(name, 128)
    key = key_type.of(f"s0-k{index}")
    second = key_type.second_stage(key)
    assert second != key and type(second) is type(key)
    assert key_type.first_stage(second) == key


@pytest.mark.requirement("KG-1", "SCN-3")
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_int_keyed_job_places_keys_as_java_integer_through_failure_and_rescale(tmp_path: Path, backend: str) -> None:
    """The library scenario keyed by Java Integer passes, and its savepoint holds every key in the key group of
    `Integer.hashCode`, which for some of its keys is not the one `Long.hashCode` gives."""
    scenario = load_scenario(resolve("int-keys-rescale"))
    result = run_on_simulator(scenario, tmp_path, backend)
    assert result.passed, result.failures
    savepoint = next(tmp_path.glob("run-1/sp/*/_metadata"))
    rows = list(keyed_state_rows(str(savepoint), "counter"))
    keys = {int(row[2]): row[1] for row in rows}
    assert len(keys) == scenario.job.sources * scenario.input.keys_per_source
    assert min(keys) < 0
    for key, key_group in keys.items():
        expected = assign_to_key_group(IntSerializer().key_hash(key), scenario.job.max_parallelism)
        assert key_group == expected, f"int key {key}: expected key group {expected}, got {key_group}"
    as_long = {k: assign_to_key_group(LongSerializer().key_hash(k), scenario.job.max_parallelism) for k in keys}
    assert as_long != keys, "the scenario's keys should not all land where Long keys would"


def _write(tmp_path: Path, job: str, keys: int = 8) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f'[scenario]\ndescription = "d"\n[job]\nsources = 2\n{job}\n[input]\nkeys_per_source = {keys}\n')
    return path


@pytest.mark.requirement("SCN-1")
def test_an_unknown_key_type_is_one_error_naming_the_file_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, 'key_type = "uuid"')
    with pytest.raises(ScenarioError, match=r"s\.toml: job\.key_type: .*uuid"):
        load_scenario(path)


@pytest.mark.requirement("SCN-1")
def test_more_keys_than_the_key_type_holds_is_an_invalid_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'key_type = "byte"', keys=200)
    with pytest.raises(ScenarioError, match=r"job\.key_type: byte holds 256 distinct keys, the input has 400"):
        load_scenario(path)
    load_scenario(_write(tmp_path, 'key_type = "byte"', keys=128))
