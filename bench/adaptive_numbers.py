"""What `--eval.ci_width` reports, computed exactly from the rule (no simulation but the last
table): per true rate p, the episodes it runs, the bias of the prefix's k/n and of the
unbiased rate, the coverage and mean width of the fixed-n Wilson interval and of the rule's
exact interval; then, over a grid of p, the least coverage of each. Last, `overall` of ten
MT10-like tasks: the pooled rate (what `overall` was) against the mean of the tasks' unbiased
rates, by simulation over the exact distribution.

    python bench/adaptive_numbers.py [--max 100] [--block 10] [--widths 0.2 0.1]
"""

from __future__ import annotations

import argparse

import numpy as np

from rollbench.results import stopped
from rollbench.results.adaptive import StopRule
from rollbench.results.summary import wilson

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--widths", type=float, nargs="+", default=[0.2, 0.1])
    args = ap.parse_args()
    grid = np.linspace(0.005, 0.995, 199)
    for w in args.widths:
        rule = StopRule(w, args.block, args.max)
        s = stopped.sampling(w, rule.checkpoints(), [])
        pts = stopped._points(s)
        exact = np.array([stopped.interval(s, int(j), int(k)) for j, k in zip(pts.looks, pts.k, strict=True)])
        wil = np.array([wilson(int(k), int(n)) for k, n in zip(pts.k, pts.n, strict=True)])
        unbiased = stopped.unbiased_all(s)
        print(f"\n--eval.ci_width={w}, a look every {args.block}, at most {args.max} episodes")
        print(f"{'p':>6} {'E[n]':>6} {'bias k/n':>9} {'bias unb.':>9} {'cov Wilson':>10} {'cov exact':>9} "
              f"{'width W.':>8} {'width ex.':>9}")

        for p in SHOWN:
            n, b_mle, b_unb, cw, ce, ww, we = row(s, p, exact, wil, unbiased)
            print(f"{p:6.3f} {n:6.1f} {b_mle:+9.2f} {b_unb:+9.2f} {cw:10.3f} {ce:9.3f} {ww:8.3f} {we:9.3f}")
        covs = np.array([row(s, float(p), exact, wil, unbiased)[3:5] for p in grid])
        print(f"least coverage over p = 0.005..0.995: Wilson {covs[:, 0].min():.3f} (p = {grid[covs[:, 0].argmin()]:.3f}), "
              f"exact {covs[:, 1].min():.3f} (p = {grid[covs[:, 1].argmin()]:.3f})")
        probs = stopped.distribution(s, np.array(MT10))
        rng = np.random.default_rng(0)
        picks = np.stack([rng.choice(len(pts.k), size=20000, p=r / r.sum()) for r in probs])
        pooled = pts.k[picks].sum(axis=0) / pts.n[picks].sum(axis=0)
        mean = unbiased[picks].mean(axis=0)
        truth = float(np.mean(MT10))
        print(f"MT10-like rates (mean {100 * truth:.1f}%): pooled overall {100 * pooled.mean():.1f}% "
              f"(bias {100 * (pooled.mean() - truth):+.2f}), mean of unbiased task rates {100 * mean.mean():.1f}% "
              f"(bias {100 * (mean.mean() - truth):+.2f}), 20000 simulated runs")


if __name__ == "__main__":
    main()
