"""One side of KB-LOCAL-3's crash and restart, run as `python -m statecert.conformance.crash_restart MODE CONFIG
LOCAL_DIR CHECKPOINT_DIR` in an interpreter of its own: `crash` creates the backend under test from the job
configuration CONFIG (JSON), fills value state and snapshots it (which makes a backend write its working files), then
the process dies without disposing it; `restart` creates one with the same parameters in the same local directory
and prints, as JSON, every entry of the crashed one it can read. Each side is a fresh process, so whatever a backend
derives its working files' names from (a counter, an object's address, a seeded generator) comes out as after a
real crash and restart of a worker."""

from __future__ import annotations

import json
import os
import sys

from statecert.conformance.helpers import COUNT, LOCAL_DIR, keyed_backend, location_for, snapshot_now
from statecert.reference.loader import load_state_backend
from statecert.reference.storage.filesystem import FileSystemCheckpointStorage

KEY_COUNT = 50
"""Keys the crashed backend holds: `k0` = 0 ... `k49` = 49."""


def main(argv: list[str]) -> None:
    mode, config, local_dir, checkpoint_dir = argv
    backend = load_state_backend(job_config=json.loads(config))
    LOCAL_DIR.set(local_dir)
    keyed = keyed_backend(backend)
    state = keyed.get_or_create_state(COUNT)
    keys = [f"k{i}" for i in range(KEY_COUNT)]
    if mode == "crash":
        for i, key in enumerate(keys):
            keyed.set_current_key(key)
            state.update(i)
        snapshot_now(keyed, location_for(FileSystemCheckpointStorage(checkpoint_dir)))
        sys.stdout.flush()
        os._exit(0)  # a crash: nothing is disposed, closed or cleaned up
    resurrected = {}
    for key in keys:
        keyed.set_current_key(key)
        value = state.value()
        if value is not None:
            resurrected[key] = value
    keyed.dispose()
    print(json.dumps(resurrected))


if __name__ == "__main__":
    main(sys.argv[1:])
