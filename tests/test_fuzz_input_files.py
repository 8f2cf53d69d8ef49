"""Fuzzing the readers of what users write: scenario files and low-level simulator job files (TOML). Every library
file mutated (values replaced by hostile literals, lines dropped or repeated, bytes flipped) must load or give one
documented error naming the file (SCN-1, ERR-2): never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.simulator.job_spec import load_job_spec
from statecert.scenarios.loader import load_scenario
from tests.fuzz_mutations import EDGE_INTS, EDGE_STRINGS, damaged
from tests.fuzz_support import FUZZ, outcome

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios" / "library").glob("*.toml"))
JOBS = sorted((ROOT / "scenarios" / "simulator").glob("*.toml"))

literals = st.one_of(
    st.sampled_from([str(i) for i in EDGE_INTS] + ["1e400", "-0.0", "nan", "inf", "true", "[]", "{}", "[1, [2]]"]),
    st.sampled_from([f'"{s}"' for s in EDGE_STRINGS if s != "\x00"]),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["{ min = 3, max = 1 }", "{ min = -1 }", '"hashmap"', '"rocksdb"', '"nonesuch"', '"x:y"']),
)


@st.composite
def mutated_toml(draw: st.DrawFn, text: str) -> bytes:
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["value", "value", "value", "drop", "repeat", "bytes"]))
        line = lines[index]
        if action == "value" and "=" in line:
            lines[index] = line.split("=", 1)[0] + "= " + draw(literals)
        elif action == "drop":
            del lines[index]
        elif action == "repeat":
            lines.insert(index, line)
        elif action == "bytes":
            return draw(damaged(text.encode()))
    return ("\n".join(lines) + "\n").encode()


INPUTS = {
    "scenario files": (SCENARIOS, load_scenario),
    "simulator job files": (JOBS, load_job_spec),
}


@pytest.mark.requirement("SCN-1", "SIM-6", "ERR-2")
@pytest.mark.parametrize("reader", sorted(INPUTS))
@FUZZ
@given(data=st.data())
def test_mutated_input_file_loads_or_is_one_documented_error(reader: str, data: st.DataObject) -> None:
    files, load = INPUTS[reader]
    source = data.draw(st.sampled_from(files))
    content = data.draw(mutated_toml(source.read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / source.name
        path.write_bytes(content)
        outcome(reader, lambda: load(path))
