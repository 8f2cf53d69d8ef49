"""Restart strategies as Flink 2.x defines them (`restart-strategy.*`, COORD-12): after each failure the strategy
says how long to wait before restarting, or that the job fails. Time is the runner's (simulated or epoch time) and
jitter is drawn from the run's seeded generator, so a run stays reproducible."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from statecert.reference import config as cfg
from statecert.reference.config import catalog


@dataclass
class NoRestart:
    """`disable` (`none`, `off`): the first failure fails the job."""

    name = "disable"

    def on_failure(self, now_ms: float, rng: random.Random) -> float | None:
        return None


@dataclass
class FixedDelayRestart:
    """`fixed-delay`: up to `attempts` restarts, each after `delay_ms`."""

    attempts: int
    delay_ms: float
    restarts: int = 0
    name = "fixed-delay"

    def on_failure(self, now_ms: float, rng: random.Random) -> float | None:
        if self.restarts >= self.attempts:
            return None
        self.restarts += 1
        return self.delay_ms


@dataclass
class FailureRateRestart:
    """`failure-rate`: the job fails once more than `max_failures` failures fall within `interval_ms`."""

    max_failures: int
    interval_ms: float
    delay_ms: float
    failures: deque[float] = field(default_factory=deque)
    name = "failure-rate"

    def on_failure(self, now_ms: float, rng: random.Random) -> float | None:
        self.failures.append(now_ms)
        while self.failures and self.failures[0] <= now_ms - self.interval_ms:
            self.failures.popleft()
        return None if len(self.failures) > self.max_failures else self.delay_ms


@dataclass
class ExponentialDelayRestart:
    """`exponential-delay`: the delay starts at `initial_ms` and is multiplied after each failure up to `max_ms`,
    varied by +-`jitter`; a failure more than `reset_ms` after the previous one starts over (delay and attempt
    count); more than `attempts` restarts since the last reset fail the job."""

    initial_ms: float
    max_ms: float
    multiplier: float
    reset_ms: float
    jitter: float
    attempts: int
    current_ms: float = 0.0
    restarts: int = 0
    last_failure_ms: float | None = None
    name = "exponential-delay"

    def on_failure(self, now_ms: float, rng: random.Random) -> float | None:
        if self.last_failure_ms is not None and now_ms - self.last_failure_ms >= self.reset_ms:
            self.current_ms, self.restarts = 0.0, 0
        self.last_failure_ms = now_ms
        if self.restarts >= self.attempts:
            return None
        self.restarts += 1
        self.current_ms = (
            self.initial_ms if self.current_ms == 0 else min(self.current_ms * self.multiplier, self.max_ms)
        )
        spread = self.current_ms * self.jitter
        return max(0.0, self.current_ms + rng.uniform(-spread, spread)) if spread else self.current_ms


RestartStrategy = NoRestart | FixedDelayRestart | FailureRateRestart | ExponentialDelayRestart


def restart_strategy_from_config(config: Mapping[str, object], checkpointing_enabled: bool) -> RestartStrategy:
    """`restart-strategy.type` (1.x: `restart-strategy`) and its keys; unset, `exponential-delay` when
    checkpointing is on and `disable` otherwise, as in Flink 2.x."""
    kind = cfg.read(config, catalog.RESTART_STRATEGY)
    if kind is None:
        kind = "exponential-delay" if checkpointing_enabled else "disable"
    if kind == "disable":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelayRestart(
            cfg.read(config, catalog.FIXED_DELAY_ATTEMPTS), float(cfg.read(config, catalog.FIXED_DELAY_DELAY))
        )
    if kind == "failure-rate":
        return FailureRateRestart(
            cfg.read(config, catalog.FAILURE_RATE_MAX_FAILURES),
            float(cfg.read(config, catalog.FAILURE_RATE_INTERVAL)),
            float(cfg.read(config, catalog.FAILURE_RATE_DELAY)),
        )
    return ExponentialDelayRestart(
        float(cfg.read(config, catalog.EXPONENTIAL_INITIAL_BACKOFF)),
        float(cfg.read(config, catalog.EXPONENTIAL_MAX_BACKOFF)),
        cfg.read(config, catalog.EXPONENTIAL_MULTIPLIER),
        float(cfg.read(config, catalog.EXPONENTIAL_RESET_THRESHOLD)),
        cfg.read(config, catalog.EXPONENTIAL_JITTER),
        cfg.read(config, catalog.EXPONENTIAL_ATTEMPTS),
    )
