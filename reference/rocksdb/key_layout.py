"""RocksDB key layout: `>H key group | >I len | key | >I len | namespace [| user key]` (RDB-1).

The key group comes first, so each key group is one contiguous, ordered range that can be scanned, cut out and
deleted by range; the length prefixes make (key, namespace) unambiguous, and a map's user keys follow the
composite key, so one (key, namespace) is a contiguous range as well.
"""

from __future__ import annotations

import struct

_KG = struct.Struct(">H")
_LEN = struct.Struct(">I")


def key_group_prefix(key_group: int) -> bytes:
    return _KG.pack(key_group)


def composite_key(key_group: int, key: bytes, namespace: bytes) -> bytes:
    return b"".join((_KG.pack(key_group), _LEN.pack(len(key)), key, _LEN.pack(len(namespace)), namespace))


def split_composite_key(raw: bytes) -> tuple[int, bytes, bytes, bytes]:
    """(key group, key, namespace, rest): `rest` is a map entry's user key, empty otherwise. Raises ValueError
    when the lengths do not fit `raw` (a corrupt or foreign key)."""
    if len(raw) < 10:
        raise ValueError(f"composite key of {len(raw)} bytes is too short")
    (key_group,) = _KG.unpack_from(raw, 0)
    (key_len,) = _LEN.unpack_from(raw, 2)
    if 10 + key_len > len(raw):
        raise ValueError(f"composite key announces a key of {key_len} bytes, {len(raw) - 10} present")
    key = raw[6 : 6 + key_len]
    (ns_len,) = _LEN.unpack_from(raw, 6 + key_len)
    ns_start = 10 + key_len
    if ns_start + ns_len > len(raw):
        raise ValueError(f"composite key announces a namespace of {ns_len} bytes, {len(raw) - ns_start} present")
    return key_group, key, raw[ns_start : ns_start + ns_len], raw[ns_start + ns_len :]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with `prefix` (exclusive range end)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\xff" * (len(prefix) + 1)
    return trimmed[:-1] + bytes([trimmed[-1] + 1])
