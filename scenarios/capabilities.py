"""The backend capabilities (chapter SB) a scenario uses, so that the scenarios tier runs a scenario only against
backends that declare them, as the other tiers gate their tests: what the spec leaves optional, a certificate does
not demand."""

from __future__ import annotations

from statecert.scenarios.model import Action, Scenario


def required_capabilities(scenario: Scenario) -> tuple[str, ...]:
    """Capability names from `BackendCapabilities` the scenario's job and timeline rely on. Every job needs
    operator state: its sources keep their offsets there, its keyed tasks their channel state."""
    needed = {"operator_state"}
    if scenario.job.window_ms:
        needed.add("timers")
    parallelism = scenario.job.parallelism
    for run in scenario.runs:
        resume = run.resume
        if resume is not None:
            if resume.parallelism is not None and resume.parallelism != parallelism:
                needed.add("rescaling")
            parallelism = resume.parallelism or parallelism
            if resume.serializer_version is not None and resume.serializer_version != scenario.job.serializer_version:
                needed.add("schema_evolution")
        for event in run.events:
            if event.action in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT) and event.format == "canonical":
                needed.add("canonical_savepoints")
    if scenario.checkpointing.incremental:
        needed.add("incremental_checkpoints")
    return tuple(sorted(needed))
