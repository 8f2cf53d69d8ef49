"""The operator state backend beyond redistribution (OS-4..OS-6)."""

from __future__ import annotations

from typing import Any

import pytest

from statecert.conformance.helpers import location_for
from statecert.reference.format.operator_stream import read_operator_states
from statecert.reference.serializers import LongSerializer, StringSerializer
from statecert.spec.errors import InvalidStateValueError, StateMigrationError
from statecert.spec.handles import OperatorStateHandle, OperatorStateMode
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.state import ListStateDescriptor

SPLIT = ListStateDescriptor("offsets", element_serializer=LongSerializer())
UNION = ListStateDescriptor("names", element_serializer=StringSerializer())


def operator_backend(state_backend: Any, restore: tuple[Any, ...] = ()) -> Any:
    return state_backend.create_operator_state_backend(OperatorBackendParameters("job", "op", restore))


@pytest.mark.requirement("OS-4")
@pytest.mark.capability("operator_state")
def test_snapshot_is_one_stream_with_offsets_per_element(state_backend: Any, storage: Any) -> None:
    with operator_backend(state_backend) as backend:
        backend.get_list_state(SPLIT).add_all([1, 2, 3])
        backend.get_union_list_state(UNION).add("a")
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    assert isinstance(handle, OperatorStateHandle)
    assert {n: (p.mode, len(p.offsets)) for n, p in handle.states.items()} == {
        "offsets": (OperatorStateMode.SPLIT_DISTRIBUTE, 3),
        "names": (OperatorStateMode.UNION, 1),
    }
    decoded = read_operator_states(handle)
    assert [LongSerializer().deserialize(e) for e in decoded["offsets"][2]] == [1, 2, 3]


@pytest.mark.requirement("OS-5")
@pytest.mark.capability("operator_state")
def test_none_elements_are_rejected(state_backend: Any) -> None:
    with operator_backend(state_backend) as backend:
        state = backend.get_list_state(SPLIT)
        with pytest.raises(InvalidStateValueError):
            state.add(None)
        with pytest.raises(InvalidStateValueError):
            state.update([1, None])
        assert state.get() == []


@pytest.mark.requirement("OS-6")
@pytest.mark.capability("operator_state")
def test_unregistered_restored_state_is_carried_over(state_backend: Any, storage: Any) -> None:
    with operator_backend(state_backend) as backend:
        backend.get_list_state(SPLIT).add_all([4, 5])
        handle = backend.snapshot(1, 0, location_for(storage, 1)).run()
    with operator_backend(state_backend, (handle,)) as middle:
        assert middle.registered_state_names == {"offsets"}
        handle2 = middle.snapshot(2, 0, location_for(storage, 2)).run()
    with operator_backend(state_backend, (handle2,)) as final:
        assert final.get_list_state(SPLIT).get() == [4, 5]


@pytest.mark.requirement("OS-6")
@pytest.mark.capability("operator_state")
def test_mode_change_on_restore_fails(state_backend: Any, storage: Any) -> None:
    with operator_backend(state_backend) as backend:
        backend.get_list_state(SPLIT).add(1)
        handle = backend.snapshot(1, 0, location_for(storage)).run()
    with (
        operator_backend(state_backend, (handle,)) as restored,
        pytest.raises(StateMigrationError),
    ):
        restored.get_union_list_state(SPLIT)
