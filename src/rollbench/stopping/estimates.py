"""What a task's episodes say once `--eval.ci_width` stopped it: estimates that know the rule.

A task run until its Wilson interval is narrow enough stops early on prefixes whose rate
looks extreme, so the rate of the prefix (k/n) is pushed toward 0 or 1 (up to 1.5 points at
p = 0.1, W = 0.2, 100 at most) and the fixed-n Wilson interval covers as little as 88.8%.
Both are mended here with the exact distribution of where the rule stops:

    the rule (width W, a look every `block` episodes, at most `max_episodes`)
        ──▶ Sampling: the data counted at each look (failed units give none)
        ──▶ distribution(p): P_p(stop at look j with k successes), by dynamic programming
              over looks, for a whole vector of p at once
        ├──▶ unbiased_all(): the Rao-Blackwell estimate E[first datum | stop point] =
        │      P_p(first datum succeeds, stop there) / P_p(stop there), free of p;
        │      exactly unbiased, so a mean of tasks' estimates is too
        └──▶ interval(): the exact interval of the stop point, by inverting the rule's own
               distribution of k/n: every p whose two tails at the observed rate both
               exceed α/2. A test inversion: coverage >= 1 - α for every p, by construction

The mean of per-task rates (`overall`, `per_group` of a stopped run) gets its standard
error from each task's exact variance under the rule, at a shrunk rate ((k + 1)/(n + 2):
a task at 0/10 has no spread at its own estimate, but its rate is not known to be 0), plus
the covariance of the tasks that share seeds, clustered on the episode index.

Failed units (a crashed worker, after its retries) count as finished for the prefix but
give no datum: the looks up to the stop have the data counts the run had; looks past the
stop, never reached, are taken as fully counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rollbench.stats import Z95, wilson

ALPHA = 0.05
#: p's at which the tails are first evaluated before each interval endpoint is refined
_GRID = 401
_REFINE, _ROUNDS = 3, 9  # each round narrows an edge 4-fold: 4**-9 of a grid cell (1e-8 in p)


@dataclass(frozen=True)
class Sampling:
    """The rule as the data saw it: at look j, `looks[j]` data have been counted; the task
    stops at the first look whose Wilson interval is at most `width` wide, or at the last."""

    width: float
    looks: tuple[int, ...]  # cumulative data counts, non-decreasing; the last look always stops

    def stops_at(self, j: int, k: int) -> bool:
        n = self.looks[j]
        if j == len(self.looks) - 1:
            return True
        ci = wilson(k, n, Z95)
        return ci is not None and ci[1] - ci[0] <= self.width


def sampling(width: float, checkpoints: Sequence[int], data_at: Sequence[int]) -> Sampling:
    """The rule's looks (`checkpoints`: episode counts) with the data counted at the looks the
    run reached (`data_at`, one per reached look); later looks add whole blocks of data."""
    looks = list(data_at)
    for j in range(len(data_at), len(checkpoints)):
        prev_cp = checkpoints[j - 1] if j else 0
        looks.append((looks[-1] if looks else 0) + checkpoints[j] - prev_cp)
    return Sampling(width, tuple(looks))


@dataclass(frozen=True)
class _Points:
    looks: np.ndarray  # the look of each stop point
    n: np.ndarray  # its data count
    k: np.ndarray  # its successes
    at_look: tuple[tuple[np.ndarray, np.ndarray], ...]  # per look: (the k's that stop, their point ids)


@lru_cache(maxsize=64)
def _points(s: Sampling) -> _Points:
    """Every (look, k) the rule can stop at, in a fixed order."""
    looks: list[int] = []
    ns: list[int] = []
    ks: list[int] = []
    at_look = []
    running = np.array([True])  # k's a path still running can hold
    prev = 0
    for j, n in enumerate(s.looks):
        reach = np.zeros(n + 1, dtype=bool)
        for d in range(n - prev + 1):
            reach[d : d + len(running)] |= running
        stop_k = [k for k in np.flatnonzero(reach) if s.stops_at(j, int(k))]
        running = reach.copy()
        running[stop_k] = False
        ids = np.arange(len(ks), len(ks) + len(stop_k))
        looks += [j] * len(stop_k)
        ns += [n] * len(stop_k)
        ks += [int(k) for k in stop_k]
        at_look.append((np.array(stop_k, dtype=int), ids))
        prev = n
    return _Points(np.array(looks), np.array(ns), np.array(ks), tuple(at_look))


def _binom_pmf(m: int, p: np.ndarray) -> np.ndarray:
    """pmf of Binomial(m, p) for each p: shape (len(p), m + 1)."""
    j = np.arange(m + 1)
    logc = np.array([math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) for i in j])
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(j > 0, j * np.log(p[:, None]), 0.0) + np.where(m - j > 0, (m - j) * np.log1p(-p[:, None]), 0.0)
    return np.exp(logc + logp)


def distribution(s: Sampling, p: np.ndarray | float, first_success: bool = False) -> np.ndarray:
    """P_p(the rule stops at each of `_points(s)`): shape (len(p), points). With
    `first_success`, the probability of that AND the first datum being a success."""
    ps = np.atleast_1d(np.asarray(p, dtype=float))
    pts = _points(s)
    out = np.zeros((len(ps), len(pts.k)))
    alive = np.zeros((len(ps), 1))
    alive[:, 0] = 1.0
    prev = 0
    if first_success and s.looks[-1] > 0:
        alive = np.zeros((len(ps), 2))
        alive[:, 1] = ps  # one datum in, and it succeeded
        prev = 1
    for j, n in enumerate(s.looks):
        m = n - prev
        if m < 0:  # the first datum belongs to a later look
            continue
        pmf = _binom_pmf(m, ps)
        new = np.zeros((len(ps), alive.shape[1] + m))
        for d in range(m + 1):
            new[:, d : d + alive.shape[1]] += alive * pmf[:, d : d + 1]
        alive = new
        stop_k, ids = pts.at_look[j]
        out[:, ids] = alive[:, stop_k]
        alive[:, stop_k] = 0.0
        prev = n
    return out


def _observed(s: Sampling, look: int, k: int) -> int:
    pts = _points(s)
    hits = np.flatnonzero((pts.looks == look) & (pts.k == k))
    if len(hits) != 1:
        raise ValueError(f"the rule does not stop at look {look} with {k} successes")
    return int(hits[0])


@lru_cache(maxsize=16)
def unbiased_all(s: Sampling) -> np.ndarray:
    """E[first datum | the rule stopped there] at every stop point (in `_points` order): an
    unbiased estimate of p. The ratio is free of p; each point's is taken at its own rate,
    where both terms are far from underflow."""
    pts = _points(s)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(pts.n > 0, pts.k / np.maximum(pts.n, 1), 0.5)
    p = np.clip(rate, 1e-6, 1 - 1e-6)
    num = distribution(s, p, first_success=True)[np.arange(len(p)), np.arange(len(p))]
    den = distribution(s, p)[np.arange(len(p)), np.arange(len(p))]
    est = num / den
    return np.where(pts.k == 0, 0.0, np.where(pts.k == pts.n, 1.0, est))


def variance(s: Sampling, p: float) -> float:
    """Var_p of the unbiased estimate under the rule."""
    probs = distribution(s, np.array([p]))[0]
    u = unbiased_all(s)
    return float(max(0.0, np.sum(probs * u * u) - p * p))


@lru_cache(maxsize=16)
def _on_grid(s: Sampling) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the p grid, P_p of every stop point on it, every stop point's k/n)."""
    grid = np.linspace(0.0, 1.0, _GRID)
    grid[0], grid[-1] = 1e-12, 1 - 1e-12
    pts = _points(s)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(pts.n > 0, pts.k / np.maximum(pts.n, 1), np.nan)
    return grid, distribution(s, grid), t


def interval(s: Sampling, look: int, k: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact (1 - alpha) interval of p given the rule stopped at (look, k): the hull of
    {p : P_p(rate >= observed) > alpha/2 and P_p(rate <= observed) > alpha/2}."""
    n = s.looks[look]
    if n == 0:
        return 0.0, 1.0
    _observed(s, look, k)
    rate = k / n

    grid, grid_probs, t = _on_grid(s)  # shared by every task the same rule stopped
    above, below = t >= rate - 1e-12, t <= rate + 1e-12  # ties in both tails

    def in_set(probs: np.ndarray) -> np.ndarray:
        """Whether both tails at the observed rate exceed alpha/2, per row of P_p(stop points)."""
        return (probs[:, above].sum(axis=1) > alpha / 2) & (probs[:, below].sum(axis=1) > alpha / 2)

    def inside(p: np.ndarray) -> np.ndarray:
        return in_set(distribution(s, p))

    ok = in_set(grid_probs)
    if not ok.any():  # cannot happen for an observed point; the whole range is then honest
        return 0.0, 1.0
    first, last = int(np.argmax(ok)), len(ok) - 1 - int(np.argmax(ok[::-1]))
    brackets = []
    if first > 0:
        brackets.append((float(grid[first - 1]), float(grid[first])))
    if last < len(grid) - 1:
        brackets.append((float(grid[last + 1]), float(grid[last])))
    edges = iter(_edges(inside, brackets)) if brackets else iter(())
    lo = 0.0 if first == 0 else next(edges)
    hi = 1.0 if last == len(grid) - 1 else next(edges)
    return lo, hi


def _edges(inside: Callable[[np.ndarray], np.ndarray], brackets: list[tuple[float, float]]) -> list[float]:
    """Narrow each (a p outside the set, one inside) bracket to the set's edge, every bracket
    in one evaluation per round at _REFINE points between its ends; the answer is on the outer
    side, so the interval keeps every p of the set."""
    for _ in range(_ROUNDS):
        full = [np.linspace(out, into, _REFINE + 2) for out, into in brackets]
        ins = inside(np.concatenate([f[1:-1] for f in full])).reshape(len(brackets), _REFINE)
        # the first point inside, from the outer side (none: the inner end)
        firsts = [int(np.argmax(row)) if row.any() else _REFINE for row in ins]
        brackets = [(float(f[i]), float(f[i + 1])) for f, i in zip(full, firsts, strict=True)]
    return [out for out, _ in brackets]


@dataclass(frozen=True)
class TaskEstimate:
    """One stopped task: the unbiased rate, its exact interval, and its variance for means."""

    rate: float
    ci: tuple[float, float]
    variance: float


def estimate(s: Sampling, look: int, k: int) -> TaskEstimate:
    n = s.looks[look]
    shrunk = (k + 1) / (n + 2)
    rate = float(unbiased_all(s)[_observed(s, look, k)])
    return TaskEstimate(rate, interval(s, look, k), variance(s, shrunk))


def mean_of_rates(
    tasks: Sequence[TaskEstimate], outcomes: Sequence[Sequence[bool | None]] | None = None
) -> tuple[float, float, tuple[float, float]]:
    """(mean of the tasks' rates, its standard error, a 95% interval): each task weighs the
    same however many episodes it ran; one task's interval is its own exact one.

    Every task's episode i runs with seed + i, so outcomes at one index are correlated across
    tasks and only different indices are independent. `outcomes` (each task's counted
    outcomes by episode index, None for no datum) gives each pair of tasks' outcome
    correlation rho_st at the indices both counted, and the cross terms
    sum_{s != t} rho_st sqrt(V_s V_t) (V: the tasks' exact variances under the rule) are added
    when their sum is positive: never narrower than independent tasks, and wide by the overlap
    factor sqrt(n_min / n_max) it leaves out (the plain cluster-robust cross-products covered
    0.93 at 10 tasks, rho 0.35; this 0.95: bench/adaptive_numbers.py). Without `outcomes` the
    tasks are taken as independent."""
    if len(tasks) == 1:
        (t,) = tasks
        return t.rate, math.sqrt(t.variance), t.ci
    mean = sum(t.rate for t in tasks) / len(tasks)
    total = sum(t.variance for t in tasks)
    if outcomes is not None:
        sd = np.sqrt([t.variance for t in tasks])
        total += max(0.0, float(sd @ _correlation(outcomes) @ sd))
    se = math.sqrt(total) / len(tasks)
    return mean, se, (max(0.0, mean - Z95 * se), min(1.0, mean + Z95 * se))


def _correlation(outcomes: Sequence[Sequence[bool | None]]) -> np.ndarray:
    """The tasks' outcome correlations at the indices both have data at (0 on the diagonal,
    and where a task's outcomes do not vary)."""
    longest = max((len(o) for o in outcomes), default=0)
    z = np.zeros((len(outcomes), longest))  # standardised outcomes, 0 where no datum
    has = np.zeros((len(outcomes), longest))
    for t, seen in enumerate(outcomes):
        x = np.array(seen, dtype=float).reshape(-1)  # None -> nan
        ok = ~np.isnan(x)
        if ok.sum() > 1 and x[ok].std() > 0:
            z[t, : len(x)] = np.where(ok, (x - x[ok].mean()) / x[ok].std(), 0.0)
        has[t, : len(x)] = ok
    corr = (z @ z.T) / np.maximum(has @ has.T, 1)
    np.fill_diagonal(corr, 0.0)
    return corr


def task_estimate(
    width: float, checkpoints: Sequence[int], outcomes: Mapping[int, bool | None], n_stop: int
) -> TaskEstimate | None:
    """The estimate of a task the `--eval.ci_width` rule stopped after its first `n_stop`
    episodes (`outcomes`: episode index -> success, None for a failed unit); None when those
    episodes hold no datum."""
    reached = [cp for cp in checkpoints if cp <= n_stop]
    data_at = [sum(outcomes.get(i) is not None for i in range(cp)) for cp in reached]
    k = sum(bool(outcomes.get(i)) for i in range(n_stop))
    if not reached or data_at[-1] == 0:
        return None
    return estimate(sampling(width, checkpoints, data_at), len(reached) - 1, k)


def fixed_estimate(k: int, n: int) -> TaskEstimate | None:
    """A task no rule has stopped (yet): its rate, Wilson interval and binomial variance."""
    ci = wilson(k, n)
    if ci is None:
        return None
    shrunk = (k + 1) / (n + 2)
    return TaskEstimate(k / n, ci, shrunk * (1 - shrunk) / n)


def capital_steps(y: np.ndarray, means: np.ndarray, max_bet: float = 0.75) -> Iterator[np.ndarray]:
    """Yield log K_t(m) for every row of `y` (values in [0, 1], shape (rows, t)) and every
    candidate mean m after each step t = 1, 2, ...: the capital of betting on y_t - m with
    stakes chosen before y_t is seen (Waudby-Smith & Ramdas 2024, aGRAPA: (mu - m) / (sigma^2 +
    (mu - m)^2) from the running mean and variance, capped at max_bet of what can be lost). A
    nonnegative martingale when the mean is m, so the m's whose capital never reached 1/alpha
    form a (1 - alpha) confidence sequence, valid under any stopping rule."""
    m = np.asarray(means, dtype=float)[None, :]
    with np.errstate(divide="ignore"):
        cap_up, cap_down = max_bet / m, -max_bet / (1 - m)  # inf at m = 0 or 1: y - m has one sign there
    rows = y.shape[0]
    # the running mean and variance of the y's so far, with a prior of one pseudo-observation
    mu: np.ndarray = np.full(rows, 0.5)
    var: np.ndarray = np.full(rows, 0.25)
    total: np.ndarray = np.full(rows, 0.5)
    squares: np.ndarray = np.full(rows, 0.25)
    log_k = np.zeros((rows, m.shape[1]))
    for t in range(y.shape[1]):
        dev = mu[:, None] - m
        lam = np.clip(dev / (var[:, None] + dev * dev), cap_down, cap_up)
        log_k = log_k + np.log1p(lam * (y[:, t : t + 1] - m))
        yield log_k
        total = total + y[:, t]
        mu = total / (t + 2)
        squares = squares + (y[:, t] - mu) ** 2
        var = squares / (t + 2)


#: the rates an anytime interval is evaluated at (step 0.0025)
RATE_GRID = np.linspace(0.0, 1.0, 401)


def anytime_interval(successes: Sequence[bool], alpha: float = ALPHA) -> tuple[float, float]:
    """The (1 - alpha) betting confidence sequence of a success rate after these episodes, in
    their order: it covers the rate whatever rule stopped them (a comparison against another
    run included), at the price of being wider than a fixed-n interval. The hull of the grid
    rates never excluded."""
    y = np.asarray(successes, dtype=float)[None, :]
    if y.shape[1] == 0:
        return 0.0, 1.0
    excluded = np.zeros(len(RATE_GRID), dtype=bool)
    for log_k in capital_steps(y, RATE_GRID):
        excluded |= log_k[0] >= math.log(1 / alpha)
    left = np.flatnonzero(~excluded)
    if len(left) == 0:
        return 0.0, 1.0
    return float(RATE_GRID[left[0]]), float(RATE_GRID[left[-1]])
