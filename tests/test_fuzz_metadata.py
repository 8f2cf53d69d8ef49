"""Fuzzing the `_metadata` readers (V1 JSON, V2 and V3 msgpack, and the handle codec behind them): damaged bytes
give a documented error or the same metadata; hostile payloads re-encoded with a valid CRC give a documented error
or metadata that restores (or fails to restore) with a documented error only (FMT-8, FMT-11)."""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.reference.format.metadata_codec import MAGIC, decode_metadata, encode_metadata
from statecert.reference.storage.location import load_checkpoint_metadata
from tests.fuzz_mutations import damaged, hostile_values, json_values, mutated
from tests.fuzz_support import FUZZ, assert_verify_agrees, outcome, same_or_error
from tests.hostile.cases import read_plain, write_payload
from tests.hostile.savepoints import build, read_operator, read_state


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as scratch:
        build(Path(scratch) / "savepoint", "hashmap")
        yield Path(scratch) / "savepoint"


def restore(directory: Path) -> Any:
    """Decode and, if there is an operator `op`, restore and read all of its state at parallelism 2."""
    metadata = load_checkpoint_metadata(str(directory))
    if not any(op.operator_id == "op" for op in metadata.operators):
        return "no operator op"
    return read_state(str(directory), "hashmap", 2)


@pytest.mark.requirement("FMT-2", "FMT-8")
@FUZZ
@given(data=st.data())
def test_damaged_metadata_is_an_error_or_the_same_metadata(base: Path, data: st.DataObject) -> None:
    raw = (base / "_metadata").read_bytes()
    directory = f"file://{base}"
    expected = decode_metadata(raw, "m", directory)
    bad = data.draw(damaged(raw))
    same_or_error("metadata: damaged bytes", lambda: decode_metadata(bad, "m", directory), expected)


@pytest.mark.requirement("FMT-8", "FMT-11")
@FUZZ
@given(data=st.data())
def test_hostile_v3_payload_is_rejected_or_restores(base: Path, data: st.DataObject) -> None:
    plain = data.draw(mutated(read_plain(base)) | hostile_values)
    try:
        payload = msgpack.packb(plain, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return  # not encodable as msgpack: nothing a file could hold
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        shutil.copytree(base, directory)
        write_payload(directory, payload)
        outcome("metadata: hostile V3 payload (valid CRC)", lambda: restore(directory))


@pytest.mark.requirement("FMT-3", "FMT-8", "FMT-11")
@FUZZ
@given(data=st.data())
def test_hostile_v1_payload_is_rejected_or_restores(base: Path, data: st.DataObject) -> None:
    metadata = load_checkpoint_metadata(str(base))
    v1 = encode_metadata(metadata, f"file://{base}", version=1)
    plain = json.loads(v1[8:])
    choice = data.draw(st.sampled_from(["structure", "value", "text"]))
    if choice == "text":
        body = data.draw(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
    else:
        tree = data.draw(mutated(plain, json_values)) if choice == "structure" else data.draw(json_values)
        body = json.dumps(tree).encode()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        shutil.copytree(base, directory)
        (directory / "_metadata").write_bytes(struct.pack(">II", MAGIC, 1) + body)
        outcome("metadata: hostile V1 payload", lambda: restore(directory))


def restore_every_operator(directory: Path) -> None:
    """Restore every operator of the checkpoint at parallelism 1 (every key group in one backend; each operator's
    states registered as `build` wrote them)."""
    for operator in load_checkpoint_metadata(str(directory)).operators:
        read_operator(operator)


@pytest.mark.requirement("FMT-14")
@FUZZ
@given(data=st.data())
def test_inspect_verify_refuses_exactly_the_hostile_metadata_a_restore_refuses(base: Path, data: st.DataObject) -> None:
    """Over hostile V3 payloads (valid CRC), `inspect --verify` reports a problem exactly when restoring every
    operator at parallelism 1 refuses the checkpoint."""
    plain = data.draw(mutated(read_plain(base)))
    try:
        payload = msgpack.packb(plain, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "sp"
        shutil.copytree(base, directory)
        write_payload(directory, payload)
        assert_verify_agrees(
            directory, "hostile _metadata", lambda: restore_every_operator(directory), "a restore of every operator"
        )
