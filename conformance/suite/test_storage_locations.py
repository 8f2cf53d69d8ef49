"""The checkpoint storage contract's coordinator and task views (CS-12..CS-16): location references, the location a
task resolves from one, what a storage says it offers (high availability, a default savepoint location) and the
base directories it prepares. Runnable against any storage, as `test_storage_contract`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import fsspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecert.conformance.suite.test_storage_contract import _misread, _under, _write_every_scope
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.errors import CheckpointFormatError, IllegalConfigurationError
from statecert.spec.handles import FileStateHandle
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata
from statecert.spec.storage import (
    REFERENCE_MAGIC_NUMBER,
    CheckpointedStateScope,
    CheckpointStorageLocationReference,
    decode_path_from_reference,
    encode_path_as_reference,
)

pytestmark = pytest.mark.subject("storage")

JOB = "c0ffee" + "0" * 26


def _metadata(checkpoint_id: int, kind: CheckpointKind = CheckpointKind.CHECKPOINT) -> CheckpointMetadata:
    return CheckpointMetadata(checkpoint_id, (), kind)


def _written(factory: Any, scope: CheckpointedStateScope, payload: bytes) -> Any:
    with factory.create_checkpoint_state_output_stream(scope) as out:
        out.write(payload)
        return out.close_and_get_handle()


@pytest.mark.requirement("CS-12")
@given(directory=st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s))
def test_an_encoded_reference_is_the_magic_number_and_the_directory_in_utf8(directory: str) -> None:
    """Flink's encoding (`encodePathAsReference`), both ways; the default reference has no bytes."""
    reference = encode_path_as_reference(directory)
    expected = REFERENCE_MAGIC_NUMBER + directory.encode("utf-8")
    assert reference.reference_bytes == expected, (
        f"CS-12: encode_path_as_reference({directory!r}): expected bytes {expected!r}, got "
        f"{reference.reference_bytes!r}"
    )
    assert not reference.is_default, f"CS-12: encode_path_as_reference({directory!r}) is the default reference"
    decoded = decode_path_from_reference(reference)
    assert decoded == directory, f"CS-12: decode_path_from_reference: expected {directory!r}, got {decoded!r}"
    default = CheckpointStorageLocationReference.default()
    assert default.is_default and default.reference_bytes == b"", (
        f"CS-12: CheckpointStorageLocationReference.default(): expected no bytes, got {default.reference_bytes!r}"
    )


@pytest.mark.requirement("CS-12")
@pytest.mark.parametrize(
    "data",
    [None, b"\x05\x5f\x3f", REFERENCE_MAGIC_NUMBER, b"\x05\x5f\x3f\x19/tmp", REFERENCE_MAGIC_NUMBER + b"\xff\xfe"],
    ids=["default", "shorter than the magic number", "magic number only", "other magic number", "not UTF-8"],
)
def test_a_reference_that_does_not_decode_is_refused(data: bytes | None) -> None:
    reference = CheckpointStorageLocationReference(data)
    with pytest.raises(CheckpointFormatError):
        decoded = decode_path_from_reference(reference)
        pytest.fail(f"CS-12: decode_path_from_reference({data!r}): expected CheckpointFormatError, got {decoded!r}")


@pytest.mark.requirement("CS-12")
def test_checkpoints_send_the_default_reference_and_savepoints_their_directory(storage: Any) -> None:
    access = storage.create_checkpoint_storage(JOB)
    checkpoint = access.initialize_location_for_checkpoint(1)
    assert checkpoint.location_reference.is_default, (
        f"CS-12: initialize_location_for_checkpoint(1).location_reference: expected the default reference, got "
        f"{checkpoint.location_reference}"
    )
    savepoint = access.initialize_location_for_savepoint(2)
    reference = savepoint.location_reference
    assert not reference.is_default, (
        "CS-12: initialize_location_for_savepoint(2).location_reference: expected the savepoint's directory "
        "encoded, got the default reference"
    )
    decoded = decode_path_from_reference(reference)
    _, decoded_path = fsspec.core.url_to_fs(decoded)
    _, pointer_path = fsspec.core.url_to_fs(savepoint.pointer)
    assert decoded_path.rstrip("/") == pointer_path.rstrip("/"), (
        f"CS-12: the savepoint's location reference decodes to {decoded!r}, expected its directory "
        f"{savepoint.pointer!r}"
    )


@pytest.mark.requirement("CS-13", "SP-4")
@pytest.mark.parametrize("kind", ["checkpoint", "savepoint"])
def test_a_task_writes_through_the_location_it_resolves_from_the_reference(storage: Any, kind: str) -> None:
    """The coordinator's location of checkpoint N and the task's, resolved by another access of the job from the
    reference: state a task writes through its location completes with `_metadata` written through the
    coordinator's and reads back; a checkpoint's exclusive state lies in its directory, a savepoint's every stream
    in its own directory."""
    coordinator = storage.create_checkpoint_storage(JOB)
    coordinator.initialize_base_locations()
    location = (
        coordinator.initialize_location_for_checkpoint(4)
        if kind == "checkpoint"
        else coordinator.initialize_location_for_savepoint(4)
    )
    task = storage.create_checkpoint_storage(JOB)
    resolved = task.resolve_checkpoint_storage_location(4, location.location_reference)
    payloads = {scope: os.urandom(200_000) for scope in CheckpointedStateScope}
    handles = {scope: _written(resolved, scope, payload) for scope, payload in payloads.items()}
    pointer = location.write_metadata(_metadata(4))
    directory = storage.resolve_checkpoint(pointer).directory
    call = f"resolve_checkpoint_storage_location(4, reference of the {kind} location)"
    for scope, handle in handles.items():
        with handle.open() as f:
            got = f.read()
        assert got == payloads[scope], f"CS-13: a {scope.value} stream written through {call} reads back changed"
        if not isinstance(handle, FileStateHandle):
            continue
        inside = _under(handle.path, directory)
        if kind == "savepoint":
            assert inside, (
                f"CS-13, SP-4: {call}: expected the {scope.value} stream in the savepoint's directory {directory}, "
                f"got {handle.path}"
            )
        elif scope is CheckpointedStateScope.EXCLUSIVE:
            assert inside, (
                f"CS-13: {call}: expected the exclusive stream in checkpoint 4's directory {directory} (the one "
                f"its _metadata is in), got {handle.path}"
            )
        else:
            assert not inside, (
                f"CS-13: {call}: expected the shared stream outside checkpoint 4's directory {directory}, got "
                f"{handle.path}"
            )


@pytest.mark.requirement("CS-13")
def test_a_reference_that_does_not_decode_resolves_to_no_location(storage: Any) -> None:
    access = storage.create_checkpoint_storage(JOB)
    reference = CheckpointStorageLocationReference(b"\x00\x01\x02\x03/elsewhere")
    with pytest.raises(CheckpointFormatError):
        got = access.resolve_checkpoint_storage_location(1, reference)
        pytest.fail(
            f"CS-13: resolve_checkpoint_storage_location(1, bytes without the magic number): expected "
            f"CheckpointFormatError, got {got!r}"
        )


LOAD_IN_A_NEW_PROCESS = """
import sys
from statecert.conformance.suite.test_storage_contract import _misread, _under, _write_every_scope
from statecert.reference.storage.location import load_checkpoint_metadata
metadata = load_checkpoint_metadata(sys.argv[1])
print(metadata.checkpoint_id)
"""


@pytest.mark.requirement("CS-14")
def test_a_highly_available_storage_has_its_checkpoints_load_in_a_new_process(storage: Any) -> None:
    """A job recovered by another process (a new job manager) restores what the old one completed; a storage that
    answers False promises nothing, and the test then only checks the answer is a bool."""
    access = storage.create_checkpoint_storage(JOB)
    answer = access.supports_highly_available_storage()
    assert isinstance(answer, bool), f"CS-14: supports_highly_available_storage(): expected a bool, got {answer!r}"
    if not answer:
        return
    access.initialize_base_locations()
    pointer = access.initialize_location_for_checkpoint(7).write_metadata(_metadata(7))
    assert load_checkpoint_metadata(pointer).checkpoint_id == 7, "CS-14: checkpoint 7 does not load in this process"
    done = subprocess.run(
        [sys.executable, "-c", LOAD_IN_A_NEW_PROCESS, pointer], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "7", (
        f"CS-14: supports_highly_available_storage() is True, but checkpoint 7 ({pointer}) does not load in a new "
        f"process: {(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}"
    )


@pytest.mark.requirement("CS-15", "CS-2")
@pytest.mark.parametrize("with_savepoint_dir", [True, False], ids=["with a default", "without a default"])
def test_a_default_savepoint_location_is_there_exactly_when_the_storage_says_so(
    storage_factory: Callable[..., Any], checkpoint_dir: str, with_savepoint_dir: bool
) -> None:
    access = storage_factory(checkpoint_dir, with_savepoint_dir=with_savepoint_dir).create_checkpoint_storage(JOB)
    answer = access.has_default_savepoint_location()
    try:
        location = access.initialize_location_for_savepoint(3)
    except IllegalConfigurationError:
        has = False
    else:
        has = True
        location.dispose_on_failure()
    assert answer is has, (
        f"CS-15: has_default_savepoint_location() says {answer!r}, but initialize_location_for_savepoint(3) without a "
        f"target {'returned a location' if has else 'raised IllegalConfigurationError'} (savepoint directory "
        f"configured: {with_savepoint_dir})"
    )


@pytest.mark.requirement("CS-16", "CS-3")
def test_initializing_the_base_locations_again_keeps_the_state_there(storage: Any) -> None:
    """A restarted coordinator initializes the job's base locations again, through a new access: the shared and
    task-owned state of the checkpoints before stays readable, and streams of every scope can be written."""
    first = storage.create_checkpoint_storage(JOB)
    first.initialize_base_locations()
    first.initialize_base_locations()  # twice: nothing changes
    location = first.initialize_location_for_checkpoint(1)
    payloads = {
        name: os.urandom(100_000) for name in (*(scope.value for scope in CheckpointedStateScope), "task-owned")
    }
    handles = _write_every_scope(first, location, payloads)
    location.write_metadata(_metadata(1))
    again = storage.create_checkpoint_storage(JOB)
    again.initialize_base_locations()
    for name, handle in handles.items():
        problem = _misread(handle, payloads[name])
        assert problem is None, (
            f"CS-16: initialize_base_locations() of a second access of the job changed the {name} state of "
            f"checkpoint 1: {problem}"
        )
    later = again.initialize_location_for_checkpoint(2)
    for scope in CheckpointedStateScope:
        payload = os.urandom(50_000)
        with _written(later, scope, payload).open() as f:
            assert f.read() == payload, (
                f"CS-16: after initialize_base_locations(), a {scope.value} stream reads back changed"
            )
