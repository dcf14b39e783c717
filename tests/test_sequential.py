"""The sequential comparison: e-values by hand, its error rates under optional stopping by
exact enumeration and by simulation, and what it saves over a fixed-n McNemar test.

`pytest -s` prints the simulated numbers, for quoting."""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from rollbench.report import sequential as sq
from rollbench.report.stats import mcnemar_power

# -- the e-value and its martingale, exactly ------------------------------------------


def e_by_prediction(wins: list[int], c: Fraction) -> Fraction:
    """The mixture as a product of Bayes predictions of each discordant pair, over 1/2 each."""
    e, k = Fraction(1), 0
    for m, won in enumerate(wins):
        p_win = (k + c) / (m + 2 * c)
        e *= (p_win if won else 1 - p_win) / Fraction(1, 2)
        k += won
    return e


@pytest.mark.parametrize("c", [Fraction(1), Fraction(1, 2)])
def test_e_value_against_the_sequential_product(c):
    for n in range(9):
        for x in range(n + 1):
            wins = [1] * x + [0] * (n - x)  # the mixture depends on the counts only
            expected = float(e_by_prediction(wins, c))
            assert float(np.exp(sq.log_e_value(n, x, float(c)))) == pytest.approx(expected, rel=1e-12)


def test_e_value_by_hand():
    # c = 1: E_n = 2^n / ((n + 1) C(n, x))
    assert math.exp(sq.log_e_value(10, 10)) == pytest.approx(1024 / 11, rel=1e-12)
    assert math.exp(sq.log_e_value(10, 9)) == pytest.approx(1024 / 110, rel=1e-12)
    assert math.exp(sq.log_e_value(10, 5)) == pytest.approx(1024 / (11 * 252), rel=1e-12)
    assert math.exp(sq.log_e_value(0, 0)) == pytest.approx(1.0)


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_martingale_under_no_difference(c):
    """E[E_{n+1} | x wins of n] = E_n when each discordant pair is a fair coin."""
    for n in range(12):
        x = np.arange(n + 1)
        now = np.exp(sq.log_e_value(n, x, c))
        next_ = 0.5 * np.exp(sq.log_e_value(n + 1, x + 1, c)) + 0.5 * np.exp(sq.log_e_value(n + 1, x, c))
        np.testing.assert_allclose(next_, now, rtol=1e-12)
        weights = np.array([math.comb(n, k) for k in range(n + 1)]) / 2**n
        assert float(weights @ now) == pytest.approx(1.0, rel=1e-12)  # every path enumerated


def test_ville_bound_exactly_for_a_look_after_every_discordant_pair():
    """P(E_m >= 1/alpha for some m <= 400) under fair coins, by dynamic programming over
    (m, x) with crossing paths removed: the worst case of looking, since looks per block skip some m."""
    alpha, n_max = 0.05, 400
    alive = np.array([1.0])  # probability of x wins among m, on paths that never crossed
    crossed = 0.0
    for m in range(1, n_max + 1):
        alive = 0.5 * (np.append(alive, 0.0) + np.insert(alive, 0, 0.0))
        hit = sq.log_e_value(m, np.arange(m + 1)) >= math.log(1 / alpha)
        crossed += float(alive[hit].sum())
        alive[hit] = 0.0
    print(f"\nexact P(sup_m<=400 E_m >= 20) under no difference: {crossed:.4f}")
    assert 0.01 < crossed <= alpha


# -- one comparison --------------------------------------------------------------------


def test_b_always_wins_stops_at_the_first_block():
    r = sq.sequential_test([0] * 40, [1] * 40, alpha=0.05, block=10)
    assert (r.decision, r.stopped_at, r.n_pairs, r.n_discordant, r.b_wins) == ("better", 10, 10, 10, 10)
    assert r.e_value == pytest.approx(1024 / 11)
    assert r.p_value == pytest.approx(11 / 1024)
    assert r.interval[1] == 1.0  # 10 pairs are too few for the interval to exclude 0; the test is sharper
    # looking after every pair: E_7 = 128/8 = 16 < 20 <= E_8 = 256/9
    assert sq.sequential_test([0] * 40, [1] * 40, block=1).stopped_at == 8
    worse = sq.sequential_test([True] * 40, [False] * 40)
    assert (worse.decision, worse.stopped_at, worse.b_wins) == ("worse", 10, 0)


def test_concordant_pairs_become_equivalent_where_the_bound_says():
    """All pairs agree: the bet is capped at 1/2 and the variance term is 0, so the interval
    of p_B - p_A is +-4 log(2/alpha) / t, inside +-0.1 from t = 148 (looked at: 150)."""
    a = [1, 0, 1, 1] * 100
    r = sq.sequential_test(a, a, alpha=0.05, margin=0.1, block=10)
    assert (r.decision, r.stopped_at, r.n_discordant) == ("equivalent", 150, 0)
    assert r.interval == pytest.approx((-4 * math.log(40) / 150, 4 * math.log(40) / 150))
    assert sq.sequential_test(a, a, margin=0.05).stopped_at == 300
    assert sq.sequential_test(a, a, margin=0.0).decision == "undecided"  # margin 0 never is


def test_the_tail_short_of_a_block_is_not_used_and_the_result_is_deterministic():
    a, b = [1, 0, 1, 0, 1] * 5, [1, 1, 0, 0, 1] * 5  # 25 pairs, no clear difference
    r = sq.sequential_test(a, b, block=10)
    assert (r.decision, r.n_pairs, r.stopped_at) == ("undecided", 20, None)
    assert r == sq.sequential_test(a, b, block=10)
    assert r == sq.sequential_test([bool(v) for v in a], np.array(b), block=10)


@pytest.mark.parametrize("n", [0, 9])
def test_less_than_a_block_is_undecided(n):
    r = sq.sequential_test([1] * n, [0] * n, block=10)
    assert (r.decision, r.stopped_at, r.n_pairs, r.e_value, r.p_value) == ("undecided", None, 0, 1.0, 1.0)
    assert r.interval == (-1.0, 1.0)


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="A has 3 outcomes and B 2"):
        sq.sequential_test([1, 0, 1], [1, 0])
    for alpha in (0, 1, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha must be in"):
            sq.sequential_test([1], [1], alpha=alpha)
    for margin in (-0.1, 1.0):
        with pytest.raises(ValueError, match="margin must be in"):
            sq.sequential_test([1], [1], margin=margin)
    with pytest.raises(ValueError, match="block must be"):
        sq.sequential_test([1], [1], block=0)
    with pytest.raises(ValueError, match=r"outcomes of B must be 0/1.*0\.5"):
        sq.sequential_test([1, 0], [1, 0.5])
    with pytest.raises(ValueError, match="no tasks"):
        sq.sequential_tasks({})
    with pytest.raises(ValueError, match="task 'pick'"):
        sq.sequential_tasks({"pick": ([1, 0], [1])})


# -- many tasks ---------------------------------------------------------------------


def test_tasks_are_tested_at_alpha_over_t_and_pooled_in_round_robin():
    rng = np.random.default_rng(0)
    same = (rng.random(60) < 0.5).astype(int).tolist()
    pairs = {"reach": ([0] * 60, [1] * 60), "push": (same, same), "pick": (same, [1 - v for v in same])}
    out = sq.sequential_tasks(pairs, alpha=0.06, margin=0.1, block=10)
    assert list(out.tasks) == ["pick", "push", "reach"]
    for name, (a, b) in pairs.items():
        assert out.tasks[name] == sq.sequential_test(a, b, 0.02, 0.1, 10)
    # at alpha/3 = 0.02, E needs 50: 2^n / (n + 1) crosses it at n = 9, looked at 10
    assert (out.tasks["reach"].decision, out.tasks["reach"].stopped_at) == ("better", 10)
    assert out.tasks["push"].decision == "undecided"  # 60 concordant pairs: too few for 0.1
    assert out.pooled.alpha == 0.06
    # pooled order: episode 0 of pick, push, reach, then episode 1, ...; looks every 30 pairs
    a = [v for i in range(60) for v in (pairs["pick"][0][i], pairs["push"][0][i], pairs["reach"][0][i])]
    b = [v for i in range(60) for v in (pairs["pick"][1][i], pairs["push"][1][i], pairs["reach"][1][i])]
    assert out.pooled == sq.sequential_test(a, b, 0.06, 0.1, 30)


def test_tasks_of_different_lengths_pool_what_they_have():
    out = sq.sequential_tasks({"a": ([0] * 5, [1] * 5), "b": ([1] * 25, [1] * 25)}, block=5)
    assert out.pooled.n_pairs == 30  # 5 + 25 pairs, looks every 10
    assert out.tasks["a"].n_pairs == 5 and out.tasks["b"].n_pairs == 25


# -- error rates and savings, simulated ------------------------------------------------

N_SIMS = 4000


def three_se(rate: float, n: int) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize(("p", "rho"), [(0.5, 0.0), (0.5, 0.5), (0.9, 0.0), (0.9, 0.5), (0.2, 0.9)])
def test_false_positive_rate_of_equal_policies(p, rho):
    alpha = 0.05
    s = sq.simulate(p, p, n_max=200, n_sims=N_SIMS, alpha=alpha, margin=0.05, block=10, rng=11, rho=rho)
    print(f"\nequal p={p} rho={rho}: better/worse {s.rejection_rate:.4f}, fixed-n McNemar at 200: {s.fixed_power:.4f}")
    assert s.rejection_rate <= alpha + three_se(alpha, N_SIMS)
    assert s.power is None and s.fixed_n is None


def test_rejections_do_happen_at_a_loose_level():
    """A bound met by never rejecting would hide a bug: at alpha = 0.2 some equal pairs must."""
    s = sq.simulate(0.5, 0.5, n_max=200, n_sims=N_SIMS, alpha=0.2, block=10, rng=12)
    print(f"\nequal p=0.5, alpha=0.2: better or worse {s.rejection_rate:.4f}")
    assert 0.03 < s.rejection_rate <= 0.2 + three_se(0.2, N_SIMS)
    assert s.better > 0 and s.worse > 0  # both sides


SETTINGS = [(0.5, 0.8, 0.0, 200), (0.5, 0.8, 0.0, 100), (0.7, 0.9, 0.5, 200), (0.6, 0.8, 0.0, 300)]


@pytest.mark.parametrize(("p_a", "p_b", "rho", "n_max"), SETTINGS)
def test_power_and_pairs_used_against_fixed_n_mcnemar(p_a, p_b, rho, n_max):
    s = sq.simulate(p_a, p_b, n_max=n_max, n_sims=N_SIMS, alpha=0.05, margin=0.05, block=10, rng=13, rho=rho)
    assert s.power is not None and s.fixed_n is not None
    print(
        f"\n{p_a} vs {p_b} rho={rho} n_max={n_max}: sequential power {s.power:.4f}, pairs used mean {s.mean_pairs:.1f} "
        f"median {s.median_pairs:.0f}; fixed-n McNemar needs {s.fixed_n} pairs for that power ({s.fixed_power:.4f} at {n_max})"
    )
    assert s.worse <= 0.001  # the wrong direction
    assert s.power >= 0.8
    assert s.mean_pairs < s.fixed_n
    # fixed_n is where exact McNemar first reaches the power, walking from below
    only_a, only_b = sq.discordance(p_a, p_b, rho)
    target = min(s.power, 1 - 0.5 / N_SIMS)
    assert mcnemar_power(s.fixed_n, only_a, only_b, 0.05) >= target > mcnemar_power(s.fixed_n - 1, only_a, only_b, 0.05)


def test_fixed_power_matches_a_simulated_mcnemar():
    """The exact power `simulate` quotes, against exact McNemar run on simulated pairs."""
    from scipy.stats import binom

    rng = np.random.default_rng(3)
    only_a, only_b = sq.discordance(0.5, 0.7, 0.3)
    counts = rng.multinomial(60, [only_a, only_b, 1 - only_a - only_b], size=4000)
    d, k = counts[:, 0] + counts[:, 1], np.minimum(counts[:, 0], counts[:, 1])
    p = np.minimum(1.0, 2 * binom.cdf(k, d, 0.5))
    simulated = float(np.mean((p <= 0.05) & (d > 0)))
    exact = sq.simulate(0.5, 0.7, 60, 10, rho=0.3, rng=0).fixed_power
    assert exact == pytest.approx(simulated, abs=three_se(0.5, 4000))


def test_equivalent_policies_that_mostly_agree_are_found_equivalent():
    s = sq.simulate(0.9, 0.9, n_max=300, n_sims=N_SIMS, alpha=0.05, margin=0.1, block=10, rng=14, rho=0.9)
    print(f"\nequal p=0.9 rho=0.9 margin 0.1: equivalent {s.equivalent:.4f}, mean pairs {s.mean_pairs:.1f}")
    assert s.equivalent >= 0.9


@pytest.mark.parametrize(("p_b", "rho"), [(0.7, 0.9), (0.7, 0.0), (0.8, 0.9)])
def test_a_difference_of_at_least_the_margin_is_not_called_equivalent(p_b, rho):
    s = sq.simulate(0.9, p_b, n_max=300, n_sims=N_SIMS, alpha=0.05, margin=0.1, block=10, rng=15, rho=rho)
    print(f"\n0.9 vs {p_b} rho={rho} margin 0.1: equivalent {s.equivalent:.4f}, worse {s.worse:.4f}")
    assert s.equivalent <= 0.05 + three_se(0.05, N_SIMS)


@pytest.mark.parametrize(("p_a", "p_b", "rho"), [(0.9, 0.8, 0.9), (0.5, 0.5, 0.0), (0.9, 0.9, 0.95), (0.3, 0.6, 0.5)])
def test_confidence_sequence_covers_at_every_time(p_a, p_b, rho):
    """Anytime coverage, looking after every pair: P(some t misses p_B - p_A) <= alpha."""
    rng = np.random.default_rng(16)
    u = rng.random((N_SIMS, 300))
    v = np.where(rng.random(u.shape) < rho, u, rng.random(u.shape))
    lo, hi = sq.confidence_sequence((v < p_b).astype(int) - (u < p_a).astype(int), alpha=0.05)
    delta = p_b - p_a
    missed = float(np.mean(((lo > delta) | (hi < delta)).any(axis=1)))
    width = float(np.mean(hi[:, -1] - lo[:, -1]))
    print(f"\nconfidence sequence {p_a} vs {p_b} rho={rho}: missed {missed:.4f}, mean width at 300 {width:.3f}")
    assert missed <= 0.05 + three_se(0.05, N_SIMS)


def test_simulation_is_fast_and_reproducible():
    start = time.perf_counter()
    s = sq.simulate(0.5, 0.6, n_max=200, n_sims=2000, rng=5)
    elapsed = time.perf_counter() - start
    print(f"\n2,000 simulations of 200 pairs: {elapsed:.2f} s")
    assert elapsed < 10
    assert s == sq.simulate(0.5, 0.6, n_max=200, n_sims=2000, rng=5)
