"""What `--eval.ci_width` reports, computed exactly from the rule (no simulation but the last
table): per true rate p, the episodes it runs, the bias of the prefix's k/n and of the
unbiased rate, the coverage and mean width of the fixed-n Wilson interval and of the rule's
exact interval; then the least coverage of each over p in [STEP, 1 - STEP]: on a grid of step
STEP and on each side (1e-9 away) of every end of every interval the rule can report, where
the coverage jumps, then minimised within the smooth piece around the lowest of these
(`--only-coverage` prints only this, a few seconds per width). Last, `overall` of ten
MT10-like tasks: the pooled rate (what `overall` was) against the mean of the tasks' unbiased
rates, by simulation over the exact distribution. And the coverage of `overall`'s 95%
interval when tasks share seeds (episode i of every task runs with seed + i), its standard
error taken as if tasks were independent (before issue 47) against clustered on the index.

    python bench/adaptive_numbers.py [--max 100] [--block 10] [--widths 0.2 0.1] [--shared-sims 1000]
                                     [--grid 5e-5] [--only-coverage]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import minimize_scalar

from rollbench.stats import wilson
from rollbench.stopping import estimates as stopped
from rollbench.stopping.adaptive import StopRule

#: tasks and correlations of the shared-seed table
SHARED_TASKS, SHARED_RHO = (2, 10, 50), (0.1, 0.2, 0.35)
#: how far beside an interval's end the coverage is taken, on each side of its jump
BESIDE = 1e-9
#: the lowest candidates whose smooth piece is searched for a lower point in between
REFINED = 20
SHOWN = (0.005, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
MT10 = [0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]


def row(
    s: stopped.Sampling, p: float, exact: np.ndarray, wil: np.ndarray, unbiased: np.ndarray
) -> tuple[float, ...]:
    """E[n], the two biases (points), the two coverages and the two mean widths at p."""
    pts = stopped._points(s)
    probs = stopped.distribution(s, p)[0]
    cov_w = probs[(wil[:, 0] <= p) & (p <= wil[:, 1])].sum()
    cov_e = probs[(exact[:, 0] <= p) & (p <= exact[:, 1])].sum()
    return (probs @ pts.n, 100 * (probs @ (pts.k / pts.n) - p), 100 * (probs @ unbiased - p), cov_w, cov_e,
            probs @ (wil[:, 1] - wil[:, 0]), probs @ (exact[:, 1] - exact[:, 0]))


def coverage(s: stopped.Sampling, bounds: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """Exact coverage at each p of the intervals `bounds` (one per stop point, in `_points`
    order): the probability of the stop points whose interval holds p."""
    probs = stopped.distribution(s, ps)
    p = ps[:, None]
    return (probs * ((bounds[None, :, 0] <= p) & (p <= bounds[None, :, 1]))).sum(axis=1)


def least_coverage(s: stopped.Sampling, bounds: np.ndarray, step: float) -> tuple[float, float]:
    """(the least coverage, its p) over p in [step, 1 - step]. Coverage is smooth in p but for
    a jump at each interval end (a stop point's probability enters or leaves), so its infimum
    is the least of: the grid of `step`, the p's BESIDE each end on both sides, and, within
    the smooth piece (between two ends) around each of the REFINED lowest of those, a bounded
    minimisation within one grid step."""
    lo_p, hi_p = step, 1 - step
    grid = step * np.arange(1, round(1 / step))
    ends = np.unique(bounds)
    ends = ends[(ends > lo_p) & (ends < hi_p)]
    beside = np.concatenate([ends - BESIDE, ends + BESIDE])
    ps = np.unique(np.concatenate([grid, beside[(beside >= lo_p) & (beside <= hi_p)]]))
    cov = coverage(s, bounds, ps)
    best, at = float(cov.min()), float(ps[cov.argmin()])
    breaks = np.concatenate([[lo_p], ends, [hi_p]])
    for i in np.argsort(cov)[:REFINED]:
        p0 = float(ps[i])
        left = max(p0 - step, float(breaks[breaks < p0].max(initial=lo_p)) + BESIDE, lo_p)
        right = min(p0 + step, float(breaks[breaks > p0].min(initial=hi_p)) - BESIDE, hi_p)
        if right <= left:
            continue
        res = minimize_scalar(
            lambda x: float(coverage(s, bounds, np.array([x]))[0]),
            bounds=(left, right),
            method="bounded",
            options={"xatol": 1e-11},
        )
        if res.fun < best:
            best, at = float(res.fun), float(res.x)
    return best, at


def overall_coverage(
    s: stopped.Sampling, rates: np.ndarray, rho: float, sims: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Coverage of `overall`'s interval for tasks stopped by the rule whose episode i shares
    seed + i (with chance rho one uniform decides every task's outcome at i): (as independent,
    clustered on the index)."""
    pts, u = stopped._points(s), stopped.unbiased_all(s)
    var = np.array([stopped.variance(s, (k + 1) / (n + 2)) for k, n in zip(pts.k, pts.n, strict=True)])
    point_of = -np.ones((len(s.looks), s.looks[-1] + 1), dtype=int)
    point_of[pts.looks, pts.k] = np.arange(len(pts.k))
    n = s.looks[-1]
    shared = rng.random((sims, 1, n)) < rho
    x = np.where(shared, rng.random((sims, 1, n)), rng.random((sims, len(rates), n))) < rates[None, :, None]
    ids = point_of[np.arange(len(s.looks)), np.cumsum(x, axis=2)[:, :, np.array(s.looks) - 1]]
    point = np.take_along_axis(ids, (ids >= 0).argmax(axis=2)[..., None], axis=2)[..., 0]
    truth, old, new = float(rates.mean()), 0, 0
    for r in range(sims):
        tasks = [stopped.TaskEstimate(float(u[p]), (0.0, 1.0), float(var[p])) for p in point[r]]
        _, _, ci = stopped.mean_of_rates(tasks)
        old += ci[0] <= truth <= ci[1]
        _, _, ci = stopped.mean_of_rates(tasks, [x[r, t, : pts.n[p]].tolist() for t, p in enumerate(point[r])])
        new += ci[0] <= truth <= ci[1]
    return old / sims, new / sims


def print_least_coverage(s: stopped.Sampling, wil: np.ndarray, exact: np.ndarray, step: float) -> None:
    """The least coverage of each interval and its p; the p below 1/2 first where 1 - p has
    the same coverage (the rule and both intervals are symmetric under k -> n - k)."""
    shown = []
    for bounds in (wil, exact):
        cov, p = least_coverage(s, bounds, step)
        low, high = sorted((p, 1 - p))
        mirrored = abs(coverage(s, bounds, np.array([1 - p]))[0] - cov) < 1e-9
        shown.append(f"{cov:.4f} (p = {low:.5f} and {high:.5f})" if mirrored else f"{cov:.4f} (p = {p:.5f})")
    print(
        f"least coverage over p = {step:g}..{1 - step:g} (grid {step:g}, and beside every interval end): "
        f"Wilson {shown[0]}, exact {shown[1]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--widths", type=float, nargs="+", default=[0.2, 0.1])
    ap.add_argument("--shared-sims", type=int, default=1000)
    ap.add_argument("--grid", type=float, default=5e-5, metavar="STEP", help="the least coverage's grid of p")
    ap.add_argument("--only-coverage", action="store_true", help="print only the least coverage of each width")
    args = ap.parse_args()
    if not 0 < args.grid < 0.5:
        ap.error(f"--grid must be in (0, 0.5), got {args.grid}")
    for w in args.widths:
        rule = StopRule(w, args.block, args.max)
        s = stopped.sampling(w, rule.checkpoints(), [])
        pts = stopped._points(s)
        exact = np.array([stopped.interval(s, int(j), int(k)) for j, k in zip(pts.looks, pts.k, strict=True)])
        wil = np.array([wilson(int(k), int(n)) for k, n in zip(pts.k, pts.n, strict=True)])
        unbiased = stopped.unbiased_all(s)
        print(f"\n--eval.ci_width={w}, a look every {args.block}, at most {args.max} episodes")
        if args.only_coverage:
            print_least_coverage(s, wil, exact, args.grid)
            continue
        print(f"{'p':>6} {'E[n]':>6} {'bias k/n':>9} {'bias unb.':>9} {'cov Wilson':>10} {'cov exact':>9} "
              f"{'width W.':>8} {'width ex.':>9}")

        for p in SHOWN:
            n, b_mle, b_unb, cw, ce, ww, we = row(s, p, exact, wil, unbiased)
            print(f"{p:6.3f} {n:6.1f} {b_mle:+9.2f} {b_unb:+9.2f} {cw:10.3f} {ce:9.3f} {ww:8.3f} {we:9.3f}")
        print_least_coverage(s, wil, exact, args.grid)
        probs = stopped.distribution(s, np.array(MT10))
        rng = np.random.default_rng(0)
        picks = np.stack([rng.choice(len(pts.k), size=20000, p=r / r.sum()) for r in probs])
        pooled = pts.k[picks].sum(axis=0) / pts.n[picks].sum(axis=0)
        mean = unbiased[picks].mean(axis=0)
        truth = float(np.mean(MT10))
        print(f"MT10-like rates (mean {100 * truth:.1f}%): pooled overall {100 * pooled.mean():.1f}% "
              f"(bias {100 * (pooled.mean() - truth):+.2f}), mean of unbiased task rates {100 * mean.mean():.1f}% "
              f"(bias {100 * (mean.mean() - truth):+.2f}), 20000 simulated runs")

        print(f"overall's 95% interval, tasks sharing seeds (rates evenly 0.3..0.95), {args.shared_sims} runs each")
        print(f"{'tasks':>5} {'rho':>4} {'as independent':>14} {'clustered on the index':>22}")
        for n_tasks in SHARED_TASKS:
            for rho in SHARED_RHO:
                old, new = overall_coverage(s, np.linspace(0.3, 0.95, n_tasks), rho, args.shared_sims,
                                            np.random.default_rng(47))
                print(f"{n_tasks:5d} {rho:4.2f} {old:14.3f} {new:22.3f}")


if __name__ == "__main__":
    main()
