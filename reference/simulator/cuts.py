"""The consistent-cut check: a completed checkpoint of the simulated job must be a Chandy-Lamport cut. Per keyed
stage and key, the records the stage counted, plus those persisted as input channel state at it or upstream, plus
the output channel state upstream (sources' included), are exactly the key's records before its source's offset in
that checkpoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from statecert.reference.checkpointing import create_keyed_backend
from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.rescale import keyed_handles_for_subtask
from statecert.reference.simulator.record import Record
from statecert.reference.simulator.tasks import CHANNEL_STATE, OFFSET, OUTPUT_STATE, unpack
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.metadata import CheckpointMetadata, OperatorState
from statecert.spec.operator_backend import OperatorBackendParameters
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import VOID_NAMESPACE


def source_offsets(metadata: CheckpointMetadata, backend: Any) -> dict[int, int]:
    """Per source split, the offset a checkpoint or savepoint resumes it from."""
    offsets = {}
    for s, state in metadata.operator("source").subtask_states.items():
        with backend.create_operator_state_backend(
            OperatorBackendParameters("check", "source", state.managed_operator_state)
        ) as operator:
            offsets[s] = (operator.get_list_state(OFFSET).get() or [0])[0]
    return offsets


def operator_totals(
    op: OperatorState, backend: Any, keys: TypeSerializer[Any], aggregate: KeyedAggregate
) -> dict[str, int]:
    """Per key the aggregate's total in one operator's keyed state, restored subtask by subtask."""
    totals: dict[str, int] = {}
    for p in range(op.parallelism):
        params = KeyedBackendParameters(
            "check",
            op.operator_id,
            keys,
            op.max_parallelism,
            key_group_range_for_operator(op.max_parallelism, op.parallelism, p),
            keyed_handles_for_subtask(op, op.parallelism, p),
        )
        with create_keyed_backend(backend, params) as keyed:
            state = keyed.get_or_create_state(aggregate.descriptor)
            for key in list(keyed.get_keys(aggregate.descriptor.name, VOID_NAMESPACE)):
                keyed.set_current_key(key)
                totals[key] = aggregate.total(state.value())
    return totals


def cut_violations(
    metadata: CheckpointMetadata,
    backend: Any,
    keys: TypeSerializer[Any],
    input_weights: Callable[[dict[int, int]], Counter[Any]],
    stages: Sequence[str],
    original_key: Callable[[str, str], str],
    aggregate: KeyedAggregate,
) -> list[str]:
    """The stages whose state in `metadata` is not a consistent cut, each named with up to five wrong keys."""
    offsets = source_offsets(metadata, backend)

    def weights(records: Iterable[Record]) -> Counter[str]:
        totals: Counter[str] = Counter()
        for r in records:
            totals[aggregate.key(r.key, r.source)] += aggregate.weight(r.offset)
        return totals

    expected = input_weights(offsets)
    upstream: Counter[str] = Counter()  # channel state at earlier stages: records not yet counted downstream
    for state in metadata.operator("source").subtask_states.values():  # the sources' output channel state
        params = OperatorBackendParameters("check", "source", state.managed_operator_state)
        with backend.create_operator_state_backend(params) as ops:
            upstream += weights(unpack(raw) for raw in ops.get_list_state(OUTPUT_STATE).get())
    problems = []
    for stage in stages:
        op = metadata.operator(stage)
        counted: Counter[str] = Counter()
        input_state: Counter[str] = Counter()
        output_state: Counter[str] = Counter()
        for key, total in operator_totals(op, backend, keys, aggregate).items():
            counted[original_key(stage, key)] += total
        for p in range(op.parallelism):
            handles = op.subtask_states[p].managed_operator_state
            with backend.create_operator_state_backend(OperatorBackendParameters("check", stage, handles)) as ops:
                input_state += weights(unpack(raw) for raw in ops.get_list_state(CHANNEL_STATE).get())
                output_state += weights(unpack(raw) for raw in ops.get_list_state(OUTPUT_STATE).get())
        upstream += input_state
        seen = counted + upstream
        if seen != expected:
            wrong = sorted(k for k in set(seen) | set(expected) if seen[k] != expected[k])
            problems.append(
                f"checkpoint {metadata.checkpoint_id} is not a consistent cut at {stage} for keys {wrong[:5]}"
            )
        upstream += output_state
    return problems
