"""How `v1-counter-savepoint/` was made (kept for provenance; the committed bytes are the test, never regenerated
in CI): the scenario job (2 source splits, 2 counters, `count` per key, input seed 11, 8 keys and 240 records per
split) run on the simulator with the heap backend until a canonical stop-with-savepoint (keyed state in files,
operator state inline), its `_metadata` then rewritten in format version 1. `golden-v1-savepoint.toml` resumes
from it.
Run: python scenarios/golden/make_v1_counter_savepoint.py scenarios/golden/v1-counter-savepoint
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from statecert.reference.coordinator.settings import CheckpointingSettings
from statecert.reference.format.metadata_codec import encode_metadata
from statecert.reference.simulator.job_spec import Fault, JobSpec
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.location import load_checkpoint_metadata


def main(target: Path) -> None:
    spec = JobSpec(
        sources=2,
        parallelism=2,
        keys_per_source=8,
        records_per_source=240,
        file_state_size_threshold=512,  # keyed state in files (relative paths), operator state inline
        checkpointing=CheckpointingSettings(interval_ms=60),
        faults=(Fault("stop-with-savepoint", at_ms=100.0),),
    )
    with tempfile.TemporaryDirectory() as workdir:
        simulation = Simulation(spec, 11, Path(workdir))
        simulation.run()
        assert simulation.stopped_with_savepoint is not None
        source = Path(simulation.stopped_with_savepoint.removeprefix("file://"))
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
    metadata = load_checkpoint_metadata(str(target))  # its handles now point into the target
    directory = f"file://{target.resolve()}"
    (target / "_metadata").write_bytes(encode_metadata(metadata, directory, version=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
