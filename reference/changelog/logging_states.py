"""State objects of the changelog backend: each forwards to the wrapped backend's state and appends what changed
to the log (CL-3), as Flink's `ChangelogValueState`, `ChangelogListState`... do. Every change is logged as its
result where replaying the operation would need the state's functions (reducing, aggregating, merges), so replay
needs no user code (CL-4)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from statecert.reference.changelog.records import Op
from statecert.spec.errors import InvalidStateValueError, UnsupportedFeatureError
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import (
    VOID_NAMESPACE,
    InternalAppendingState,
    StateKind,
    TtlConfig,
    TtlStateVisibility,
    TtlUpdateType,
)


class ChangeLogger(Protocol):
    def current_key_and_group(self) -> tuple[bytes, int]: ...

    def log_change(
        self, state: str, op: Op, namespace: bytes, payload: Any, at: tuple[bytes, int] | None = None
    ) -> None: ...


class LoggingState:
    """Forwards everything to `delegate`; subclasses log the writes (and TTL-refreshing reads)."""

    def __init__(
        self,
        logger: ChangeLogger,
        delegate: Any,
        name: str,
        namespace_serializer: TypeSerializer[Any],
        serializers: Mapping[str, TypeSerializer[Any]],
        ttl: TtlConfig | None,
    ) -> None:
        self.delegate = delegate
        self.name = name
        self.namespace_serializer = namespace_serializer
        self._logger = logger
        self._serializers = dict(serializers)
        self._namespace: Any = VOID_NAMESPACE
        # A read changes state when it refreshes what it returns (ON_READ_AND_WRITE, TTL-2) or cleans up an expired
        # entry it may still return (RETURN_EXPIRED_IF_NOT_CLEANED_UP, TTL-3): such reads are logged and replayed.
        self._touches = ttl is not None and (
            ttl.update_type is TtlUpdateType.ON_READ_AND_WRITE
            or ttl.visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
        )

    def _log(self, op: Op, payload: Any, namespace: Any = None, at: tuple[bytes, int] | None = None) -> None:
        ns = self._namespace if namespace is None else namespace
        self._logger.log_change(self.name, op, self.namespace_serializer.serialize(ns), payload, at)

    def _touch(self, payload: Any = None) -> None:
        if self._touches:
            self._log(Op.TOUCH, payload)

    def set_current_namespace(self, namespace: Any) -> None:
        self.delegate.set_current_namespace(namespace)
        self._namespace = namespace

    def clear(self) -> None:
        self.delegate.clear()
        self._log(Op.CLEAR, None)


class LoggingValueState(LoggingState):
    def value(self) -> Any:
        self._touch()
        return self.delegate.value()

    def update(self, value: Any) -> None:
        # serialized before the wrapped state changes: a value its serializer refuses changes nothing (SER-10), and
        # the log never lacks a write the wrapped state took
        payload = None if value is None else self._serializers["value"].serialize(value)
        self.delegate.update(value)
        self._log(Op.CLEAR if payload is None else Op.SET, payload)


class LoggingListState(LoggingState):
    def get(self) -> Any:
        self._touch()
        return self.delegate.get()

    def _elements(self, values: list[Any]) -> list[bytes]:
        """The elements' bytes, taken before the wrapped state changes: an element refused, None (KS-LIST-3) or one
        its serializer refuses (SER-10), leaves the list as it was, even over a backend that serializes only in its
        snapshot."""
        if any(v is None for v in values):
            raise InvalidStateValueError("list state takes no None elements (KS-LIST-3)")
        serialize = self._serializers["element"].serialize
        return [serialize(v) for v in values]

    def add(self, value: Any) -> None:
        (payload,) = self._elements([value])
        self.delegate.add(value)
        self._log(Op.ADD, payload)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        payload = self._elements(values)
        self.delegate.add_all(values)
        self._log(Op.ADD_ALL, payload)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        payload = self._elements(values)
        self.delegate.update(values)
        self._log(Op.REPLACE, payload)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Logged as the merge itself, which replay repeats on the wrapped state: logging the merged list instead
        would write every element anew at the merge's time, refreshing the TTL of each (TTL-4), and reading it
        would refresh them live under ON_READ_AND_WRITE."""
        sources = list(sources)
        self.delegate.merge_namespaces(target, sources)
        serialize = self.namespace_serializer.serialize
        self._log(Op.MERGE, [serialize(source) for source in sources], namespace=target)


class LoggingMapState(LoggingState):
    def _put_payload(self, user_key: Any, value: Any) -> list[bytes]:
        return [self._serializers["user_key"].serialize(user_key), self._serializers["user_value"].serialize(value)]

    def get(self, user_key: Any) -> Any:
        self._touch(self._serializers["user_key"].serialize(user_key))
        return self.delegate.get(user_key)

    def contains(self, user_key: Any) -> bool:
        self._touch(self._serializers["user_key"].serialize(user_key))
        return bool(self.delegate.contains(user_key))

    def put(self, user_key: Any, value: Any) -> None:
        payload = self._put_payload(user_key, value)  # before the wrapped state changes, as for value and list state
        self.delegate.put(user_key, value)
        self._log(Op.PUT, payload)

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        entries = dict(entries)
        payloads = [self._put_payload(user_key, value) for user_key, value in entries.items()]
        self.delegate.put_all(entries)
        for payload in payloads:
            self._log(Op.PUT, payload)

    def remove(self, user_key: Any) -> None:
        self.delegate.remove(user_key)
        self._log(Op.REMOVE, self._serializers["user_key"].serialize(user_key))

    def items(self) -> Any:
        entries = self.delegate.items()
        if not self._touches:
            return entries
        namespace, serialize = self._namespace, self._serializers["user_key"].serialize
        at = self._logger.current_key_and_group()  # the key iterated, whatever is current when an entry comes

        def touched() -> Iterator[tuple[Any, Any]]:
            for entry in entries:  # the wrapped state refreshed this entry as it returned it (TTL-2)
                self._log(Op.TOUCH, serialize(entry[0]), namespace=namespace, at=at)
                yield entry

        return touched()

    def keys(self) -> Any:
        return (k for k, _ in self.items())

    def values(self) -> Any:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        return bool(self.delegate.is_empty())  # refreshes nothing (TTL-2): nothing to log

    def iterator(self) -> LoggingMapIterator:
        return LoggingMapIterator(self, self.delegate.iterator())


class LoggingMapIterator(Iterator[tuple[Any, Any]]):
    """Logs each entry it returns as a TTL-refreshing read (with ON_READ_AND_WRITE, TTL-2); `remove()` removes the
    last returned entry through the wrapped iterator and logs it."""

    def __init__(self, state: LoggingMapState, delegate: Any) -> None:
        self._state = state
        self._delegate = delegate
        self._namespace = state._namespace
        self._at = state._logger.current_key_and_group()
        self._last: Any = None

    def __next__(self) -> tuple[Any, Any]:
        entry = next(self._delegate)
        self._last = entry
        if self._state._touches:
            user_key = self._state._serializers["user_key"].serialize(entry[0])
            self._state._log(Op.TOUCH, user_key, namespace=self._namespace, at=self._at)
        return entry  # type: ignore[no-any-return]

    def remove(self) -> None:
        self._delegate.remove()
        if self._last is not None:
            user_key = self._state._serializers["user_key"].serialize(self._last[0])
            self._state._log(Op.REMOVE, user_key, namespace=self._namespace, at=self._at)


class LoggingReducingState(LoggingState):
    """Logs the reduced value after each add (replay sets it; no reduce function needed)."""

    def get(self) -> Any:
        self._touch()
        return self.delegate.get()

    def _stored(self) -> Any:
        if isinstance(self.delegate, InternalAppendingState):
            return self.delegate.get_internal()
        return self.delegate.get()

    def add(self, value: Any) -> None:
        self.delegate.add(value)
        if value is not None:  # a None the wrapped state did not refuse changed nothing (KS-RED-2): nothing to log
            self._log(Op.SET, self._serializers["value"].serialize(self._stored()))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        _merge_and_log(self, target, list(sources), self._stored, self._serializers["value"])


class LoggingAggregatingState(LoggingState):
    """Logs the accumulator after each add, read through `get_internal` (CL-9)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if not isinstance(self.delegate, InternalAppendingState):
            raise UnsupportedFeatureError(
                f"aggregating state {self.name!r}: the wrapped backend's state has no get_internal/update_internal, "
                "which the changelog needs to log accumulators (CL-9)"
            )

    def get(self) -> Any:
        self._touch()
        return self.delegate.get()

    def add(self, value: Any) -> None:
        self.delegate.add(value)
        self._log(Op.SET, self._serializers["value"].serialize(self.delegate.get_internal()))

    def get_internal(self) -> Any:
        return self.delegate.get_internal()

    def update_internal(self, value: Any) -> None:
        self.delegate.update_internal(value)
        if value is None:
            self._log(Op.CLEAR, None)
        else:
            self._log(Op.SET, self._serializers["value"].serialize(value))

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        _merge_and_log(self, target, list(sources), self.delegate.get_internal, self._serializers["value"])


def _merge_and_log(
    state: LoggingState,
    target: Any,
    sources: list[Any],
    read: Any,
    serializer: TypeSerializer[Any],
) -> None:
    """Merge reducing or aggregating state and log the result (replay has no function to merge with): each source
    cleared (KS-MERGE-2), and the target's new content, unless every source was empty. Then the wrapped state left
    the target as it was, its TTL timestamp included, and logging its value would write it anew at replay."""
    moved = [source for source in sources if source != target and _read_in(state, source, read) is not None]
    state.delegate.merge_namespaces(target, sources)
    for source in sources:
        if source != target:
            state._log(Op.CLEAR, None, namespace=source)
    if not moved:
        return
    result = _read_in(state, target, read)
    if result is None:
        state._log(Op.CLEAR, None, namespace=target)
    else:
        state._log(Op.SET, serializer.serialize(result), namespace=target)


def _read_in(state: LoggingState, namespace: Any, read: Any) -> Any:
    """`read()` of the wrapped state in `namespace`, leaving its current namespace as it was."""
    state.delegate.set_current_namespace(namespace)
    try:
        return read()
    finally:
        state.delegate.set_current_namespace(state._namespace)


LOGGING_STATES: dict[StateKind, type[LoggingState]] = {
    StateKind.VALUE: LoggingValueState,
    StateKind.LIST: LoggingListState,
    StateKind.MAP: LoggingMapState,
    StateKind.REDUCING: LoggingReducingState,
    StateKind.AGGREGATING: LoggingAggregatingState,
}
