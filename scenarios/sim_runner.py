"""Running a scenario on the simpy simulator: each run becomes a simulator job (epoch N is the N-th checkpoint
interval), faults and operations become simulator faults, and a resumed run starts from the previous run's
savepoint (or latest retained checkpoint)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statecert.reference.config import catalog
from statecert.reference.simulator.checkers import report_violations
from statecert.reference.simulator.cuts import source_offsets
from statecert.reference.simulator.flink_config import with_flink_config
from statecert.reference.simulator.job_spec import Fault, JobSpec
from statecert.reference.simulator.runtime import Simulation
from statecert.reference.storage.location import load_checkpoint_metadata
from statecert.scenarios.final_state import final_totals
from statecert.scenarios.loader import settings as checkpointing_settings
from statecert.scenarios.model import Action, Event, Phase, Scenario
from statecert.scenarios.plan import RunSettings, expected_error, resume_pointer, run_settings
from statecert.scenarios.results import RunResult, ScenarioResult, aggregate_of, evaluate
from statecert.spec.errors import StateCertError


def _faults(events: tuple[Event, ...], interval: float, sources: int) -> tuple[Fault, ...]:
    faults = []
    for e in events:
        start, middle = (e.epoch - 1) * interval, (e.epoch - 0.5) * interval
        task = f"counter-{e.task}"
        if e.action is Action.TASK_FAILURE:
            phase = "" if e.phase is Phase.PROCESSING else e.phase.value
            faults.append(Fault("task-crash", at_ms=start if phase else middle, task=task, phase=phase))
        elif e.action is Action.WORKER_KILL:
            faults.append(Fault("worker-loss", at_ms=middle, tasks=(task, f"source-{e.task % sources}")))
        elif e.action is Action.STORAGE_WRITE_FAILURE:
            faults.append(Fault("storage-outage", at_ms=start + 1, duration_ms=e.count * interval))
        elif e.action is Action.COORDINATOR_CRASH:
            faults.append(Fault("coordinator-crash-before-metadata", at_ms=start))
        elif e.action in (Action.SAVEPOINT, Action.STOP_WITH_SAVEPOINT):
            faults.append(Fault(e.action.value, at_ms=middle, native=e.format == "native"))
        elif e.action is Action.CANCEL:
            faults.append(Fault("cancel", at_ms=middle))
    return tuple(faults)


MINI_BATCH_PER_CHECKPOINT = 2**62  # a bundle no input fills: applied before each snapshot only


def job_spec(scenario: Scenario, run_index: int, run: RunSettings) -> JobSpec:
    c = scenario.checkpointing
    events = scenario.runs[run_index].events
    spec = JobSpec(
        sources=scenario.job.sources,
        stages=scenario.job.stages,
        operator=scenario.job.operator,
        key_selector=scenario.job.key_selector,
        key_type=scenario.job.key_type,
        serializer_version=run.serializer_version,
        parallelism=run.parallelism,
        max_parallelism=scenario.job.max_parallelism,
        backend=run.backend,
        incremental=c.incremental,
        changelog=run.changelog,
        materialize_interval_ms=c.materialize_interval_ms,
        keys_per_source=scenario.input.keys_per_source,
        key_skew=scenario.input.key_skew,
        records_per_source=scenario.input.records_per_source,
        restart_attempts=scenario.restart_attempts,
        checkpointing=checkpointing_settings(c),
        faults=_faults(events, c.interval_ms, scenario.job.sources),
        storage=scenario.job.storage,
        window_ms=scenario.job.window_ms,
        union_state=scenario.job.union_state,
    )
    config = dict(scenario.config)
    config.pop(catalog.STATE_BACKEND.key, None)  # the run's backend (an override, "other") is in `spec` already
    config.pop(catalog.STATE_BACKEND.deprecated_keys[0], None)
    config.pop(catalog.STATE_RECOVERY_PATH.key, None)  # folded into job.start_from; resumed runs start elsewhere
    config.pop(catalog.STATE_RECOVERY_PATH.deprecated_keys[0], None)
    return with_flink_config(spec, config)


def run_on_simulator(
    scenario: Scenario,
    workdir: Path,
    backend: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
    end_jobs: bool = True,
    mini_batch: bool = False,
    reports: list[dict[str, Any]] | None = None,
) -> ScenarioResult:
    """Run every run of `scenario` on the simulator; `end_jobs=False` leaves each run's retained checkpoints in
    `workdir` for inspection, as if its job were still running, instead of applying the retention setting.
    `mini_batch`: keyed tasks apply their input to state once per key per checkpoint (SIM-15), as the Spark
    runner's mini-batch does per epoch, unless the scenario's `[config]` sets `table.exec.mini-batch.*` itself.
    `reports` collects each run's simulator report (`statecert simulate` prints and plots them)."""
    started = time.perf_counter()
    plans = run_settings(scenario, backend)
    result = ScenarioResult(scenario.name, "sim", plans[0].backend, [], expected_error=expected_error(scenario, plans))
    restore_from = str(scenario.job.start_from) if scenario.job.start_from else None
    simulations: list[Simulation] = []
    try:
        for i, plan in enumerate(plans):
            progress(f"run {i + 1}/{len(plans)} on {plan.backend}, parallelism {plan.parallelism}")
            resume = scenario.runs[i].resume
            if resume is not None:
                previous = simulations[-1]
                latest = previous.coordinator.latest_completed()
                restore_from = resume_pointer(
                    resume, previous.savepoint_pointers, latest.pointer if latest else None, workdir / f"moved-{i + 1}"
                )
            spec = job_spec(scenario, i, plan)
            if mini_batch and not spec.mini_batch_size:
                spec = dataclasses.replace(spec, mini_batch_size=MINI_BATCH_PER_CHECKPOINT)
            simulation = Simulation(spec, scenario.input.seed, workdir / f"run-{i + 1}", restore_from)
            simulations.append(simulation)
            report = simulation.run()
            if reports is not None:
                reports.append(report)
            result.runs.append(_run_result(scenario, plan, simulation, report["checks"]))
            if end_jobs:
                simulation.end_job()  # retention: the run's checkpoints go unless the setting keeps them (COORD-11)
            if simulation.failed:
                break
    except StateCertError as exc:
        result.error, result.error_message = type(exc).__name__, str(exc)
    result.seconds = time.perf_counter() - started
    result.failures = evaluate(scenario, result)
    return result


def _run_result(scenario: Scenario, plan: RunSettings, sim: Simulation, checks: dict[str, Any]) -> RunResult:
    final = sim.last_committed_pointer
    aggregate = aggregate_of(scenario, plan.serializer_version)
    ends = {s: sim.end_offsets.get(s, len(ids)) for s, ids in enumerate(sim.input_ids)}
    if sim.cancelled:  # the output ends at the last completed checkpoint or savepoint: what was committed
        ends = source_offsets(load_checkpoint_metadata(final), sim.backend) if final else dict(sim.start_offsets)
    return RunResult(
        backend=plan.backend,
        parallelism=plan.parallelism,
        serializer_version=plan.serializer_version,
        start_offsets=dict(sim.start_offsets),
        end_offsets=ends,
        committed=list(sim.committed),
        completed_checkpoints=sum(1 for e in sim.timeline if e["event"] == "complete"),
        failovers=len(sim.failovers),
        job_failed=sim.failed,
        final_state=final_totals(final, sim.backend, aggregate, scenario.job.stages) if final else None,
        checker_violations=report_violations(checks),
        union_restores=list(sim.union_restores),
    )
