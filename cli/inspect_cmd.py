"""`statecert inspect PATH`: what a checkpoint or savepoint holds (format version, operators, subtasks, key-group
ranges, handle kinds and sizes), as a table or as JSON; with `--verify`, also whether every file it references is
there, intact and readable (FMT-14)."""

from __future__ import annotations

import json
from typing import Any

import fsspec
from rich.console import Console
from rich.table import Table

from statecert.reference.format.metadata_codec import read_version
from statecert.reference.storage.location import load_checkpoint_metadata, resolve_checkpoint_pointer
from statecert.spec.handles import (
    ByteStreamStateHandle,
    ChangelogStateBackendHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    StreamStateHandle,
)
from statecert.spec.metadata import CheckpointMetadata


def _stream(handle: StreamStateHandle) -> dict[str, Any]:
    if isinstance(handle, ByteStreamStateHandle):
        return {"kind": "inline", "size": handle.size}
    return {"kind": "file", "path": handle.path, "size": handle.size}


def _keyed(handle: KeyedStateHandle) -> dict[str, Any]:
    rng = [handle.key_group_range.start, handle.key_group_range.end]
    if isinstance(handle, ChangelogStateBackendHandle):
        return {
            "type": "changelog",
            "format": handle.snapshot_format,
            "key_groups": rng,
            "materialization": handle.materialization_id,
            "materialized_sequence": handle.materialized_sequence,
            "materialized": [_keyed(part) for part in handle.materialized],
            "segments": [
                {"changes": [s.from_sequence + 1, s.to_sequence], "stream": _stream(s.delegate)}
                for s in handle.changelog
            ],
            "size": handle.size,
        }
    if isinstance(handle, IncrementalKeyedStateHandle):
        return {
            "type": "incremental-key-groups",
            "format": handle.snapshot_format,
            "key_groups": rng,
            "files": {"shared": len(handle.shared_state), "private": len(handle.private_state)},
            "stream": {"kind": "files", "size": handle.size},
            "size": handle.size,
        }
    return {
        "type": "key-groups",
        "format": handle.snapshot_format,
        "key_groups": rng,
        "stream": _stream(handle.delegate),
        "size": handle.size,
    }


def describe_checkpoint(pointer: str) -> dict[str, Any]:
    """A plain-data description of the checkpoint at `pointer`."""
    location = resolve_checkpoint_pointer(pointer)
    with fsspec.open(location.metadata_path, "rb") as f:
        version = read_version(f.read(8), location.metadata_path)
    metadata: CheckpointMetadata = load_checkpoint_metadata(pointer)
    operators = []
    for op in metadata.operators:
        subtasks = []
        for index, st in sorted(op.subtask_states.items()):
            handles = [_keyed(h) for h in st.managed_keyed_state] + [
                {
                    "type": "operator",
                    "states": {
                        n: {"mode": p.mode.value, "elements": len(p.offsets)} for n, p in sorted(h.states.items())
                    },
                    "stream": _stream(h.delegate),
                    "size": h.size,
                }
                for h in st.managed_operator_state
            ]
            subtasks.append({"index": index, "state_size": st.state_size, "handles": handles})
        operators.append(
            {
                "id": op.operator_id,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "state_size": op.state_size,
                "subtasks": subtasks,
            }
        )
    return {
        "path": location.metadata_path,
        "format_version": version,
        "checkpoint_id": metadata.checkpoint_id,
        "kind": metadata.kind.value,
        "timestamp_ms": metadata.timestamp_ms,
        "operators": operators,
    }


def print_description(info: dict[str, Any], as_json: bool, console: Console) -> None:
    if as_json:
        print(json.dumps(info, indent=2))
        return
    console.print(f"[bold]{info['path']}[/bold]")
    console.print(
        f"format version {info['format_version']}, {info['kind']} {info['checkpoint_id']}, "
        f"{len(info['operators'])} operator(s)"
    )
    for op in info["operators"]:
        table = Table(
            title=f"operator {op['id']}: parallelism {op['parallelism']}, max parallelism "
            f"{op['max_parallelism']}, {op['state_size']} bytes"
        )
        for column in ("subtask", "handle", "key groups / states", "stored", "bytes"):
            table.add_column(column)
        for st in op["subtasks"]:
            for h in st["handles"]:
                what = (
                    f"[{h['key_groups'][0]}, {h['key_groups'][1]}]"
                    if "key_groups" in h
                    else ", ".join(f"{n} ({s['mode']}, {s['elements']})" for n, s in h["states"].items())
                )
                kind = f"{h['type']} ({h['format']})" if "format" in h else h["type"]
                if h["type"] == "changelog":
                    stored = (
                        f"materialization {h['materialization']} ({len(h['materialized'])} handle(s)), "
                        f"{len(h['segments'])} log segment(s)"
                    )
                else:
                    stored = h["stream"]["kind"]
                table.add_row(str(st["index"]), kind, what, stored, str(h["size"]))
        console.print(table)


def print_flink_description(info: dict[str, Any], as_json: bool, console: Console) -> None:
    """A Flink snapshot's description: per operator with keyed state, its states and each subtask's handle."""
    if as_json:
        print(json.dumps(info, indent=2))
        return
    console.print(f"[bold]{info['pointer']}[/bold]")
    console.print(
        f"written by Apache Flink: _metadata format version {info['format_version']}, checkpoint "
        f"{info['checkpoint_id']}, {len(info['operators'])} operator(s)"
    )
    for op in info["operators"]:
        label = op["uid"] or op["name"] or op["operator_id"]
        title = f"operator {label} ({op['operator_id']}): parallelism {op['parallelism']}, max {op['max_parallelism']}"
        if not op["states"]:
            console.print(f"{title}: no keyed state")
            continue
        table = Table(title=title)
        for column in ("subtask", "handle", "key groups", "stored"):
            table.add_column(column)
        for st in op["subtasks"]:
            keyed = st["keyed"]
            if keyed is None:
                continue
            files = keyed.get("files")
            stored = keyed["stream"]["kind"] if "stream" in keyed else ""
            if files is not None:
                stored = f"{files['shared']} shared, {files['private']} private files"
            table.add_row(
                str(st["index"]), keyed["type"], f"{keyed['key_groups'][0]}..{keyed['key_groups'][1]}", stored
            )
        console.print(table)
        console.print("states: " + ", ".join(f"{n} ({t})" for n, t in op["states"].items()))
        if "entries" in op:
            console.print(f"[green]verified[/green]: {op['entries']} entries decoded and checked")
            for name, reason in op["not_read"].items():
                console.print(f"not read: {name}: {reason}")
