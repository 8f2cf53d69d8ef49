"""State time-to-live written from statecert's spec alone: chapter TTL and its stored form (IF-5). It imports
nothing from `statecert.reference`.

Every value, list element and map user value of a state with TTL is stored as an 8-byte big-endian signed
last-access timestamp in milliseconds on the backend's clock, then the serializer's bytes; snapshots and restores
copy those bytes, so an entry expires at the same instant whether or not the job was restored (TTL-6).
"""

from __future__ import annotations

import struct

from statecert.spec.state import Clock, TtlConfig, TtlStateVisibility, TtlUpdateType

STAMP = struct.Struct(">q")


class Ttl:
    """The TTL of one state, or none: stamps what is written and decides what a read returns and keeps."""

    def __init__(self, config: TtlConfig | None, clock: Clock) -> None:
        self.config, self.clock = config, clock
        self.on = config is not None
        self.refresh_on_read = config is not None and config.update_type is TtlUpdateType.ON_READ_AND_WRITE
        self.return_expired = (
            config is not None and config.visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
        )

    def stamp(self, payload: bytes) -> bytes:
        """What to store for `payload` written now (a write refreshes, TTL-2)."""
        return STAMP.pack(self.clock.now_ms()) + payload if self.on else payload

    def payload(self, stored: bytes) -> bytes:
        return stored[STAMP.size :] if self.on else stored

    def expired(self, stored: bytes) -> bool:
        """TTL-1: `ttl_ms` have passed since the stored last access."""
        if self.config is None:
            return False
        (last_access,) = STAMP.unpack_from(stored)
        return bool(last_access + self.config.ttl_ms <= self.clock.now_ms())

    def visible(self, stored: bytes) -> bool:
        return self.return_expired or not self.expired(stored)

    def read(self, stored: bytes) -> tuple[bytes | None, bytes | None]:
        """A read of `stored`: (the payload to return, or None; what to keep stored, or None to clean it up).
        An expired entry is cleaned up by the read, returned only with RETURN_EXPIRED_IF_NOT_CLEANED_UP (TTL-3); a
        live one is refreshed with ON_READ_AND_WRITE (TTL-2)."""
        if not self.on:
            return stored, stored
        payload = self.payload(stored)
        if self.expired(stored):
            return (payload if self.return_expired else None), None
        return payload, (self.stamp(payload) if self.refresh_on_read else stored)
