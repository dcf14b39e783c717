"""The stop rule a run's config asks for, built once per run (its open, or a merge's close)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollbench.stopping.adaptive import Rule, StopRule
from rollbench.stopping.paired import paired_rule
from rollbench.stopping.versus import versus_rule

if TYPE_CHECKING:
    from rollbench.config.run import RunConfig


def stop_rule(cfg: RunConfig) -> Rule | None:
    """An adaptive run's stop rule: --eval.ci_width's (a sweep: per task and condition), a
    comparison against --eval.versus, or a sweep's conditions against its control; None for
    a fixed-n run."""
    if cfg.eval.versus is not None:
        return versus_rule(cfg)
    if cfg.eval.perturb_stop == "paired":
        return paired_rule(cfg)
    return StopRule.from_config(cfg.eval, max(1, len(cfg.seeds)))
