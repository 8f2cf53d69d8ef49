"""The final state of a scenario run in plain Python: per key the aggregate's total in a completed checkpoint or
savepoint, read back through a backend (the Spark runner reads it as a DataFrame instead, `spark.state_reader`)."""

from __future__ import annotations

from typing import Any

from statecert.reference.keyed_aggregate import KeyedAggregate
from statecert.reference.rescale import keyed_handles_for_subtask
from statecert.reference.serializers import StringSerializer
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.spec.keyed_backend import KeyedBackendParameters
from statecert.spec.keygroups import key_group_range_for_operator
from statecert.spec.state import VOID_NAMESPACE

SINK_OPERATOR = "counter"


def final_totals(pointer: str, backend: Any, aggregate: KeyedAggregate) -> dict[str, int]:
    """Per key (the second shuffle's `/2` suffix removed) the total of the sink operator's aggregate."""
    metadata = load_checkpoint_metadata(pointer)
    op = metadata.operator(SINK_OPERATOR)
    totals: dict[str, int] = {}
    for p in range(op.parallelism):
        params = KeyedBackendParameters(
            "final-state",
            SINK_OPERATOR,
            StringSerializer(),
            op.max_parallelism,
            key_group_range_for_operator(op.max_parallelism, op.parallelism, p),
            keyed_handles_for_subtask(op, op.parallelism, p),
        )
        with backend.create_keyed_state_backend(params) as keyed:
            state = keyed.get_or_create_state(aggregate.descriptor)
            for key in list(keyed.get_keys(aggregate.descriptor.name, VOID_NAMESPACE)):
                keyed.set_current_key(key)
                totals[key.removesuffix("/2")] = aggregate.total(state.value())
    return totals
