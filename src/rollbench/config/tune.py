"""How `rollbench tune` (and `rollbench eval --workers=auto`) measures the machine."""

from __future__ import annotations

from dataclasses import dataclass

from rollbench.config.fields import opt
from rollbench.errors import ConfigError


@dataclass(frozen=True)
class TuneConfig:
    budget_s: float = opt(30.0, "seconds the probe may spend measuring (env, policy, machine); eval --workers=auto "
                                "spends at most ~10% of the run's predicted wall within it")
    output: str = opt("", "where the probe and the recommendation go as JSON (default outputs/tune/<date>/<time>_<env>_<policy>.json)")
    load: str = opt("", "eval --workers=auto: use this saved `rollbench tune` JSON instead of probing again")
    reprobe: bool = opt(False, "eval --workers=auto: measure now, even if a probe of this machine, benchmark and policy "
                               "is stored (<rollbench cache>/probes: $ROLLBENCH_CACHE, else $XDG_CACHE_HOME/rollbench, else ~/.cache/rollbench) or the run "
                               "is too short to pay for one")

    def __post_init__(self) -> None:
        if not self.budget_s > 0:
            raise ConfigError(f"--tune.budget_s={self.budget_s} is not allowed; it must be > 0")
