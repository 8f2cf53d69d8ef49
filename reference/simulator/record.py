"""One input record of the simulated job, as the places that need a record at a time see it (channel state,
windows, checks); in flight, records travel as columns (`RecordBatch`)."""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    """One input record: its key, its source split and its offset in the split (a tuple: millions are made)."""

    key: str
    source: int
    offset: int
