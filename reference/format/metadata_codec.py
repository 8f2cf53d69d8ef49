"""The `_metadata` file: magic number, format version, payload (FMT-1..FMT-4).

Version 2 (current): `>I magic | >I version | >Q payload length | msgpack payload | >I crc32(payload)`.
Version 1 (read only): `>I magic | >I version | UTF-8 JSON payload`, bytes as base64, no checksum.
Writers exist only for the newest version; V1 encoding is kept for producing golden test files (FMT-3).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from statecert.reference.format.handle_codec import HandleCodec, field
from statecert.reference.format.paths import parent_url, relativize, resolve_relative
from statecert.spec.errors import CheckpointFormatError, UnknownFormatVersionError
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState

MAGIC = 0x53434D44  # "SCMD"
CURRENT_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
_HEADER = struct.Struct(">II")
_V2_LENGTH = struct.Struct(">Q")
_V2_CRC = struct.Struct(">I")
MAX_PAYLOAD = 1 << 31


def restore_root(directory: str, kind: CheckpointKind) -> str:
    """A savepoint is self-contained; a checkpoint may also reference its job's `shared/` and `taskowned/` (FMT-10)."""
    return directory if kind.is_savepoint else parent_url(directory)


def _to_plain(metadata: CheckpointMetadata, codec: HandleCodec, version: int) -> dict[str, Any]:
    operators = []
    for op in metadata.operators:
        subtasks = [
            {
                "index": index,
                "keyed": [codec.keyed(h) for h in st.managed_keyed_state],
                "operator": [codec.operator(h) for h in st.managed_operator_state],
            }
            for index, st in sorted(op.subtask_states.items())
        ]
        operators.append(
            {
                "id": op.operator_id,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "subtasks": subtasks,
            }
        )
    plain: dict[str, Any] = {"checkpoint_id": metadata.checkpoint_id, "operators": operators}
    if version == 1:
        plain["savepoint"] = metadata.kind.is_savepoint
    else:
        plain["kind"] = metadata.kind.value
        plain["timestamp_ms"] = metadata.timestamp_ms
    return plain


def _from_plain(plain: Any, version: int, make_codec: Callable[[CheckpointKind], HandleCodec]) -> CheckpointMetadata:
    if version == 1:
        kind = CheckpointKind.SAVEPOINT_CANONICAL if field(plain, "savepoint", bool) else CheckpointKind.CHECKPOINT
        timestamp = 0
    else:
        kind = CheckpointKind(field(plain, "kind", str))
        timestamp = field(plain, "timestamp_ms", int)
    codec = make_codec(kind)
    checkpoint_id = field(plain, "checkpoint_id", int)
    operators = []
    for op in field(plain, "operators", list):
        parallelism, max_parallelism = field(op, "parallelism", int), field(op, "max_parallelism", int)
        if not 1 <= parallelism <= max_parallelism <= 32768:
            raise ValueError(f"invalid parallelism {parallelism} / max parallelism {max_parallelism}")
        subtasks = {}
        for st in field(op, "subtasks", list):
            subtasks[field(st, "index", int)] = OperatorSubtaskState(
                tuple(codec.decode_keyed(h) for h in field(st, "keyed", list)),
                tuple(codec.decode_operator(h) for h in field(st, "operator", list)),
            )
        operators.append(OperatorState(field(op, "id", str), parallelism, max_parallelism, subtasks))
    return CheckpointMetadata(checkpoint_id, tuple(operators), kind, timestamp)


def encode_metadata(metadata: CheckpointMetadata, directory: str, version: int = CURRENT_VERSION) -> bytes:
    """Bytes of `_metadata` for a checkpoint whose directory is `directory` (file handles made relative)."""
    root = restore_root(directory, metadata.kind)
    codec = HandleCodec(lambda url: relativize(url, directory, root), lambda rel: rel, binary=version != 1)
    plain = _to_plain(metadata, codec, version)
    if version == 1:
        return _HEADER.pack(MAGIC, 1) + json.dumps(plain, sort_keys=True).encode("utf-8")
    if version != CURRENT_VERSION:
        raise ValueError(f"cannot write _metadata format version {version}")
    payload = msgpack.packb(plain, use_bin_type=True)
    return _HEADER.pack(MAGIC, version) + _V2_LENGTH.pack(len(payload)) + payload + _V2_CRC.pack(zlib.crc32(payload))


def read_version(data: bytes, path: str) -> int:
    """The format version, after checking the magic number (FMT-1, FMT-2, FMT-3)."""
    if len(data) < _HEADER.size:
        raise CheckpointFormatError(path, f"truncated: {len(data)} bytes, too short for a _metadata header")
    magic, version = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointFormatError(path, f"not a statecert _metadata file (magic number 0x{magic:08x})")
    if version not in SUPPORTED_VERSIONS:
        raise UnknownFormatVersionError(
            path, f"unknown _metadata format version {version} (this reader knows {list(SUPPORTED_VERSIONS)})"
        )
    return int(version)


def _payload(data: bytes, version: int, path: str) -> Any:
    body = data[_HEADER.size :]
    if version == 1:
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointFormatError(path, f"corrupt or truncated V1 payload: {exc}") from None
    if len(body) < _V2_LENGTH.size:
        raise CheckpointFormatError(path, "truncated: no payload length")
    (length,) = _V2_LENGTH.unpack_from(body)
    available = len(body) - _V2_LENGTH.size - _V2_CRC.size
    if length > MAX_PAYLOAD or available < length:
        raise CheckpointFormatError(
            path, f"truncated: payload of {length} bytes announced, {max(available, 0)} present"
        )
    if available > length:
        raise CheckpointFormatError(path, f"corrupt: {available - length} unexpected bytes after the payload")
    payload = body[_V2_LENGTH.size : _V2_LENGTH.size + length]
    (crc,) = _V2_CRC.unpack_from(body, _V2_LENGTH.size + length)
    if zlib.crc32(payload) != crc:
        raise CheckpointFormatError(path, "corrupt: payload checksum mismatch")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise CheckpointFormatError(path, f"corrupt payload: {exc}") from None


def decode_metadata(data: bytes, metadata_path: str, directory: str) -> CheckpointMetadata:
    """Parse `_metadata` bytes read from `metadata_path`; relative handles resolve against `directory`."""
    version = read_version(data, metadata_path)
    plain = _payload(data, version, metadata_path)

    def make_codec(kind: CheckpointKind) -> HandleCodec:
        root = restore_root(directory, kind)
        return HandleCodec(
            lambda url: url,
            lambda rel: resolve_relative(rel, directory, root, metadata_path),
            binary=version != 1,
        )

    try:
        return _from_plain(plain, version, make_codec)
    except CheckpointFormatError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CheckpointFormatError(metadata_path, f"malformed metadata: {exc}") from None
