"""Validating restored key-group entries before they become state (FMT-8, FMT-11): every key, namespace and value
must decode with the serializers that wrote it, TTL-wrapped bytes must hold their timestamp, and every key must
hash into the key group whose block holds it. Bytes that fail would surface later as a wrong type of error on
access, or (a key in the wrong key group) as state no lookup ever finds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statecert.reference.format.state_meta import StateMetaInfo
from statecert.reference.serializers import restore_serializer
from statecert.spec.errors import CheckpointFormatError, StateCertError
from statecert.spec.keygroups import assign_to_key_group
from statecert.spec.serializers import TypeSerializer
from statecert.spec.state import StateKind

TTL_TIMESTAMP_BYTES = 8
DECODE_ERRORS = (ValueError, TypeError, LookupError, ArithmeticError, RecursionError, AttributeError)


def restorable(snapshot: Any, source: str = "serializer snapshot") -> TypeSerializer[Any] | None:
    """The serializer of a snapshot if this process knows its id (others are checked by their owner on use); a
    known id with a configuration of the wrong shape is a CheckpointFormatError naming `source` (FMT-8)."""
    try:
        return restore_serializer(snapshot)
    except StateCertError:
        return None
    except DECODE_ERRORS as exc:
        raise CheckpointFormatError(source, f"a serializer configuration of the wrong shape ({exc!r})") from None


class EntryValidator:
    """Checks the entries of one canonical stream (`source` names it in errors)."""

    def __init__(
        self,
        states: Sequence[StateMetaInfo],
        key_serializer: TypeSerializer[Any] | None,
        max_parallelism: int,
        source: str,
    ) -> None:
        self._states = states
        self._keys = key_serializer
        self._max_parallelism = max_parallelism
        self._source = source
        self._namespaces = [restorable(m.namespace_serializer, source) for m in states]
        self._values = [{role: restorable(s, source) for role, s in m.serializers.items()} for m in states]

    def _fail(self, key_group: int, state: StateMetaInfo, what: str, exc: BaseException) -> CheckpointFormatError:
        return CheckpointFormatError(
            self._source, f"key group {key_group}: state {state.name!r}: {what} cannot be read ({exc!r})"
        )

    def _in_its_encoding(
        self, key_group: int, meta: StateMetaInfo, what: str, serializer: Any, stored: bytes, decoded: Any
    ) -> None:
        """Bytes a lookup finds by (a key, a namespace, a map user key) must be those the serializer writes for what
        they decode to (FMT-15): others (a msgpack int in a wider format, a NaN of other bits) would never be found."""
        try:
            written = serializer.serialize(decoded)
        except DECODE_ERRORS as exc:
            raise self._fail(key_group, meta, what, exc) from None
        if written != stored:
            raise CheckpointFormatError(
                self._source,
                f"key group {key_group}: state {meta.name!r}: {what} is not in the encoding its serializer writes "
                f"({stored.hex()[:32]}, written as {written.hex()[:32]}): it would never be found",
            )

    def _value(self, key_group: int, index: int, role: str, stored: bytes, ttl_wrapped: bool = True) -> None:
        meta = self._states[index]
        if ttl_wrapped and meta.ttl and role != "user_key":  # map user keys are never TTL-wrapped (IF-5)
            if len(stored) < TTL_TIMESTAMP_BYTES:
                raise CheckpointFormatError(
                    self._source, f"key group {key_group}: state {meta.name!r}: TTL entry shorter than its timestamp"
                )
            stored = stored[TTL_TIMESTAMP_BYTES:]
        serializer = self._values[index].get(role)
        if serializer is not None:
            try:
                if role == "user_key":
                    self._in_its_encoding(
                        key_group, meta, "a map user key", serializer, stored, serializer.deserialize(stored)
                    )
                else:
                    serializer.deserialize(stored)
            except DECODE_ERRORS as exc:
                raise self._fail(key_group, meta, f"a {role} value", exc) from None

    def check(self, key_group: int, index: int, key: bytes, namespace: bytes, payload: Any) -> None:
        """Raise CheckpointFormatError naming the stream, key group and state for an entry that cannot be used."""
        self.check_key(key_group, index, key, namespace)
        meta = self._states[index]
        if meta.kind is StateKind.LIST:
            for element in payload:
                self._value(key_group, index, "element", element)
        elif meta.kind is StateKind.MAP:
            for user_key, value in payload:
                self._value(key_group, index, "user_key", user_key)
                self._value(key_group, index, "user_value", value)
        else:
            self._value(key_group, index, "value", payload)

    def check_key(self, key_group: int, index: int, key: bytes, namespace: bytes) -> None:
        """The key and namespace of an entry or a logged change (FMT-15, CL-4): each in its serializer's encoding,
        the key of `key_group`; else CheckpointFormatError naming the stream, key group and state."""
        meta = self._states[index]
        home = key_group
        if self._keys is not None:
            try:
                decoded = self._keys.deserialize(key)
                home = assign_to_key_group(self._keys.key_hash(decoded), self._max_parallelism)
                self._in_its_encoding(key_group, meta, "a key", self._keys, key, decoded)
            except DECODE_ERRORS as exc:
                raise self._fail(key_group, meta, "a key", exc) from None
        if home != key_group:
            raise CheckpointFormatError(
                self._source,
                f"key group {key_group}: state {meta.name!r} holds a key of key group {home}: it would never be found",
            )
        self.check_namespace(key_group, index, namespace)

    def check_namespace(self, key_group: int, index: int, namespace: bytes) -> None:
        """A namespace of state number `index` in its serializer's encoding (FMT-15)."""
        meta = self._states[index]
        ns_serializer = self._namespaces[index]
        if ns_serializer is not None:
            try:
                decoded_namespace = ns_serializer.deserialize(namespace)
                self._in_its_encoding(key_group, meta, "a namespace", ns_serializer, namespace, decoded_namespace)
            except DECODE_ERRORS as exc:
                raise self._fail(key_group, meta, "a namespace", exc) from None

    def check_logged_value(self, key_group: int, index: int, role: str, stored: bytes) -> None:
        """A value a changelog change carries (CL-4), in role `role` of state number `index`: readable by its
        serializer, a map user key in its encoding. Logged values are never TTL-wrapped: replay writes them at
        their logged time."""
        self._value(key_group, index, role, stored, ttl_wrapped=False)
