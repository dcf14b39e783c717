"""How much `--workers=auto` may spend probing: a share of the run it tunes.

    first estimate   nothing measured: every planned episode at its step limit,
                     `BenchmarkConfig.step_cost_ms` per step, one worker per core, plus
                     start-up (an upper bound for policies that end episodes early)
    budget           PROBE_SHARE of it (and at most --tune.budget_s)
    too small        below MIN_PROBE_S (what starting the probe's processes and warming
                     up their envs costs) no probe runs: the run goes with the
                     scheduler's rules of thumb (`scheduler.decide`), unless
                     --tune.reprobe=true asks for a measurement anyway (the least one:
                     the warm-up and a window or two)
    refined          after the warm-up, the windows get PROBE_SHARE of the wall predicted
                     from the warm-up's figures, less what the probe has spent

`rollbench tune` is not bound by this: it measures within --tune.budget_s.
"""

from __future__ import annotations

from rollbench.config.run import RunConfig
from rollbench.plan import EpisodeUnit

#: the share of the predicted wall `--workers=auto` may spend probing
PROBE_SHARE = 0.10
#: the least a measurement costs: P processes started (imports), their envs built, one
#: episode each, a few windows (estimated: 1.5-2.5 s for MetaWorld on 2 cores here)
MIN_PROBE_S = 2.0
#: start-up of a run besides stepping: launch, workers, first env builds (estimated)
STARTUP_GUESS_S = 2.0


def first_estimate_s(cfg: RunConfig, units: list[EpisodeUnit], cores: int) -> float:
    """The run's wall, nothing measured: every episode to its step limit at the benchmark's
    rough step cost, one worker per core."""
    bench = cfg.env
    steps = sum(bench.effective_max_steps(u.task) for u in units)
    workers = max(1, min(cores, len(units)))
    return STARTUP_GUESS_S + steps * bench.step_cost_ms / 1000.0 / workers


def probe_budget(cfg: RunConfig, units: list[EpisodeUnit], cores: int) -> float:
    """Seconds `--workers=auto` may probe: PROBE_SHARE of the first estimate, at most
    --tune.budget_s; 0.0 when that is below MIN_PROBE_S (no probe pays for itself then)."""
    budget = min(cfg.tune.budget_s, PROBE_SHARE * first_estimate_s(cfg, units, cores))
    return budget if budget >= MIN_PROBE_S else 0.0
