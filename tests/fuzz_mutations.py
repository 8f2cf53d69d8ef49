"""Hypothesis strategies that damage or subvert what the reader fuzz tests feed the readers: byte-level damage
(flips, cuts, overwrites), hostile values, and structure-aware mutation of decoded plain data (msgpack or JSON
trees), so that most cases pass the container checks and reach the validation behind them."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

EDGE_INTS = [0, 1, -1, 127, 128, 255, 2**15, 2**16, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**64 - 1, -(2**63)]
EDGE_STRINGS = ["", ".", "..", "/", "/etc/passwd", "../x", "a/../../b", "\x00", "state:count", "native:rocksdb"]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EDGE_INTS),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.sampled_from(EDGE_STRINGS),
    st.text(max_size=12),
    st.binary(max_size=24),
)
hostile_values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 3)), children, max_size=4)
    ),
    max_leaves=12,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.sampled_from(EDGE_INTS) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def node_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path (keys and indexes) of every node below `node`."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += node_paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += node_paths(child, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, plain: Any, values: st.SearchStrategy[Any] = hostile_values) -> Any:
    """A deep copy of `plain` with 1 to 3 nodes replaced by hostile values, deleted or duplicated."""
    result = copy.deepcopy(plain)
    for _ in range(draw(st.integers(1, 3))):
        paths = node_paths(result)
        if not paths:
            return draw(values)
        path = draw(st.sampled_from(paths))
        parent = result
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        if action == "replace":
            parent[last] = draw(values)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        else:
            parent[f"{last}-copy"] = copy.deepcopy(parent[last])
    return result


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` cut short, with 1 to 4 bits flipped, or with a run of bytes overwritten (never unchanged)."""
    kind = draw(st.sampled_from(["cut", "flip", "flip", "overwrite"]))
    if kind == "cut" or not data:
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    out = bytearray(data)
    if kind == "flip":
        for position in draw(st.sets(st.integers(0, len(data) * 8 - 1), min_size=1, max_size=4)):
            out[position // 8] ^= 1 << (position % 8)
    else:
        start = draw(st.integers(0, len(data) - 1))
        patch = draw(st.binary(min_size=1, max_size=16))
        out[start : start + len(patch)] = patch
    result = bytes(out)
    return result if result != data else data[:-1]
