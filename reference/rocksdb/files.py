"""Moving RocksDB files between the local disk and checkpoint storage (RDB-2, RDB-3)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from statecert.spec.errors import SnapshotCancelledError
from statecert.spec.handles import ByteStreamStateHandle, StreamStateHandle
from statecert.spec.storage import CheckpointedStateScope, CheckpointStreamFactory

CHUNK = 1 << 20


def upload_file(
    path: Path, factory: CheckpointStreamFactory, scope: CheckpointedStateScope, cancelled: Callable[[], bool]
) -> StreamStateHandle:
    """Copy one local file into a checkpoint stream; an empty file becomes an empty inline handle."""
    with factory.create_checkpoint_state_output_stream(scope) as out, path.open("rb") as f:
        while chunk := f.read(CHUNK):
            if cancelled():
                raise SnapshotCancelledError(f"snapshot cancelled while uploading {path.name}")
            out.write(chunk)
        handle = out.close_and_get_handle()
    return handle if handle is not None else ByteStreamStateHandle(path.name, b"")


def download_files(files: Mapping[str, StreamStateHandle], target: Path) -> None:
    """Write each handle's bytes to `target/<name>`; names are plain file names, never paths (FMT-10)."""
    target.mkdir(parents=True, exist_ok=True)
    for name, handle in files.items():
        if os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"invalid RocksDB file name {name!r} in a state handle")
        with handle.open() as source, (target / name).open("wb") as sink:
            shutil.copyfileobj(source, sink, CHUNK)
