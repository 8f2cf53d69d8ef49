"""State descriptors, the keyed state kinds, namespaces and TTL (spec chapters KS and TTL)."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from statecert.spec.serializers import TypeSerializer

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
IN_contra = TypeVar("IN_contra", contravariant=True)
OUT_co = TypeVar("OUT_co", covariant=True)
K_co = TypeVar("K_co", covariant=True)
V_co = TypeVar("V_co", covariant=True)


class StateKind(str, enum.Enum):
    """The five keyed state kinds (KS-1)."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class VoidNamespace:
    """The namespace of non-windowed state (KS-NS-1); a singleton."""

    _instance: VoidNamespace | None = None

    def __new__(cls) -> VoidNamespace:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "VOID_NAMESPACE"


VOID_NAMESPACE = VoidNamespace()


class TtlUpdateType(str, enum.Enum):
    """When the last-access timestamp of a TTL'd entry is refreshed (TTL-2)."""

    ON_CREATE_AND_WRITE = "on-create-and-write"
    ON_READ_AND_WRITE = "on-read-and-write"


class TtlStateVisibility(str, enum.Enum):
    """Whether an expired entry that is still stored may be returned (TTL-3)."""

    NEVER_RETURN_EXPIRED = "never-return-expired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return-expired-if-not-cleaned-up"


@dataclass(frozen=True)
class TtlConfig:
    """Time-to-live of state entries in milliseconds, measured on the backend's injectable clock (TTL-1)."""

    ttl_ms: int
    update_type: TtlUpdateType = TtlUpdateType.ON_CREATE_AND_WRITE
    visibility: TtlStateVisibility = TtlStateVisibility.NEVER_RETURN_EXPIRED

    def __post_init__(self) -> None:
        if not 0 < self.ttl_ms <= 2**63 - 1:
            raise ValueError(f"TTL must lie in 1..Long.MAX_VALUE ms (TTL-1), got {self.ttl_ms} ms")


class Clock(Protocol):
    """Milliseconds since the epoch; injectable so TTL is testable (TTL-1)."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to, for tests and simulations."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms


class AggregateFunction(Protocol[IN_contra, ACC, OUT_co]):
    """Flink's AggregateFunction: accumulate inputs, merge accumulators, extract a result (KS-AGG-1)."""

    def create_accumulator(self) -> ACC: ...

    def add(self, value: IN_contra, accumulator: ACC) -> ACC: ...

    def get_result(self, accumulator: ACC) -> OUT_co: ...

    def merge(self, a: ACC, b: ACC) -> ACC: ...


def check_state_name(name: str) -> str:
    """`name` if it is a name KS-2 allows (text without NUL, encodable as UTF-8: no lone surrogate), else a
    `ValueError` naming it: a name IF-3's msgpack header or a RocksDB column family cannot hold must fail where it
    is given, not at the first checkpoint."""
    if not isinstance(name, str):
        raise TypeError(f"a state name is text, got {type(name).__name__} (KS-2)")
    if "\x00" in name:
        raise ValueError(f"state name {name!r} holds a NUL character (KS-2)")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"state name {name!r} holds a lone surrogate at {e.start}, which UTF-8 cannot encode (KS-2)"
        ) from None
    return name


@dataclass(frozen=True, eq=False)
class StateDescriptor:
    """Names a state and how its values are serialized; unique by name within a backend (KS-2). A name KS-2
    does not allow is refused here, as Flink's `StateDescriptor` refuses a null one, so no backend meets it."""

    name: str
    ttl: TtlConfig | None = None

    def __post_init__(self) -> None:
        check_state_name(self.name)

    @property
    def kind(self) -> StateKind:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class ValueStateDescriptor(StateDescriptor, Generic[T]):
    serializer: TypeSerializer[T] | None = None
    default: T | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.VALUE


@dataclass(frozen=True, eq=False)
class ListStateDescriptor(StateDescriptor, Generic[T]):
    element_serializer: TypeSerializer[T] | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.LIST


@dataclass(frozen=True, eq=False)
class MapStateDescriptor(StateDescriptor, Generic[K, V]):
    user_key_serializer: TypeSerializer[K] | None = None
    user_value_serializer: TypeSerializer[V] | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.MAP


@dataclass(frozen=True, eq=False)
class ReducingStateDescriptor(StateDescriptor, Generic[T]):
    reduce_function: Callable[[T, T], T] | None = None
    serializer: TypeSerializer[T] | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.REDUCING


@dataclass(frozen=True, eq=False)
class AggregatingStateDescriptor(StateDescriptor, Generic[IN, ACC, OUT]):
    aggregate_function: AggregateFunction[IN, ACC, OUT] | None = None
    accumulator_serializer: TypeSerializer[ACC] | None = None

    @property
    def kind(self) -> StateKind:
        return StateKind.AGGREGATING


@runtime_checkable
class State(Protocol):
    """State bound to the backend's current key and this state's current namespace (KS-3)."""

    def clear(self) -> None:
        """Remove the value for the current key and namespace, leaving no entry behind (KS-4)."""
        ...

    def set_current_namespace(self, namespace: Any) -> None:
        """Select the namespace of further accesses; None is rejected, here or by the next access (KS-NS-1)."""
        ...


class ValueState(State, Protocol[T]):
    def value(self) -> T | None:
        """The value, or a fresh copy of the descriptor's default when there is none (KS-VALUE-1, KS-VALUE-2)."""
        ...

    def update(self, value: T | None) -> None:
        """Set the value; None clears (KS-VALUE-3)."""
        ...


class ListState(State, Protocol[T]):
    def get(self) -> list[T] | None:
        """The elements in insertion order, or None when there are none (KS-LIST-1)."""
        ...

    def add(self, value: T) -> None: ...

    def add_all(self, values: Iterable[T]) -> None: ...

    def update(self, values: Iterable[T]) -> None: ...


class MapStateIterator(Iterator[tuple[K_co, V_co]], Protocol[K_co, V_co]):
    def remove(self) -> None:
        """Remove the entry last returned; a second call for the same entry raises IllegalStateError (KS-MAP-5)."""
        ...


class MapState(State, Protocol[K, V]):
    """User-key -> value entries (KS-MAP-*). With TTL `ON_READ_AND_WRITE`, `get` and `contains` refresh their entry,
    an iteration each entry as it returns it, `is_empty` nothing (TTL-2); with only expired entries left, `is_empty`
    may be true or false (TTL-3)."""

    def get(self, key: K) -> V | None: ...

    def put(self, key: K, value: V) -> None: ...

    def put_all(self, entries: Mapping[K, V]) -> None: ...

    def remove(self, key: K) -> None:
        """Remove the user key's entry; an absent user key changes nothing and raises nothing (KS-MAP-1)."""
        ...

    def contains(self, key: K) -> bool: ...

    def items(self) -> Iterable[tuple[K, V]]:
        """Every entry once (KS-MAP-2), an iterable that need not be a list."""
        ...

    def keys(self) -> Iterable[K]: ...

    def values(self) -> Iterable[V]: ...

    def iterator(self) -> MapStateIterator[K, V]: ...

    def is_empty(self) -> bool: ...


class ReducingState(State, Protocol[T]):
    def get(self) -> T | None: ...

    def add(self, value: T) -> None:
        """Reduce value into the stored one as `reduce(stored, value)` (KS-RED-1); None leaves the value unchanged,
        raising `InvalidStateValueError` or ignored (KS-RED-2)."""
        ...


class AggregatingState(State, Protocol[IN_contra, OUT_co]):
    def get(self) -> OUT_co | None: ...

    def add(self, value: IN_contra) -> None: ...


class MergingState(State, Protocol):
    """List, reducing and aggregating state can merge namespaces (KS-MERGE-1)."""

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Fold the sources' values into target (for the current key) and clear the sources (KS-MERGE-1..3)."""
        ...


@runtime_checkable
class InternalAppendingState(State, Protocol):
    """Direct access to the stored value of reducing state or the accumulator of aggregating state (Flink's
    `InternalAppendingState`); the changelog backend logs and replays aggregating state through it (CL-9)."""

    def get_internal(self) -> Any:
        """The stored value (reducing) or accumulator (aggregating) for the current key and namespace, None when
        nothing is stored: the changelog logs a merge whose target reads None as a clear (CL-9, KS-MERGE-2)."""
        ...

    def update_internal(self, value: Any) -> None:
        """Replace the stored value or accumulator with `value`, which is never None when the changelog replays
        (CL-9). What None does is left open: the suite never passes it (the reference backends clear)."""
        ...
