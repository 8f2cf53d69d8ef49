"""The `_metadata` file: magic number, format version, payload (FMT-1..FMT-4).

Version 4 (current): version 3 plus the changelog keyed state handle (CL-2).
Version 3 (read only): `>I magic | >I version | >Q payload length | msgpack payload | >I crc32(payload)`, every
file handle recording the CRC-32C of its file (FMT-12).
Version 2 (read only): the same without file checksums.
Version 1 (read only): `>I magic | >I version | UTF-8 JSON payload`, bytes as base64, no checksum.
The checkpoint code writes only the newest version; V1 to V3 encoding is kept for producing golden test files
(FMT-3). Decoding validates types, bounds and key-group coverage before anything is used (FMT-8, FMT-11).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from statecert.reference.format.coverage import check_operators
from statecert.reference.format.handle_codec import HandleCodec, bounded_int, field
from statecert.reference.format.paths import parent_url, relativize, resolve_relative
from statecert.spec.errors import CheckpointFormatError, UnknownFormatVersionError
from statecert.spec.metadata import CheckpointKind, CheckpointMetadata, OperatorState, OperatorSubtaskState

MAGIC = 0x53434D44  # "SCMD"
CURRENT_VERSION = 4
SUPPORTED_VERSIONS = (1, 2, 3, 4)
_HEADER = struct.Struct(">II")
_V2_LENGTH = struct.Struct(">Q")
_V2_CRC = struct.Struct(">I")
MAX_PAYLOAD = 1 << 31
MAX_CHECKPOINT_ID = 2**63 - 1


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
        timestamp = bounded_int(plain, "timestamp_ms")
    codec = make_codec(kind)
    checkpoint_id = bounded_int(plain, "checkpoint_id", 0, MAX_CHECKPOINT_ID)
    operators = []
    for op in field(plain, "operators", list):
        operator_id = field(op, "id", str)
        parallelism, max_parallelism = field(op, "parallelism", int), field(op, "max_parallelism", int)
        if not 1 <= parallelism <= max_parallelism <= 32768:
            raise ValueError(
                f"operator {operator_id!r}: invalid parallelism {parallelism} / max parallelism {max_parallelism}"
            )
        subtasks = {}
        for st in field(op, "subtasks", list):
            index = bounded_int(st, "index", 0, parallelism - 1)
            if index in subtasks:
                raise ValueError(f"operator {operator_id!r}: subtask {index} appears twice")
            subtasks[index] = OperatorSubtaskState(
                tuple(codec.decode_keyed(h, max_parallelism) for h in field(st, "keyed", list)),
                tuple(codec.decode_operator(h) for h in field(st, "operator", list)),
            )
        operators.append(OperatorState(operator_id, parallelism, max_parallelism, subtasks))
    check_operators(operators)
    return CheckpointMetadata(checkpoint_id, tuple(operators), kind, timestamp)


def encode_metadata(metadata: CheckpointMetadata, directory: str, version: int = CURRENT_VERSION) -> bytes:
    """Bytes of `_metadata` for a checkpoint whose directory is `directory` (file handles made relative)."""
    root = restore_root(directory, metadata.kind)
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"cannot write _metadata format version {version}")
    codec = HandleCodec(lambda url: relativize(url, directory, root), lambda rel: rel, version)
    plain = _to_plain(metadata, codec, version)
    if version == 1:
        return _HEADER.pack(MAGIC, 1) + json.dumps(plain, sort_keys=True).encode("utf-8")
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
        except RecursionError:
            raise CheckpointFormatError(path, "corrupt V1 payload: nested too deeply") from None
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
        return msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        raise CheckpointFormatError(path, f"corrupt payload: {exc!r}") from None


def decode_metadata(data: bytes, metadata_path: str, directory: str) -> CheckpointMetadata:
    """Parse `_metadata` bytes read from `metadata_path`; relative handles resolve against `directory`."""
    version = read_version(data, metadata_path)
    plain = _payload(data, version, metadata_path)

    def make_codec(kind: CheckpointKind) -> HandleCodec:
        root = restore_root(directory, kind)
        return HandleCodec(
            lambda url: url,
            lambda rel: resolve_relative(rel, directory, root, metadata_path),
            version,
        )

    try:
        return _from_plain(plain, version, make_codec)
    except CheckpointFormatError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise CheckpointFormatError(metadata_path, f"malformed metadata: {exc}") from None
