"""What `compare --sequential` and `--eval.versus` decide, simulated (report/sequential.py's
`simulate`, alpha = 0.05, a look every 10 pairs): false decisions between equal policies,
power and pairs used against fixed-n exact McNemar, and equivalence of policies that mostly
agree. The tables of docs/compare.md; tests/test_sequential.py checks the same claims.

    python bench/sequential_numbers.py [--sims 4000]
"""

from __future__ import annotations

import argparse

from rollbench.report import sequential as sq

EQUAL = [(0.5, 0.0), (0.5, 0.5), (0.9, 0.0), (0.9, 0.5), (0.2, 0.9)]
POWER = [(0.5, 0.8, 0.0, 100), (0.5, 0.8, 0.0, 200), (0.7, 0.9, 0.5, 200), (0.6, 0.8, 0.0, 300)]
EQUIVALENT = [(0.9, 0.9, 0.9), (0.7, 0.7, 1.0), (0.5, 0.5, 0.9), (0.9, 0.8, 0.9), (0.9, 0.7, 0.0)]
BUDGET = [(0.5, 0.8, 0.0), (0.7, 0.9, 0.5), (0.6, 0.8, 0.0), (0.6, 0.75, 0.0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    n = ap.parse_args().sims
    print(f"false decisions between equal policies, {n} comparisons of up to 200 pairs (margin 0.05)")
    print(f"{'rate':>5} {'rho':>4} {'better or worse':>16} {'fixed-n McNemar at 200':>23}")
    for p, rho in EQUAL:
        s = sq.simulate(p, p, 200, n, margin=0.05, rng=11, rho=rho)
        print(f"{p:5.1f} {rho:4.1f} {s.rejection_rate:16.4f} {s.fixed_power:23.4f}")
    print(f"\npower and pairs used, {n} comparisons (margin 0.05)")
    print(f"{'A vs B':>10} {'rho':>4} {'max':>4} {'power':>7} {'pairs mean (median)':>20} {'fixed-n McNemar needs':>22}")
    for p_a, p_b, rho, n_max in POWER:
        s = sq.simulate(p_a, p_b, n_max, n, margin=0.05, rng=13, rho=rho)
        print(f"{p_a:.1f} vs {p_b:.1f} {rho:4.1f} {n_max:4d} {s.power:7.4f} {s.mean_pairs:13.1f} ({s.median_pairs:.0f})"
              f" {s.fixed_n:22d}")
    print(f"\nequivalence within 0.1, {n} comparisons of up to 300 pairs")
    print(f"{'A vs B':>10} {'rho':>4} {'equivalent':>10} {'better/worse':>12} {'pairs mean (median)':>20}")
    for p_a, p_b, rho in EQUIVALENT:
        s = sq.simulate(p_a, p_b, 300, n, margin=0.1, rng=14, rho=rho)
        print(f"{p_a:.1f} vs {p_b:.1f} {rho:4.1f} {s.equivalent:10.4f} {s.rejection_rate:12.4f} "
              f"{s.mean_pairs:13.1f} ({s.median_pairs:.0f})")

    print(f"\na budget fixed at the pairs fixed-n McNemar needs for 80% power, {n} comparisons")
    print(f"{'A vs B':>10} {'rho':>4} {'budget':>6} {'McNemar':>7} {'fixed: power':>12} {'pairs':>6} "
          f"{'anytime: power':>14} {'pairs':>6} {'false (equal rates)':>20}")
    for p_a, p_b, rho in BUDGET:
        only_a, only_b = sq.discordance(p_a, p_b, rho)
        budget = sq.fixed_n_for_power(only_a, only_b, 0.05, 0.8) or 0
        fixed = sq.simulate(p_a, p_b, budget, n, rng=15, rho=rho, design="fixed")
        anytime = sq.simulate(p_a, p_b, budget, n, rng=15, rho=rho)
        null = sq.simulate(p_a, p_a, budget, n, rng=16, rho=rho, design="fixed")
        print(f"{p_a:.1f} vs {p_b:.2g} {rho:4.1f} {budget:6d} {fixed.fixed_power:7.3f} {fixed.power:12.3f} "
              f"{fixed.mean_pairs:6.1f} {anytime.power:14.3f} {anytime.mean_pairs:6.1f} {null.rejection_rate:20.4f}")


if __name__ == "__main__":
    main()
