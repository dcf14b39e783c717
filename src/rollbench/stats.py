"""Pure statistics (numpy and scipy only): the Wilson interval every rate carries, and the
intervals and exact tests `rollbench compare`, the sweeps and the stop rules use for two
success rates.

An episode either succeeds or not, so a task's success rate is a binomial proportion and
two runs are compared as two proportions:

- each rate gets its Wilson score interval (the one `eval_info.json` already reports);
- their difference B - A gets, paired (the same units ran in both), the exact conditional
  interval of McNemar's test (`mcnemar_interval`: it excludes 0 exactly when the test
  rejects), unpaired, Newcombe's hybrid score interval (square-and-add of the two Wilson
  intervals), which keeps its coverage at rates near 0 or 1 where the Wald interval
  collapses;
- the test is exact McNemar when the same (task, seed) units ran in both runs (only the
  units whose outcome differs carry information), else Boschloo's exact unconditional
  test, which is uniformly more powerful than Fisher's;
- p-values of several tasks are Holm-corrected (family-wise error, no independence needed).

Sample sizes are the usual normal approximations (Fleiss for two rates, Connor for
McNemar); they are estimates, said as "about".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

#: Boschloo's test sums over every (n_a + 1) x (n_b + 1) table for each of its nuisance
#: points: 50 x 50 takes 0.05 s here, 300 x 300 0.7 s, 1000 x 1000 17 s. Above this many
#: tables Fisher's exact test is used; at such sizes the two differ in the third digit.
BOSCHLOO_MAX_TABLES = 70_000
#: the two-sided 95% normal quantile
Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for k successes in n trials, as fractions."""
    if n == 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at k = 0 (k = n) the bound is exactly 0 (1); rounding would leave it a hair inside
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


Unit = TypeVar("Unit", bound=Hashable)


@dataclass(frozen=True)
class Paired:
    """Outcomes of the units that ran in both A and B."""

    both: int  # succeeded in A and in B
    only_a: int  # succeeded in A, failed in B
    only_b: int  # failed in A, succeeded in B
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.only_a + self.only_b + self.neither

    @property
    def k_a(self) -> int:
        return self.both + self.only_a

    @property
    def k_b(self) -> int:
        return self.both + self.only_b

    @classmethod
    def of(cls, a: Mapping[Unit, bool], b: Mapping[Unit, bool]) -> Paired:
        """The table of the units both `a` and `b` ran (unit -> success)."""
        cells = Counter((bool(a[u]), bool(b[u])) for u in a.keys() & b.keys())
        return cls(cells[True, True], cells[True, False], cells[False, True], cells[False, False])

    def __add__(self, other: Paired) -> Paired:
        return Paired(self.both + other.both, self.only_a + other.only_a, self.only_b + other.only_b, self.neither + other.neither)


def _wilson(k: int, n: int) -> tuple[float, float]:
    ci = wilson(k, n)
    if ci is None:
        raise ValueError("a rate of 0 episodes has no interval")
    return ci


def newcombe_unpaired(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[float, float]:
    """95% interval of p_B - p_A for independent samples (Newcombe 1998, method 10): the two
    Wilson intervals, square-and-add."""
    p_a, p_b = k_a / n_a, k_b / n_b
    (l_a, u_a), (l_b, u_b) = _wilson(k_a, n_a), _wilson(k_b, n_b)
    lo = p_b - p_a - math.sqrt((p_b - l_b) ** 2 + (u_a - p_a) ** 2)
    hi = p_b - p_a + math.sqrt((u_b - p_b) ** 2 + (p_a - l_a) ** 2)
    return max(-1.0, lo), min(1.0, hi)


def mcnemar_exact(t: Paired) -> float:
    """Two-sided exact McNemar p: the discordant units split 50:50 under no difference."""
    from scipy.stats import binomtest  # heavy: scipy.stats (~0.6 s to import)

    discordant = t.only_a + t.only_b
    if discordant == 0:
        return 1.0
    return float(binomtest(t.only_a, discordant, 0.5).pvalue)


def unpaired_test(k_a: int, n_a: int, k_b: int, n_b: int) -> tuple[str, float]:
    """(test name, two-sided p) for independent samples: Boschloo, or Fisher for huge tables."""
    from scipy.stats import boschloo_exact, fisher_exact  # heavy: scipy.stats (~0.6 s to import)

    table = [[k_b, k_a], [n_b - k_b, n_a - k_a]]
    if (n_a + 1) * (n_b + 1) > BOSCHLOO_MAX_TABLES:
        return "Fisher", float(fisher_exact(table).pvalue)
    p = float(boschloo_exact(table).pvalue)
    # scipy before 1.11 answered nan for tables where every episode succeeds (or fails)
    return "Boschloo", min(1.0, p) if math.isfinite(p) else 1.0


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    m = len(pvalues)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, (m - rank) * pvalues[i])  # adjusted values never decrease
        out[i] = min(1.0, running)
    return out


def _z(alpha: float, power: float) -> tuple[float, float]:
    from scipy.stats import norm  # heavy: scipy.stats (~0.6 s to import)

    return float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))


def episodes_needed_unpaired(p_a: float, p_b: float, alpha: float, power: float = 0.8) -> int | None:
    """About how many episodes per run detect p_B - p_A with `power` at two-sided `alpha`.

    Fleiss' formula with its continuity correction: without it the estimate is for a
    z-test, and the exact tests used here reach only ~77% power at that size (simulated).
    None when the rates are equal: no sample size tells apart what looks the same.
    """
    delta = abs(p_b - p_a)
    if delta == 0:
        return None
    za, zb = _z(alpha, power)
    mean = (p_a + p_b) / 2
    n = (za * math.sqrt(2 * mean * (1 - mean)) + zb * math.sqrt(p_a * (1 - p_a) + p_b * (1 - p_b))) ** 2 / delta**2
    n_cc = n / 4 * (1 + math.sqrt(1 + 4 / (n * delta))) ** 2
    return max(1, math.ceil(n_cc))


#: above this many pairs the normal formula is close to exact, and the exact search slow
EXACT_POWER_MAX_N = 2000


def mcnemar_power(n: int, p_only_a: float, p_only_b: float, alpha: float) -> float:
    """Exact power of the exact McNemar test for `n` pairs with these discordance rates."""
    from scipy.stats import binom  # heavy: scipy.stats (~0.6 s to import)

    psi = p_only_a + p_only_b
    d = np.arange(n + 1)
    # given d discordant pairs, the test rejects when only_a <= c or >= d - c, where c is
    # the largest count whose doubled lower tail under 1/2 stays within alpha (-1: none)
    c = binom.ppf(alpha / 2, d, 0.5)
    c = np.where(2 * binom.cdf(c, d, 0.5) <= alpha, c, c - 1)
    q = p_only_a / psi
    lower = np.where(c >= 0, binom.cdf(c, d, q), 0.0)
    upper = np.where(c >= 0, binom.sf(d - c - 1, d, q), 0.0)
    return float(np.sum(binom.pmf(d, n, psi) * np.minimum(1.0, lower + upper)))


def episodes_needed_paired(t: Paired, alpha: float, power: float = 0.8) -> int | None:
    """How many paired units reach `power` with exact McNemar at the observed discordance.

    Connor's (1987) normal formula gives the start (at ~77% exact power, simulated); up to
    EXACT_POWER_MAX_N the exact power, which saws up and down with n, is then stepped up
    to the first n that reaches the target.
    """
    if t.n == 0 or t.only_a == t.only_b:
        return None
    p_a, p_b = t.only_a / t.n, t.only_b / t.n
    psi, delta = p_a + p_b, p_b - p_a
    za, zb = _z(alpha, power)
    n = max(1, math.ceil((za * math.sqrt(psi) + zb * math.sqrt(max(0.0, psi - delta**2))) ** 2 / delta**2))
    if n > EXACT_POWER_MAX_N:
        return n
    while n < 2 * EXACT_POWER_MAX_N and mcnemar_power(n, p_a, p_b, alpha) < power:
        n += 1
    return n


def fmt_p(p: float) -> str:
    """p-values as people read them: 0.021, 0.0019, <0.0001."""
    if p < 1e-4:
        return "<0.0001"
    if p < 0.01:
        return f"{p:.2g}"
    return f"{p:.3f}" if p < 1 else "1"


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact (1 - alpha) interval of a binomial rate, each tail alpha/2."""
    from scipy.stats import beta  # heavy: scipy.stats (~0.6 s to import)

    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def mcnemar_interval(t: Paired, alpha: float) -> tuple[float, float]:
    """B - A = psi (2 theta - 1), psi the chance of a discordant pair and theta B's share of
    them, from the exact conditional McNemar test: the Clopper-Pearson interval of theta
    (given the discordant pairs, B's wins are Binomial(d, theta)), each end times the psi of
    psi's Clopper-Pearson interval that widens it. theta's interval excludes 1/2 exactly when
    the exact McNemar p (twice the smaller tail) is below alpha, and psi > 0 keeps the sign,
    so this interval excludes 0 exactly when the test rejects; Newcombe's hybrid score
    interval used before excluded it with p = 0.0625 (0 vs 5 discordant of 20: [+3.3, +42.7])."""
    d = t.only_a + t.only_b
    psi_lo, psi_hi = clopper_pearson(d, t.n, alpha)
    th_lo, th_hi = clopper_pearson(t.only_b, d, alpha) if d else (0.0, 1.0)
    lo, hi = 2 * th_lo - 1, 2 * th_hi - 1
    return lo * (psi_hi if lo < 0 else psi_lo), hi * (psi_lo if hi < 0 else psi_hi)


def _half_binomial(m: int) -> np.ndarray:
    """P(j heads of m fair coins), j = 0..m (from log-gamma: no 2**m overflow)."""
    j = np.arange(m + 1)
    log_comb = math.lgamma(m + 1) - np.array([math.lgamma(i + 1) + math.lgamma(m - i + 1) for i in j])
    return np.exp(log_comb - m * math.log(2.0))


def sign_flip_p(sums: Sequence[int]) -> float:
    """Two-sided exact p of a sum of integers whose signs are fair coins: each seed's B - A,
    summed over the tasks, is as likely negated when A and B do equally well (swapping the
    two runs' outcomes at that seed changes nothing in law). p = P(|S| >= |observed|); with
    one task (sums in -1, 0, 1) it is the exact McNemar p."""
    sizes = Counter(abs(int(s)) for s in sums if s)
    total = sum(v * m for v, m in sizes.items())
    if total == 0:
        return 1.0
    dist: np.ndarray = np.zeros(2 * total + 1)
    dist[total] = 1.0  # P(S = s) at index s + total
    for v, m in sizes.items():
        kernel = np.zeros(2 * v * m + 1)
        kernel[2 * v * np.arange(m + 1)] = _half_binomial(m)  # S += v (2j - m)
        if len(dist) * len(kernel) > 5_000_000:  # by FFT, as scipy.signal.fftconvolve does
            size = len(dist) + len(kernel) - 1
            full = np.clip(np.fft.irfft(np.fft.rfft(dist, size) * np.fft.rfft(kernel, size), size), 0.0, None)
        else:
            full = np.convolve(dist, kernel)
        dist = full[v * m : v * m + 2 * total + 1]
    observed = abs(int(sum(sums)))
    values = np.abs(np.arange(-total, total + 1))
    return float(min(1.0, dist[values >= observed].sum()))
