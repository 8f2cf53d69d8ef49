"""TTL for stored bytes: an 8-byte last-access timestamp before the payload (TTL-1..TTL-4)."""

from __future__ import annotations

import struct

from statecert.spec.state import Clock, TtlConfig, TtlStateVisibility, TtlUpdateType

_TS = struct.Struct(">q")


class TtlPolicy:
    """Wraps and checks stored bytes of one state; a no-op when the state has no TTL."""

    def __init__(self, ttl: TtlConfig | None, clock: Clock) -> None:
        self.ttl = ttl
        self.clock = clock
        self.update_on_read = ttl is not None and ttl.update_type is TtlUpdateType.ON_READ_AND_WRITE
        self.return_expired = ttl is not None and ttl.visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    @property
    def enabled(self) -> bool:
        return self.ttl is not None

    def wrap(self, payload: bytes) -> bytes:
        return payload if self.ttl is None else _TS.pack(self.clock.now_ms()) + payload

    def payload(self, stored: bytes) -> bytes:
        return stored if self.ttl is None else stored[_TS.size :]

    def expired(self, stored: bytes) -> bool:
        """Expired once `ttl_ms` have passed since the last access that refreshed it (TTL-1)."""
        if self.ttl is None:
            return False
        (last_access,) = _TS.unpack_from(stored)
        return bool(last_access + self.ttl.ttl_ms <= self.clock.now_ms())

    def visible(self, stored: bytes) -> bool:
        """Whether an entry, expired or not, may be returned (TTL-3)."""
        return self.return_expired or not self.expired(stored)


def rewrap(stored: bytes, new_payload: bytes, ttl_enabled: bool) -> bytes:
    """Replace the payload, keeping the timestamp (used by serializer migration)."""
    return stored[: _TS.size] + new_payload if ttl_enabled else new_payload
