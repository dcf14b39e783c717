"""A sweep's closing lines on the terminal (`rollbench eval --eval.perturb=...`): each
condition's rate and its difference from the control, from eval_info.json's `per_condition`
(results/sweep.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def lines(per_cond: Sequence[dict[str, Any]]) -> list[str]:
    """The closing lines of a sweep: each condition's rate and its difference from the control."""
    out = ["condition                      episodes  success %  95% CI          vs control (pts, 95% CI)   p (Holm)"]
    for c in per_cond:
        ci = c["pc_success_ci95"]
        rate = f"{c['pc_success']:9.1f}" if c["pc_success"] is not None else "        -"
        cis = f"[{ci[0]:5.1f}, {ci[1]:5.1f}]" if ci else "-"
        v = c.get("vs_control")
        if v is None:
            diff = "(control)"
            p = ""
        elif v.get("n_pairs"):
            lo, hi = v["difference_ci95"]
            diff = f"{v['difference_pc']:+6.1f} [{lo:+6.1f}, {hi:+6.1f}]"
            p = f"{v.get('p_holm', v['p_mcnemar']):.3g}"
        else:
            diff, p = "no pairs yet", ""
        out.append(f"{(c['condition'] or 'control'):30s} {c['n_episodes']:8d}  {rate}  {cis:14s}  {diff:25s}  {p}")
    return out
