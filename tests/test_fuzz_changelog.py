"""Fuzzing changelog replay with forged segments: a change's fields (key, key group, namespace, sequence number, op,
payload) or the segment's serializer descriptions rewritten, the segment re-encoded and its size and CRC-32C
re-recorded in `_metadata`, so that only replay's own checks (CL-4, FMT-15) can object. Every case is restored at
parallelism 1 and 2 and must give a documented error or exactly the state a decoder written from the spec alone
(`spec_replay`, from CL-3, CL-4 and IF-1) reads from the same bytes; `inspect --verify` refuses exactly what the
restore of every key group refuses (FMT-14)."""

from __future__ import annotations

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

from statecert.reference.checkpointing import create_subtasks, take_snapshot
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.keygroups import KeyGroupRange, assign_to_key_group, key_group_range_for_operator
from statecert.spec.state import VOID_NAMESPACE, ValueStateDescriptor
from tests.fuzz_mutations import EDGE_INTS, mutated
from tests.fuzz_support import FUZZ, TALLIES, SilentStateChange, assert_verify_agrees, outcome
from tests.hostile.cases import Plain, keyed, read_plain, rerecord, write_payload

MAX_PARALLELISM = 128
VALUE = ValueStateDescriptor("v", serializer=LongSerializer())
CONFIG = {"state.changelog.enabled": "true", "state.changelog.periodic-materialize.interval": "0"}
State = dict[str, int]


def _write(subtask: Any, key: str, value: int | None) -> None:
    subtask.keyed.set_current_key(key)
    state = subtask.keyed.get_or_create_state(VALUE)
    if value is None:
        state.clear()
    else:
        state.update(value)


def build(root: Path) -> Path:
    """Checkpoint 2 of a changelog-wrapped heap backend at parallelism 1: checkpoint 1's materialization of keys
    `k0`..`k29`, and a segment of 45 changes since (20 keys updated, 5 cleared, 20 added)."""
    every_stream_a_file = FileSystemCheckpointStorage(f"file://{root}/checkpoints", file_state_size_threshold=0)
    storage = every_stream_a_file.create_checkpoint_storage("job")
    (subtask,) = create_subtasks(load_state_backend(job_config=CONFIG), StringSerializer(), 1, MAX_PARALLELISM)
    try:
        for i in range(30):
            _write(subtask, f"k{i}", i)
        take_snapshot([subtask], storage.initialize_location_for_checkpoint(1), 1, MAX_PARALLELISM)
        subtask.keyed.notify_checkpoint_complete(1)
        for i in range(20):
            _write(subtask, f"k{i}", 100 + i)
        for i in range(20, 25):
            _write(subtask, f"k{i}", None)
        for i in range(30, 50):
            _write(subtask, f"k{i}", i)
        take_snapshot([subtask], storage.initialize_location_for_checkpoint(2), 2, MAX_PARALLELISM)
    finally:
        subtask.dispose()
    return root / "checkpoints" / "job" / "chk-2"


def restored_state(directory: Path, parallelism: int) -> State:
    """Every key's value of state `v`, restored at `parallelism` by the reference (a changelog-wrapped heap)."""
    operator = load_checkpoint_metadata(str(directory)).operators[0]
    backend = load_state_backend(job_config=CONFIG)
    subtasks = create_subtasks(
        backend, StringSerializer(), parallelism, MAX_PARALLELISM, restore_from=operator, operator_id="op"
    )
    state: State = {}
    try:
        for s in subtasks:
            handle = s.keyed.get_or_create_state(VALUE)
            for key in list(s.keyed.get_keys("v", VOID_NAMESPACE)):
                s.keyed.set_current_key(key)
                state[key] = handle.value()
    finally:
        for s in subtasks:
            s.dispose()
    return state


# -- a replay written from the spec alone ----------------------------------------------------------------------------
class SpecRefuses(Exception):
    """The spec-only replay refuses the segment."""


def java_string_hash(text: str) -> int:
    """IF-1 / KG-1: Java's `String.hashCode` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def spec_replay(materialized: State, body: Any, segment: Plain, key_groups: KeyGroupRange) -> State:
    """CL-3/CL-4 from their text: the changes of `key_groups` after the materialization (here: every change of the
    segment), in sequence order, each a `str` key (UTF-8) of the key group it is logged under, the void namespace
    (zero bytes), a `long` value (8 bytes big-endian) set or cleared; the states described as written (`v`: a value
    state of `long` under `void-namespace`, key serializer `str`). Anything else: SpecRefuses."""
    try:
        key_serializer, states, changes = body
        if (key_serializer.get("id"), key_serializer.get("version")) != ("str", 1):
            raise SpecRefuses("key serializer")
        (described,) = states
        meta = described["meta"]
        if described.get("ttl") is not None or meta.get("name") != "v" or meta.get("kind") != "value":
            raise SpecRefuses("state description")
        serializers = {role: (s.get("id"), s.get("version")) for role, s in meta["serializers"].items()}
        namespace = meta["namespace_serializer"]
        if serializers != {"value": ("long", 1)} or (namespace.get("id"), namespace.get("version")) != (
            "void-namespace",
            1,
        ):
            raise SpecRefuses("state serializers")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise SpecRefuses(f"malformed description: {exc}") from None
    try:
        return _replayed(materialized, changes, segment, key_groups)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise SpecRefuses(f"malformed change: {exc}") from None


def _replayed(materialized: State, changes: Any, segment: Plain, key_groups: KeyGroupRange) -> State:
    state = dict(materialized)
    previous = 0
    for change in changes:
        sequence, key_group, index, op, key, namespace, _timestamp, payload = change
        if not isinstance(sequence, int) or sequence <= previous:
            raise SpecRefuses("sequence numbers not ascending")
        previous = sequence
        if not isinstance(key_group, int) or not 0 <= key_group < MAX_PARALLELISM:
            raise SpecRefuses("key group")
        if key_group not in key_groups:
            continue
        if not segment["from"] < sequence <= segment["to"]:
            raise SpecRefuses("sequence outside the segment's range")
        if index != 0 or not isinstance(key, bytes) or namespace != b"":
            raise SpecRefuses("state index, key or namespace")
        try:
            text = key.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise SpecRefuses("key not UTF-8") from None
        if assign_to_key_group(java_string_hash(text), MAX_PARALLELISM) != key_group:
            raise SpecRefuses("key of another key group")
        if op == "s" and isinstance(payload, bytes) and len(payload) == 8:
            state[text] = struct.unpack(">q", payload)[0]
        elif op in ("c", "s") and payload is None:  # a value set to None is cleared (KS-VALUE-3)
            state.pop(text, None)
        elif op == "t" and payload is None:  # a read that refreshes TTL, replayed as a read: no change here
            pass
        else:
            raise SpecRefuses(f"op {op!r} with payload {payload!r}")
    return state


# -- forgeries ---------------------------------------------------------------------------------------------------------
def _segment(plain: Plain) -> Plain:
    (part,) = keyed(plain)["changelog"]
    return part


def _key_bytes(draw: st.DrawFn, key_group: int) -> bytes:
    kind = draw(st.sampled_from(["same group", "other group", "not utf-8", "any"]))
    candidates = [f"x{i}" for i in range(2000)]
    if kind == "same group":
        same = [k for k in candidates if assign_to_key_group(java_string_hash(k), MAX_PARALLELISM) == key_group]
        return draw(st.sampled_from(same or candidates)).encode()
    if kind == "other group":
        return draw(st.sampled_from(candidates)).encode()
    if kind == "not utf-8":
        return draw(st.sampled_from([b"\xff", b"\xc3", b"k\x80", b"\xed\xa0\x80\xff"]))
    return draw(st.binary(max_size=8))


@st.composite
def forged_body(draw: st.DrawFn, body: Any) -> Any:
    """The segment body with one to three forgeries: a change's field rewritten in the segment's own vocabulary
    (another key, key group, sequence number, op, namespace or payload), or a serializer description changed."""
    body = msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)  # a deep copy
    changes = body[2]
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["key", "group", "sequence", "op", "namespace", "payload", "serializer", "tree"]))
        change = changes[draw(st.integers(0, len(changes) - 1))]
        if target == "key":
            change[4] = _key_bytes(draw, change[1])
        elif target == "group":
            change[1] = draw(st.integers(0, MAX_PARALLELISM - 1) | st.sampled_from(EDGE_INTS))
        elif target == "sequence":
            change[0] = draw(st.integers(-2, changes[-1][0] + 3) | st.sampled_from(EDGE_INTS))
        elif target == "op":
            change[3], change[7] = draw(
                st.sampled_from([("c", None), ("s", None), ("a", b"\x00" * 8), ("p", [b"a", None]), ("t", None)])
            )
        elif target == "namespace":
            change[5] = draw(st.binary(min_size=1, max_size=4))
        elif target == "payload":
            change[7] = draw(st.binary(max_size=12) | st.none())
        elif target == "serializer":
            meta = body[1][0]["meta"]
            snapshot = draw(st.sampled_from([body[0], meta["namespace_serializer"], *meta["serializers"].values()]))
            snapshot[draw(st.sampled_from(["id", "version", "config"]))] = draw(
                st.sampled_from(["long", "int", "str", "bytes", "msgpack", "void-namespace", 0, 2, {}, {"a": 1}])
            )
        else:  # structure-aware: any node of the body replaced, deleted or duplicated; the last forgery
            return draw(mutated(body))
    return body


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[Path, Any, State]]:
    with tempfile.TemporaryDirectory() as scratch:
        directory = build(Path(scratch))
        plain = read_plain(directory)
        data = (directory / _segment(plain)["stream"]["path"]).read_bytes()
        body = msgpack.unpackb(data[8:], raw=False)
        yield directory, body, {f"k{i}": i for i in range(30)}  # the materialization: checkpoint 1's keys


def forge(base: Path, scratch: Path, body: Any) -> tuple[Path, Plain]:
    """A copy of the job directory of checkpoint `base` (its shared files with it) under `scratch`, the segment's
    body replaced by `body` and the segment's size and CRC-32C re-recorded; the copied checkpoint and the segment."""
    shutil.copytree(base.parent, scratch / "job")
    directory = scratch / "job" / base.name
    plain = read_plain(directory)
    segment = _segment(plain)
    path = directory / segment["stream"]["path"]
    path.write_bytes(path.read_bytes()[:8] + msgpack.packb(body, use_bin_type=True))
    rerecord(directory, segment["stream"])
    write_payload(directory, msgpack.packb(plain, use_bin_type=True), version=4)
    return directory, segment


READER = "changelog replay: forged segment, size and CRC-32C re-recorded"


@pytest.mark.requirement("CL-4", "FMT-15", "FMT-8")
@FUZZ
@given(data=st.data(), parallelism=st.sampled_from([1, 2]))
def test_forged_changelog_segment_is_refused_or_replays_as_the_spec_reads_it(
    base: tuple[Path, Any, State], data: st.DataObject, parallelism: int
) -> None:
    source, body, materialized = base
    try:
        forged = data.draw(forged_body(body))
        encoded = msgpack.packb(forged, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return  # a hostile value msgpack cannot write
    with tempfile.TemporaryDirectory() as scratch:
        directory, segment = forge(source, Path(scratch), msgpack.unpackb(encoded, raw=False, strict_map_key=False))
        got = outcome(READER, lambda: restored_state(directory, parallelism))
        if got is None:
            return
        expected: State = {}
        for index in range(parallelism):
            rng = key_group_range_for_operator(MAX_PARALLELISM, parallelism, index)
            try:
                replayed = spec_replay(materialized, forged, segment, rng)
            except SpecRefuses as exc:
                TALLIES[READER]["SILENT STATE CHANGE"] += 1
                raise SilentStateChange(
                    f"CL-4: restored at parallelism {parallelism} a segment the spec refuses ({exc}): got {got}"
                ) from None
            expected.update(
                {k: v for k, v in replayed.items() if assign_to_key_group(java_string_hash(k), MAX_PARALLELISM) in rng}
            )
        if got != expected:
            TALLIES[READER]["SILENT STATE CHANGE"] += 1
            keys = set(got) | set(expected)
            wrong = {k: (got.get(k), expected.get(k)) for k in keys if got.get(k) != expected.get(k)}
            raise SilentStateChange(f"CL-4: parallelism {parallelism}: restored != spec replay, (got, spec): {wrong}")


@pytest.mark.requirement("FMT-14", "CL-4")
@FUZZ
@given(data=st.data())
def test_inspect_verify_refuses_exactly_the_forged_segments_a_restore_refuses(
    base: tuple[Path, Any, State], data: st.DataObject
) -> None:
    source, body, _ = base
    try:
        encoded = msgpack.packb(data.draw(forged_body(body)), use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return
    with tempfile.TemporaryDirectory() as scratch:
        directory, _ = forge(source, Path(scratch), msgpack.unpackb(encoded, raw=False, strict_map_key=False))
        assert_verify_agrees(
            directory, "forged changelog segment", lambda: restored_state(directory, 1), "a restore of every key group"
        )
