"""The numbers of a task stopped by `--eval.ci_width` (results/stopped.py), checked exactly:
the rule's distribution against brute-force enumeration of every outcome sequence, the
unbiased rate's bias (0), the rule-aware interval's coverage on a grid of p (>= 95%), and the
mean of tasks' rates (`overall`) against pooling, by simulation over the exact distribution."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rollbench.results import stopped
from rollbench.results.adaptive import StopRule, decide
from rollbench.results.summary import wilson

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
    cov = stopped.coverage(s, GRID)
    assert cov.min() >= 0.95, (GRID[cov.argmin()], cov.min())
    pts = stopped._points(s)
    wil = np.array([wilson(int(k), int(n)) for k, n in zip(pts.k, pts.n, strict=True)])
    probs = stopped.distribution(s, GRID)
    holds = (wil[None, :, 0] <= GRID[:, None]) & (GRID[:, None] <= wil[None, :, 1])
    assert (probs * holds).sum(axis=1).min() < 0.94  # what the rule-aware interval mends


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
    from rollbench.report import sequential as sq

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
