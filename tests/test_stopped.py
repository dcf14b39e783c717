"""The numbers of a task stopped by `--eval.ci_width` (stopping/estimates.py), checked exactly:
the rule's distribution against brute-force enumeration of every outcome sequence, the
unbiased rate's bias (0), the rule-aware interval's coverage on a grid of p (>= 95%), and the
mean of tasks' rates (`overall`) against pooling, by simulation over the exact distribution."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rollbench.stats import wilson
from rollbench.stopping import estimates as stopped
from rollbench.stopping.adaptive import StopRule, decide

GRID = np.linspace(0.005, 0.995, 199)  # every half point from 0.5% to 99.5%
#: MetaWorld MT10-like rates, from 0.98 down to 0.3 (issue 35's example)
MT10 = [0.98, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]


def rule_sampling(rule: StopRule) -> stopped.Sampling:
    return stopped.sampling(rule.ci_width, rule.checkpoints(), [])


def enumerate_rule(rule: StopRule, failed: frozenset[int] = frozenset()):
    """Every outcome sequence of the maximum's length (failed indices give no datum), with the
    prefix `decide` stops at: [(outcomes, n_stop, k, data, K, N)] where k successes of n data
    are the prefix's and K of N the whole sequence's (its probability is p**K (1-p)**(N-K))."""
    free = [i for i in range(rule.max_episodes) if i not in failed]
    for bits in itertools.product((False, True), repeat=len(free)):
        outcomes: dict[int, bool | None] = dict.fromkeys(failed)
        outcomes.update(zip(free, bits, strict=True))
        n_stop = decide(rule, outcomes).n_episodes
        assert n_stop is not None
        kept = [outcomes[i] for i in range(n_stop) if outcomes[i] is not None]
        yield outcomes, n_stop, sum(bool(x) for x in kept), len(kept), sum(bits), len(bits)


def test_the_rule_s_distribution_is_the_brute_force_one() -> None:
    """P_p(stop at (n, k)) from the dynamic programme equals the sum over every sequence."""
    rule = StopRule(ci_width=0.6, block=3, max_episodes=12)
    s = rule_sampling(rule)
    pts = stopped._points(s)
    for p in (0.07, 0.5, 0.83):
        brute: dict[tuple[int, int], float] = {}
        for _, n_stop, k, _, big_k, big_n in enumerate_rule(rule):
            brute[(n_stop, k)] = brute.get((n_stop, k), 0.0) + p**big_k * (1 - p) ** (big_n - big_k)
        dp = dict(zip(zip(pts.n.tolist(), pts.k.tolist(), strict=True), stopped.distribution(s, p)[0], strict=True))
        assert sorted(brute) == sorted(dp)
        for key, prob in brute.items():
            assert dp[key] == pytest.approx(prob, abs=1e-13)


@pytest.mark.parametrize("failed", [frozenset(), frozenset({1}), frozenset({0, 4, 5})], ids=["none", "one", "three"])
def test_the_unbiased_rate_is_unbiased_by_brute_force(failed: frozenset[int]) -> None:
    """E_p[estimate] = p exactly, summed over every sequence, failed units included (they
    count for the prefix, give no datum); the prefix's k/n is biased under the same rule."""
    rule = StopRule(ci_width=0.6, block=3, max_episodes=12)
    seen: dict[tuple[bool | None, ...], float] = {}
    for p in (0.1, 0.35, 0.9):
        mean = mean_mle = 0.0
        for outcomes, n_stop, k, n, big_k, big_n in enumerate_rule(rule, failed):
            prefix = tuple(outcomes[i] for i in range(n_stop))
            if prefix not in seen:
                est = stopped.task_estimate(rule.ci_width, rule.checkpoints(), outcomes, n_stop)
                assert est is not None
                seen[prefix] = est.rate
            prob = p**big_k * (1 - p) ** (big_n - big_k)
            mean += prob * seen[prefix]
            mean_mle += prob * k / n
        assert mean == pytest.approx(p, abs=1e-12)
        assert abs(mean_mle - p) > 1e-3


@pytest.mark.parametrize("w", [0.2, 0.1])
def test_the_rule_aware_interval_covers_95_percent_at_every_p(w: float) -> None:
    """Exact coverage on the grid 0.5%..99.5%, at most 100 episodes, a look every 10: at
    least 95% everywhere, where the fixed-n Wilson interval of the prefix falls short."""
    rule = StopRule(ci_width=w, block=10, max_episodes=100)
    s = rule_sampling(rule)
    pts = stopped._points(s)
    probs = stopped.distribution(s, GRID)

    def coverage(bounds: np.ndarray) -> np.ndarray:  # the probability of the stop points whose interval holds p
        return (probs * ((bounds[None, :, 0] <= GRID[:, None]) & (GRID[:, None] <= bounds[None, :, 1]))).sum(axis=1)

    cov = coverage(np.array([stopped.interval(s, int(j), int(k)) for j, k in zip(pts.looks, pts.k, strict=True)]))
    assert cov.min() >= 0.95, (GRID[cov.argmin()], cov.min())
    wil = np.array([wilson(int(k), int(n)) for k, n in zip(pts.k, pts.n, strict=True)])
    assert coverage(wil).min() < 0.94  # what the rule-aware interval mends


@pytest.mark.parametrize("w", [0.2, 0.1])
def test_the_unbiased_rate_has_no_bias_where_the_prefix_rate_has_up_to_1_5_points(w: float) -> None:
    rule = StopRule(ci_width=w, block=10, max_episodes=100)
    s = rule_sampling(rule)
    pts = stopped._points(s)
    probs = stopped.distribution(s, GRID)
    bias = probs @ stopped.unbiased_all(s) - GRID
    assert np.abs(bias).max() < 1e-9
    mle_bias = probs @ (pts.k / pts.n) - GRID
    assert np.abs(mle_bias).max() > (0.014 if w == 0.2 else 0.006)


@pytest.mark.parametrize(
    ("w", "rates"),
    [(0.2, MT10), (0.1, MT10), (0.2, [0.1] * 10), (0.2, [0.5] * 10), (0.2, [0.99, 0.95, 0.9])],
    ids=["mt10-w0.2", "mt10-w0.1", "all-0.1", "all-0.5", "three-high"],
)
def test_the_mean_of_task_rates_is_unbiased_and_its_interval_covers(w: float, rates: list[float]) -> None:
    """`overall` of a stopped run: the mean of the tasks' unbiased rates, its bias within 0.5
    points (simulated: 0 exactly by the test above), its 95% interval covering ~95%; pooling
    the same episodes (what `overall` was) is 8 points low on MT10 at W = 0.2."""
    rule = StopRule(ci_width=w, block=10, max_episodes=100)
    s = rule_sampling(rule)
    pts = stopped._points(s)
    u = stopped.unbiased_all(s)
    ests = [stopped.estimate(s, int(j), int(k)) for j, k in zip(pts.looks, pts.k, strict=True)]
    var = np.array([e.variance for e in ests])
    rng = np.random.default_rng(35)
    reps = 4000
    probs = stopped.distribution(s, np.array(rates))
    picks = np.stack([rng.choice(len(u), size=reps, p=row / row.sum()) for row in probs])
    mean = u[picks].mean(axis=0)
    se = np.sqrt(var[picks].sum(axis=0)) / len(rates)
    truth = float(np.mean(rates))
    assert abs(mean.mean() - truth) < 0.005
    covered = (mean - stopped.Z95 * se <= truth) & (truth <= mean + stopped.Z95 * se)
    assert covered.mean() >= 0.935, covered.mean()
    # the one-task case of mean_of_rates is the task's own exact interval
    one = ests[0]
    assert stopped.mean_of_rates([one]) == (one.rate, pytest.approx(one.variance**0.5), one.ci)
    if rates == MT10 and w == 0.2:
        pooled = pts.k[picks].sum(axis=0) / pts.n[picks].sum(axis=0)
        assert pooled.mean() - truth < -0.07


def test_a_task_no_rule_stopped_keeps_its_wilson_interval() -> None:
    est = stopped.fixed_estimate(7, 20)
    assert est is not None and est.rate == 0.35 and est.ci == wilson(7, 20)
    assert stopped.fixed_estimate(0, 0) is None


@pytest.mark.parametrize(("p_a", "p_b", "rho"), [(0.5, 0.7, 0.0), (0.3, 0.6, 0.0), (0.8, 0.5, 0.3)])
def test_a_rate_stopped_by_a_comparison_keeps_its_anytime_interval_s_coverage(p_a: float, p_b: float, rho: float) -> None:
    """--eval.versus stops B's task when the comparison with A decides, which depends on A's
    episodes too: no exact interval of B's rate alone exists. The betting interval of B's
    episodes covers its rate under any stopping rule (>= 95% by Ville's inequality; 2,000
    simulated comparisons of up to 100 pairs at alpha/10, as for ten tasks)."""
    from rollbench.stopping import sequential as sq

    rng = np.random.default_rng(7)
    reps, n_max = 2000, 100
    u = rng.random((reps, n_max))
    v = np.where(rng.random(u.shape) < rho, u, rng.random(u.shape))
    a, b = u < p_a, v < p_b
    runs = sq._run(a, b, 0.005, 0.05, 10)
    covered = 0
    for r in range(reps):
        lo, hi = stopped.anytime_interval(b[r, : int(runs.looks[r]) * 10])
        covered += lo <= p_b <= hi
    assert covered / reps >= 0.95 - 3 * (0.05 * 0.95 / reps) ** 0.5, covered / reps


# -- tasks that share seeds (issue 47) ---------------------------------------------------


def stopped_shared_seed_runs(
    rates: list[float], rho: float, sims: int, w: float = 0.2, seed: int = 47
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs of tasks stopped by --eval.ci_width=w (a look every 10, at most 100) whose episode
    i shares seed + i: with chance rho the seed decides every task's outcome at once (one
    shared uniform), so outcomes at one index correlate (by rho at equal rates). Returns
    (each task's unbiased rate, its exact variance, its stop point's n, the outcomes)."""
    s = rule_sampling(StopRule(ci_width=w, block=10, max_episodes=100))
    pts, u = stopped._points(s), stopped.unbiased_all(s)
    var = np.array([stopped.variance(s, (k + 1) / (n + 2)) for k, n in zip(pts.k, pts.n, strict=True)])
    point_of = -np.ones((len(s.looks), s.looks[-1] + 1), dtype=int)
    point_of[pts.looks, pts.k] = np.arange(len(pts.k))
    rng = np.random.default_rng(seed)
    n = s.looks[-1]
    shared = rng.random((sims, 1, n)) < rho
    x = np.where(shared, rng.random((sims, 1, n)), rng.random((sims, len(rates), n))) < np.array(rates)[None, :, None]
    ids = point_of[np.arange(len(s.looks)), np.cumsum(x, axis=2)[:, :, np.array(s.looks) - 1]]
    point = np.take_along_axis(ids, (ids >= 0).argmax(axis=2)[..., None], axis=2)[..., 0]  # the first look that stops
    return u[point], var[point], pts.n[point], x


@pytest.mark.parametrize(("rates", "rho", "sims"), [(MT10, 0.35, 1500), (list(np.linspace(0.3, 0.95, 50)), 0.1, 400)])
def test_the_overall_interval_covers_when_tasks_share_seeds(rates: list[float], rho: float, sims: int) -> None:
    """`overall` of tasks that share seeds: taken as independent (no outcomes: the old
    standard error) its interval covers the mean rate far less than 95%; with each task's
    outcomes by index, the covariance clustered on the index restores 95% (within three
    Monte Carlo standard errors)."""
    rate, var, n_stop, x = stopped_shared_seed_runs(rates, rho, sims)
    truth = float(np.mean(rates))
    old = new = 0
    for r in range(sims):
        tasks = [stopped.TaskEstimate(float(rate[r, t]), (0.0, 1.0), float(var[r, t])) for t in range(len(rates))]
        _, _, ci = stopped.mean_of_rates(tasks)
        old += ci[0] <= truth <= ci[1]
        _, _, ci = stopped.mean_of_rates(tasks, [x[r, t, : n_stop[r, t]].tolist() for t in range(len(rates))])
        new += ci[0] <= truth <= ci[1]
    three_se = 3 * (0.05 * 0.95 / sims) ** 0.5
    print(f"\n{len(rates)} tasks, rho {rho}: coverage as independent {old / sims:.3f}, clustered on the index {new / sims:.3f}")
    assert old / sims < 0.95 - three_se and new / sims >= 0.95 - three_se, (old / sims, new / sims)


def test_the_mean_of_rates_of_independent_looking_tasks_keeps_its_interval() -> None:
    """Outcomes that do not co-vary (or a task that never varies) add nothing; a failed unit
    (None) is no datum; one task keeps its own exact interval whatever its outcomes."""
    a = stopped.TaskEstimate(0.5, (0.3, 0.7), 0.01)
    b = stopped.TaskEstimate(0.9, (0.8, 1.0), 0.004)
    alone = stopped.mean_of_rates([a, b])
    assert stopped.mean_of_rates([a, b], [[True, False, True, False], [True, True, False, False]]) == alone
    assert stopped.mean_of_rates([a, b], [[True, False, None, True], [True] * 4]) == alone
    same = stopped.mean_of_rates([a, b], [[True, False] * 10, [True, False] * 10])
    assert same[1] == pytest.approx((0.01 + 0.004 + 2 * (0.01 * 0.004) ** 0.5) ** 0.5 / 2)
    assert stopped.mean_of_rates([a], [[True, False]]) == (0.5, pytest.approx(0.1), (0.3, 0.7))
