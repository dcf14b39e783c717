"""What `compare --sequential` and `--eval.versus` decide, simulated (stopping/sequential.py's
`simulate`, alpha = 0.05, a look every 10 pairs): false decisions between equal policies,
power and pairs used against fixed-n exact McNemar, and equivalence of policies that mostly
agree. Then the pooled decision of many tasks that share seeds (episode i of every task
runs with seed + i): round robin as if independent (before issue 47) against per episode
index. Last, without simulation: the pairs two runs with identical outcomes need to be
"equivalent within +-margin". The tables of docs/compare.md; tests/test_sequential.py checks
the same claims. `--only` prints one table: `false-decisions` (the first; its runs grow with
`--sims`) or `equivalence-looks` (the last).

    python bench/sequential_numbers.py [--sims 4000] [--shared-sims 1000] [--only false-decisions|equivalence-looks]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from rollbench.stopping import sequential as sq

EQUAL = [(0.5, 0.0), (0.5, 0.5), (0.9, 0.0), (0.9, 0.5), (0.2, 0.9)]
POWER = [(0.5, 0.8, 0.0, 100), (0.5, 0.8, 0.0, 200), (0.7, 0.9, 0.5, 200), (0.6, 0.8, 0.0, 300)]
EQUIVALENT = [(0.9, 0.9, 0.9), (0.7, 0.7, 1.0), (0.5, 0.5, 0.9), (0.9, 0.8, 0.9), (0.9, 0.7, 0.0)]
BUDGET = [(0.5, 0.8, 0.0), (0.7, 0.9, 0.5), (0.6, 0.8, 0.0), (0.6, 0.75, 0.0)]
#: (tasks, pairs per task) for tasks that share seeds; fewer pairs for 50 tasks keep round robin's run short
SHARED = [(2, 100), (10, 100), (50, 40)]
SHARED_RHO = (0.1, 0.2, 0.35)
#: identical outcomes: (margin, alpha) and the tasks of MT10, each tested at alpha / TASKS
LOOKS = [(0.1, 0.05), (0.1, 0.005), (0.05, 0.05), (0.05, 0.005)]
TASKS = 10


def shared_seed_runs(rng: np.random.Generator, sims: int, tasks: int, n: int, rho: float, p: float = 0.5) -> np.ndarray:
    """One run's outcomes (sims, tasks, n): with chance rho, seed + i decides every task's
    episode i at once (one shared uniform), so outcomes at one index correlate by rho."""
    shared = rng.random((sims, 1, n)) < rho
    return np.where(shared, rng.random((sims, 1, n)), rng.random((sims, tasks, n))) < p


def shared_false_rates(tasks: int, n: int, rho: float, sims: int) -> tuple[float, float, float, float]:
    """False better/worse of the pooled decision between two runs of one policy (every task
    at 0.5): (anytime round robin, anytime per index, fixed round robin, fixed per index)."""
    rng = np.random.default_rng(47)
    a, b = shared_seed_runs(rng, sims, tasks, n, rho), shared_seed_runs(rng, sims, tasks, n, rho)
    ra, rb = a.transpose(0, 2, 1).reshape(sims, -1), b.transpose(0, 2, 1).reshape(sims, -1)
    s_i = b.astype(int).sum(axis=1) - a.astype(int).sum(axis=1)
    old = sq._run(ra, rb, 0.05, 0.05, 10 * tasks)
    new = sq._run_d(s_i / tasks, (a != b).sum(axis=1), (b & ~a).sum(axis=1), 0.05, 0.05, 10)
    half = np.full(sims, 0.5)
    up, down, _ = sq._group_sequential(ra != rb, rb & ~ra, half, 0.05, 10 * tasks, n * tasks)
    up_i, down_i, _ = sq._group_sequential(np.abs(s_i), s_i > 0, half, 0.05, 10, n)
    return (float(np.isin(old.decision, (1, 2)).mean()), float(np.isin(new.decision, (1, 2)).mean()),
            float((up | down).any(axis=1).mean()), float((up_i | down_i).any(axis=1).mean()))


def false_decisions(n: int) -> None:
    """The first table: two equal policies, each row n simulated comparisons, with the Monte
    Carlo standard error of its rate, sqrt(r (1 - r) / n)."""
    print(f"false decisions between equal policies, {n} comparisons of up to 200 pairs (margin 0.05)")
    print(f"{'rate':>5} {'rho':>4} {'better or worse':>16} {'Monte Carlo se':>14} {'fixed-n McNemar at 200':>23}")
    for p, rho in EQUAL:
        s = sq.simulate(p, p, 200, n, margin=0.05, rng=11, rho=rho)
        se = math.sqrt(s.rejection_rate * (1 - s.rejection_rate) / n)
        print(f"{p:5.1f} {rho:4.1f} {s.rejection_rate:16.4f} {se:14.4f} {s.fixed_power:23.4f}")


def equivalence_looks(max_pairs: int = 1000) -> None:
    """Two runs with identical outcomes (every pair concordant, so every d_i = 0), looked at
    every 10 pairs: the first look at which each test decides "equivalent within +-margin",
    and its interval there. One task alone at alpha (`sequential_test`); TASKS tasks as
    `compare --sequential` tests them (`sequential_tasks`): each at alpha / TASKS, pooled per
    episode index at alpha (each index's mean difference is 0 too, so the pooled test looks
    as one task at alpha does, its pairs TASKS per index)."""
    same = [True] * max_pairs
    print(
        f"\nidentical outcomes (every pair concordant), a look every 10 pairs: the first look deciding equivalence; "
        f"one task at alpha, {TASKS} tasks each at alpha / {TASKS} and pooled at alpha"
    )
    print(
        f"{'margin':>6} {'alpha':>6} {'one task: pairs':>15} {'interval':>16} "
        f"{f'{TASKS} tasks: each, pairs':>21} {'interval':>16} {'pooled: pairs':>13} {'indices':>7} {'interval':>16}"
    )

    def shown(r: sq.SequentialResult) -> tuple[str, str]:
        at = str(r.stopped_at) if r.decision == "equivalent" else f"> {r.n_pairs} ({r.decision})"
        return at, f"[{r.interval[0]:+.3f}, {r.interval[1]:+.3f}]"

    for margin, alpha in LOOKS:
        one = shown(sq.sequential_test(same, same, alpha, margin, 10))
        many = sq.sequential_tasks({f"task{t}": (same, same) for t in range(TASKS)}, alpha, margin, 10)
        task = shown(many.tasks["task0"])
        assert all(r == many.tasks["task0"] for r in many.tasks.values())  # every task alike
        pooled = shown(many.pooled)
        indices = many.pooled.n_pairs // TASKS
        print(
            f"{margin:6.2f} {alpha:6.3f} {one[0]:>15} {one[1]:>16} {task[0]:>21} {task[1]:>16} "
            f"{pooled[0]:>13} {indices:7d} {pooled[1]:>16}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--shared-sims", type=int, default=1000)
    ap.add_argument("--only", choices=["false-decisions", "equivalence-looks"], help="print only this table")
    args = ap.parse_args()
    n = args.sims
    if args.only == "false-decisions":
        false_decisions(n)
        return
    if args.only == "equivalence-looks":
        equivalence_looks()
        return
    false_decisions(n)
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

    m = args.shared_sims
    print(f"\npooled false better/worse, tasks sharing seeds (two runs of one policy, every task at 0.5), {m} comparisons")
    print(f"{'tasks':>5} {'pairs':>5} {'rho':>4} {'anytime: round robin':>20} {'per index':>9} "
          f"{'fixed: round robin':>18} {'per index':>9}")
    for tasks, pairs in SHARED:
        for rho in SHARED_RHO:
            old, new, fixed_old, fixed_new = shared_false_rates(tasks, pairs, rho, m)
            print(f"{tasks:5d} {pairs:5d} {rho:4.2f} {old:20.4f} {new:9.4f} {fixed_old:18.4f} {fixed_new:9.4f}")
    equivalence_looks()


if __name__ == "__main__":
    main()
