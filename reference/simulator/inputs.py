"""The seeded input of a job: per source split, records with a key drawn from the split's keys (uniform, or skewed
so that a few keys get most records). The simulator and the Spark runner draw the same input from the same seed.

The draws are the ones `random.Random.randrange` (uniform) or `random.Random.random` (skewed) would make one record
at a time, made in arrays: numpy's MT19937 is Python's generator, so it is started from the `Random`'s state,
produces the same 32-bit words, and the `Random` is left where the record-at-a-time draws would have left it. Inputs
(and savepoints taken from them) stay the same for a seed while drawing millions of keys costs no Python per record.
"""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt

from statecert.reference.simulator.record import Record

_WORD_BITS = 32


def _generator(rng: random.Random) -> np.random.MT19937:
    """A numpy MT19937 at `rng`'s place in its stream."""
    version, state, _ = rng.getstate()
    assert version == 3, f"random.Random state version 3 expected, got {version}"
    generator = np.random.MT19937()
    generator.state = {
        "bit_generator": "MT19937",
        "state": {"key": np.array(state[:-1], dtype=np.uint32), "pos": state[-1]},
    }
    return generator


def _take_words(rng: random.Random, count: int) -> npt.NDArray[np.uint64]:
    """The next `count` 32-bit words of `rng`'s stream; `rng` moves past them."""
    generator = _generator(rng)
    words = generator.random_raw(count)
    key, pos = generator.state["state"]["key"], generator.state["state"]["pos"]
    rng.setstate((3, (*(int(k) for k in key), int(pos)), rng.getstate()[2]))
    return np.asarray(words, dtype=np.uint64)


def _peek_words(rng: random.Random, count: int, skip: int) -> npt.NDArray[np.uint64]:
    """The `count` words after the next `skip` of `rng`'s stream, leaving `rng` where it is."""
    generator = _generator(rng)
    if skip:
        generator.random_raw(skip)
    return np.asarray(generator.random_raw(count), dtype=np.uint64)


def randbelow(rng: random.Random, n: int, count: int) -> npt.NDArray[np.int64]:
    """`count` draws of `rng.randrange(n)` in order, as `Random._randbelow_with_getrandbits` makes them: a draw
    takes the top `n.bit_length()` bits of a word and is drawn again while it is `>= n`."""
    if not 0 < n < 2**_WORD_BITS:
        raise ValueError(f"the number of keys must be in [1, 2**32), got {n}")
    shift = np.uint64(_WORD_BITS - n.bit_length())
    accepted: list[npt.NDArray[np.uint64]] = []
    scanned = found = 0
    while found < count:  # at most half the draws are rejected: about two rounds
        chunk = _peek_words(rng, max(64, (count - found) * 2 + 64), scanned) >> shift
        hits = np.flatnonzero(chunk < n)
        need = count - found
        if len(hits) >= need:
            accepted.append(chunk[hits[:need]])
            scanned += int(hits[need - 1]) + 1
            found = count
        else:
            accepted.append(chunk[hits])
            scanned += len(chunk)
            found += len(hits)
    _take_words(rng, scanned)
    return np.concatenate(accepted).astype(np.int64) if accepted else np.zeros(0, dtype=np.int64)


def uniform_floats(rng: random.Random, count: int) -> npt.NDArray[np.float64]:
    """`count` draws of `rng.random()` in order (53 bits from two words each, as `genrand_res53`)."""
    words = _take_words(rng, 2 * count)
    high, low = words[0::2] >> np.uint64(5), words[1::2] >> np.uint64(6)
    floats: npt.NDArray[np.float64] = (high.astype(np.float64) * 67108864.0 + low.astype(np.float64)) * (
        1.0 / 9007199254740992.0
    )
    return floats


def draw_key_indices(
    rng: random.Random, sources: int, keys: int, records: int, skew: float = 1.0
) -> npt.NDArray[np.int64]:
    """Per source (rows) and offset (columns), the index `i < keys` of the record's key `s<source>-k<i>`:
    `rng.randrange(keys)` per record, or `int(keys * rng.random() ** skew)` when `skew != 1`."""
    count = sources * records
    if skew == 1.0:
        return randbelow(rng, keys, count).reshape(sources, records)
    return (keys * uniform_floats(rng, count) ** skew).astype(np.int64).reshape(sources, records)


def split_keys(source: int, indices: npt.NDArray[np.int64]) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The names `s<source>-k<i>` of the distinct keys one split drew (each made once), and per record the position
    of its key's name among them."""
    drawn = np.unique(indices)
    names = [f"s{source}-k{i}" for i in drawn.tolist()]
    if not len(drawn):
        return names, np.zeros(0, dtype=np.int64)
    if drawn[-1] <= 4 * len(indices):  # a table by key index: one gather
        table = np.zeros(int(drawn[-1]) + 1, dtype=np.int64)
        table[drawn] = np.arange(len(drawn))
        return names, table[indices]
    return names, np.searchsorted(drawn, indices).astype(np.int64)  # few records over a huge key range


def generate_inputs(rng: random.Random, sources: int, keys: int, records: int, skew: float = 1.0) -> list[list[Record]]:
    """Per source, `records` records with keys `s<source>-k<i>`, i < `keys`; i = keys * u**skew for skew != 1."""
    indices = draw_key_indices(rng, sources, keys, records, skew)
    splits = []
    for s in range(sources):
        names, which = split_keys(s, indices[s])
        splits.append([Record(names[i], s, o) for o, i in enumerate(which.tolist())])
    return splits
