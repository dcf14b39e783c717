"""Sequential, anytime-valid comparison of two policies run on the same seeds.

Episode i of a task gives a pair (a_i, b_i) of successes. The comparison is looked at after
every `block` pairs and stops at the first look where B is better, worse, or equivalent
within a margin; every claim keeps its error bound however often it is looked at, and
whenever it stops (optional stopping).

- **One confidence sequence decides.** Episode i gives d_i = b_i - a_i in {-1, 0, 1}, and
  y_i = (d_i + 1) / 2 in [0, 1] has mean m = (1 + Delta) / 2, Delta = p_B - p_A. For each
  candidate m a gambler bets on y_i - m, staking lambda_i(m) chosen before pair i is seen
  (predictable), and holds the capital K_t(m) = prod_i (1 + lambda_i(m) (y_i - m)): a
  nonnegative martingale when the mean is m, so by Ville's inequality
  P(sup_t K_t(m) >= 1/alpha) <= alpha, and {m : K_s(m) < 1/alpha for every s <= t} is a
  (1 - alpha) confidence sequence (Waudby-Smith & Ramdas 2024, "Estimating means of bounded
  random variables by betting", JRSS-B). The bets are their aGRAPA: lambda = (mu - m) /
  (sigma^2 + (mu - m)^2) from the running mean and variance of the y's before pair i,
  capped at MAX_BET / m and MAX_BET / (1 - m). At m = 1/2 (no difference) a concordant pair
  (y = 1/2) moves nothing and each discordant pair is a bet of the Kelly fraction on B's
  running share of wins, the growth rate of the sequential McNemar test. The sequence is
  evaluated on a grid of Delta (step 0.005); the interval reported is the hull of the grid
  points still in it, and every decision is read off that same interval: "better" when it
  lies above 0, "worse" below 0, "equivalent" inside (-margin, margin). So a decision never
  sits beside an interval that says otherwise, and each claim is wrong with chance <=
  alpha: the sequence covers Delta at every time with chance >= 1 - alpha. A difference is
  reported before equivalence. `e_value` is K_t at Delta = 0, `p_value` 1 / its largest
  value at a look (anytime-valid).
  Compared with the empirical-Bernstein sequence this replaced, two identical policies are
  "equivalent within +-0.1" after 50 pairs instead of 150 (alpha = 0.05). STEP (Snyder et
  al., RSS 2025, "Is your imitation learning policy better than mine?") optimises the
  stopping rule for a given prior and budget; this is a plain sequence with a guaranteed
  bound instead.
- **Many tasks.** Each task is tested at alpha / T (Bonferroni): every task then stops on
  its own evidence the moment it is decided, and all T claims hold at once by the union
  bound. Holm would gain little here and would tie each task's stop to the others'. The
  pooled test, at alpha, pools per episode index: every task's episode i runs with seed + i
  (lerobot-eval's convention), so the pairs of one index are correlated across tasks and
  only different indices are independent. Index i gives one observation, the mean over the
  tasks that have it of d_{t,i}, in [-1, 1]; the betting sequence above runs on these (a
  look every `block` indices), so Ville's inequality holds whatever the correlation across
  tasks, and its sequence covers the mean of the tasks' Delta (tasks with fewer pairs weigh
  less past their end). Pooling the pairs round robin as if independent said better/worse
  up to 9% of the time at alpha = 0.05 for tasks whose outcomes correlate by 0.35 through
  the seed (bench/sequential_numbers.py). The fixed design pools the same way: the exact
  group-sequential test on the walk of S_i = sum over tasks of d_{t,i}, its steps' signs
  fair coins given their sizes when A and B are exchangeable at each index (the same
  policy); `_group_sequential` takes steps of any size. Pooled claims are not counted in
  the task family.

Only whole blocks are looked at: a tail shorter than `block` is not used.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from rollbench.errors import ConfigError
from rollbench.stats import clopper_pearson, mcnemar_power
from rollbench.stopping.estimates import capital_steps

#: the largest stake, as a fraction of what the capital can lose (WSR's c; they suggest 1/2 or 3/4)
MAX_BET = 0.75
#: the candidate differences p_B - p_A the confidence sequence is evaluated at (step 0.005)
GRID = np.linspace(-1.0, 1.0, 401)
_ZERO = 200  # GRID[_ZERO] == 0

Decision = Literal["better", "worse", "equivalent", "undecided"]
#: anytime: stop at any look, for a difference or equivalence; fixed: a budget of pairs fixed
#: in advance, an exact group-sequential McNemar test (better or worse only)
Design = Literal["anytime", "fixed"]
_DECISIONS: tuple[Decision, ...] = ("undecided", "better", "worse", "equivalent")


@dataclass(frozen=True)
class SequentialResult:
    """Where a sequential comparison stopped, and what it saw up to there."""

    decision: Decision
    n_pairs: int  # pairs used: up to the stop, else every whole block
    n_discordant: int
    b_wins: int  # discordant pairs won by B
    e_value: float  # at n_pairs
    p_value: float  # anytime-valid: 1 / the largest e-value at a look
    interval: tuple[float, float]  # 1 - alpha confidence sequence of p_B - p_A at n_pairs
    stopped_at: int | None  # pairs used when decided
    alpha: float  # the level it ran at (alpha / T for one of T tasks)


@dataclass(frozen=True)
class TaskComparison:
    """Per-task results at alpha / T each, and the pooled result at alpha."""

    tasks: Mapping[str, SequentialResult]
    pooled: SequentialResult


def _capital_steps(d: np.ndarray, deltas: np.ndarray) -> Iterator[np.ndarray]:
    """Yield log K_t(Delta) of every row and candidate after each pair t = 1, 2, ...: the
    betting process of stopping/estimates.py on y = (d + 1) / 2, whose mean is (1 + Delta) / 2."""
    yield from capital_steps((d + 1) / 2, (1 + deltas) / 2, MAX_BET)


def _hull(excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the grid points not excluded, per row; (-1, 1) where none is left (cannot
    happen at the true difference but with chance alpha; then nothing is said)."""
    left = ~excluded
    any_left = left.any(axis=-1)
    first = np.argmax(left, axis=-1)
    last = left.shape[-1] - 1 - np.argmax(left[..., ::-1], axis=-1)
    return np.where(any_left, GRID[first], -1.0), np.where(any_left, GRID[last], 1.0)


@dataclass(frozen=True)
class _Runs:
    """Sequential tests of many comparisons at once: one row each, values at the stop."""

    decision: np.ndarray  # index into _DECISIONS
    looks: np.ndarray  # whole blocks used
    discordant: np.ndarray
    b_wins: np.ndarray
    log_e: np.ndarray  # log K at Delta = 0
    max_log_e: np.ndarray  # its largest value at a look up to the stop
    lo: np.ndarray
    hi: np.ndarray


def _run(a: np.ndarray, b: np.ndarray, alpha: float, margin: float, block: int) -> _Runs:
    return _run_d(b.astype(float) - a.astype(float), a != b, b & ~a, alpha, margin, block)


def _run_d(
    d: np.ndarray, disc: np.ndarray, wins: np.ndarray, alpha: float, margin: float, block: int
) -> _Runs:
    """The sequential test of rows of differences d in [-1, 1] (one pair's, or an episode
    index's mean over tasks), with the discordant pairs and B's wins each step holds."""
    rows, n_looks = d.shape[0], d.shape[1] // block
    if n_looks == 0:
        zero = np.zeros(rows, dtype=int)
        return _Runs(zero, zero, zero, zero, np.zeros(rows), np.zeros(rows), -np.ones(rows), np.ones(rows))
    d = d[:, : n_looks * block]
    at = np.arange(block, n_looks * block + 1, block) - 1  # the last step of each look
    discordant = np.cumsum(disc, axis=1)[:, at]
    b_wins = np.cumsum(wins, axis=1)[:, at]
    threshold = math.log(1 / alpha)
    lo, hi, log_e = (np.zeros((rows, n_looks)) for _ in range(3))
    excluded = np.zeros((rows, len(GRID)), dtype=bool)  # at some time so far: out for good
    look = 0
    for t, log_k in enumerate(_capital_steps(d, GRID)):
        excluded |= log_k >= threshold
        if t == at[look]:
            lo[:, look], hi[:, look] = _hull(excluded)
            log_e[:, look] = log_k[:, _ZERO]
            look += 1
    differs_up, differs_down = lo > 0, hi < 0
    equivalent = (lo > -margin) & (hi < margin)
    code = np.where(differs_up, 1, np.where(differs_down, 2, np.where(equivalent, 3, 0)))
    decided = code > 0
    stop = np.where(decided.any(axis=1), decided.argmax(axis=1), n_looks - 1)

    looks = np.broadcast_to(np.arange(1, n_looks + 1), code.shape)
    at_stop = (code, looks, discordant, b_wins, log_e, np.maximum.accumulate(log_e, axis=1), lo, hi)
    return _Runs(*(np.take_along_axis(values, stop[:, None], axis=1)[:, 0] for values in at_stop))


# -- a fixed budget: an exact group-sequential McNemar test --------------------------------


def spent(alpha: float, fraction: float) -> float:
    """O'Brien-Fleming-like alpha spending (Lan & DeMets 1983): how much of the two-sided
    alpha may be spent once `fraction` of the budget's pairs are in. Little early, nearly
    all at the end, so the last look keeps close to the fixed-n test's power."""
    from scipy.stats import norm  # heavy: scipy.stats (~0.6 s to import)

    if fraction <= 0:
        return 0.0
    return float(2 * (1 - norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(min(1.0, fraction)))))


def _look_ends(n: int, block: int, budget: int) -> list[int]:
    """The pair counts the fixed-budget test looks at: every block below the budget, and the
    budget itself, as far as `n` pairs go."""
    ends = [*range(block, budget, block), budget]
    return [t for t in ends if t <= n]


def _group_sequential(
    disc: np.ndarray, wins: np.ndarray, q: np.ndarray, alpha: float, block: int, budget: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """For each row (its discordant pairs, B's wins among them, and a share q of wins to test),
    whether the exact group-sequential test rejects "B wins a discordant pair with chance q"
    at each look, upward and downward: shapes (rows, looks) each, and the looks' pair counts.

    Given which pairs are discordant, S = B's wins - A's wins is a random walk of +-1 steps
    (+1 with chance q) over them (`disc` may give integer step sizes instead: the pooled
    walk of index sums, each step up with chance q given its size). At each look the boundaries u (and l) are the least extreme
    whose exact chance of being reached, on paths not stopped before, keeps each side's
    running total within spent(alpha, pairs / budget) / 2; unspent alpha carries forward. The
    chances are conditional on the discordant pattern, so the level holds whatever it is."""
    rows, n = disc.shape
    ends = _look_ends(n, block, budget)
    steps = disc.astype(int)  # a step's size: 1 for a discordant pair; pooled, |S_i|
    width = 2 * max(ends, default=0) * max(1, int(steps.max(initial=0))) + 1
    centre = width // 2
    mass = np.zeros((rows, width))
    mass[:, centre] = 1.0
    crossed_up, crossed_down = np.zeros(rows), np.zeros(rows)
    s_obs = np.zeros(rows, dtype=int)
    up, down = np.zeros((rows, len(ends)), dtype=bool), np.zeros((rows, len(ends)), dtype=bool)
    qq = q[:, None]
    for look, end in enumerate(ends):
        for t in range(ends[look - 1] if look else 0, end):
            size = steps[:, t]
            _take_step(mass, size, qq)
            s_obs += np.where(wins[:, t], size, -size)
        side = spent(alpha, end / budget) / 2
        u, l_, reached_up, reached_down = _boundaries(mass, side - crossed_up, side - crossed_down, centre)
        crossed_up += reached_up
        crossed_down += reached_down
        idx = np.arange(width)[None, :]
        mass = np.where((idx >= u[:, None]) | (idx <= l_[:, None]), 0.0, mass)
        pos = s_obs + centre
        up[:, look], down[:, look] = pos >= u, pos <= l_
    return up, down, ends


def _take_step(mass: np.ndarray, size: np.ndarray, q: np.ndarray) -> None:
    """Moves each row's distribution of S (`mass`) by one step of the row's `size` (none where
    0), up with the row's chance `q`, in place."""
    for m in np.unique(size[size > 0]):
        these = size == m
        held, q_m = mass[these], q[these]
        stepped = np.zeros_like(held)
        stepped[:, m:] += q_m * held[:, :-m]
        stepped[:, :-m] += (1 - q_m) * held[:, m:]
        mass[these] = stepped


def _boundaries(
    mass: np.ndarray, left_up: np.ndarray, left_down: np.ndarray, centre: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """At a look, each row's boundaries u above 0 and l below it: the least extreme whose chance
    of being reached on the paths not stopped before (`mass`) is within what the side has left
    (`left_up`, `left_down`); u is the width of `mass` and l is -1 where none is. Returns (u, l,
    P(S >= u), P(S <= l)), the chances 0 where there is no boundary."""
    rows, width = mass.shape
    upper = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1]  # P(S >= s), not stopped before
    lower = np.cumsum(mass, axis=1)  # P(S <= s)
    ok_up = upper <= left_up[:, None] + 1e-15
    ok_up[:, : centre + 1] = False  # a boundary above 0
    ok_down = lower <= left_down[:, None] + 1e-15
    ok_down[:, centre:] = False
    has_up, has_down = ok_up.any(axis=1), ok_down.any(axis=1)
    u = np.where(has_up, np.argmax(ok_up, axis=1), width)  # the least extreme allowed
    l_ = np.where(has_down, width - 1 - np.argmax(ok_down[:, ::-1], axis=1), -1)
    reached_up = np.where(has_up, upper[np.arange(rows), np.minimum(u, width - 1)], 0.0)
    reached_down = np.where(has_down, lower[np.arange(rows), np.maximum(l_, 0)], 0.0)
    return u, l_, reached_up, reached_down


#: the shares of B's wins among discordant pairs the fixed-budget interval is evaluated at
_Q_GRID = np.linspace(0.0, 1.0, 201)


def _kept_shares(kept: np.ndarray, decision: Decision) -> tuple[float, float]:
    """The least and greatest share q of `_Q_GRID` the test keeps at its stopping look, on the
    side of 1/2 its decision says. The test is discrete, so which q it rejects is not
    monotone: a q just past 1/2 can be kept where 1/2 is rejected (at alpha 0.2 with a look
    per pair, 2 wins of 9 discordant pairs). Such an island beyond a decision is dropped, so
    the interval agrees with the test (tests/test_sequential.py, a property test)."""
    if decision != "undecided":
        side = _Q_GRID < 0.5 if decision == "worse" else _Q_GRID > 0.5
        if not (kept & side).any():
            kept = side & (np.abs(_Q_GRID - 0.5) == np.abs(_Q_GRID - 0.5)[side].min())  # the q next to 1/2
        kept = kept & side
    return (float(_Q_GRID[kept][0]), float(_Q_GRID[kept][-1])) if kept.any() else (0.5, 0.5)


def fixed_budget_test(
    a: Sequence[int | bool], b: Sequence[int | bool], budget: int, alpha: float = 0.05, block: int = 10
) -> SequentialResult:
    """The fixed-budget design: looks every `block` pairs up to `budget`, an exact
    group-sequential McNemar test (`_group_sequential` at q = 1/2) deciding better or worse;
    no equivalence. The interval is the repeated confidence interval of the same test: every
    share q of B's wins that its boundaries at the stopping look do not reject, as p_B - p_A
    = psi (2q - 1) with psi, the chance of a discordant pair, at its 95% Clopper-Pearson
    bounds. It excludes 0 exactly when the test decides (q = 1/2 is rejected)."""
    _check(alpha, 0.0, block)
    if len(a) != len(b):
        raise ConfigError(f"A and B must be paired episode by episode, but A has {len(a)} outcomes and B {len(b)}")
    if budget < 1:
        raise ConfigError(f"the budget must be at least 1 pair, got {budget}")
    xa, xb = _outcomes(a, "A")[:budget], _outcomes(b, "B")[:budget]
    disc, wins = (xa != xb)[None], (xb & ~xa)[None]
    stop = _group_sequential_stop(disc, wins, alpha, block, budget)
    if stop is None:
        return SequentialResult("undecided", 0, 0, 0, 1.0, 1.0, (-1.0, 1.0), None, alpha)
    n_pairs, decision, shares = stop
    d, x = int(disc[0, :n_pairs].sum()), int(wins[0, :n_pairs].sum())
    return SequentialResult(
        decision=decision, n_pairs=n_pairs, n_discordant=d, b_wins=x, e_value=math.nan, p_value=math.nan,
        interval=_difference(shares, clopper_pearson(d, n_pairs, 0.05)),
        stopped_at=None if decision == "undecided" else n_pairs, alpha=alpha,
    )


def _group_sequential_stop(
    steps: np.ndarray, wins: np.ndarray, alpha: float, block: int, budget: int
) -> tuple[int, Decision, tuple[float, float]] | None:
    """Where the exact group-sequential test of q = 1/2 (`_group_sequential`, one row) stops:
    the steps it used, its decision, and the least and greatest share q its boundaries keep at
    that look (the repeated confidence interval over `_Q_GRID`, `_kept_shares`); None when
    there is no look."""
    up, down, ends = _group_sequential(steps, wins, np.array([0.5]), alpha, block, budget)
    if not ends:
        return None
    decided = up[0] | down[0]
    k = int(np.argmax(decided)) if decided.any() else len(ends) - 1
    used = ends[k]
    decision: Decision = "better" if up[0, k] else "worse" if down[0, k] else "undecided"
    rows = len(_Q_GRID)
    grid_up, grid_down, _ = _group_sequential(
        np.repeat(steps[:, :used], rows, axis=0), np.repeat(wins[:, :used], rows, axis=0), _Q_GRID, alpha, block,
        budget,
    )
    return used, decision, _kept_shares(~(grid_up[:, k] | grid_down[:, k]), decision)


def _difference(shares: tuple[float, float], psi: tuple[float, float]) -> tuple[float, float]:
    """B - A = psi (2q - 1) over q's interval, each end at the end of psi's interval that widens it."""
    (q_lo, q_hi), (psi_lo, psi_hi) = shares, psi
    return (psi_lo if q_lo > 0.5 else psi_hi) * (2 * q_lo - 1), (psi_lo if q_hi < 0.5 else psi_hi) * (2 * q_hi - 1)


def _check(alpha: float, margin: float, block: int) -> None:
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 <= margin < 1:
        raise ConfigError(f"margin must be in [0, 1) (a difference of success rates), got {margin}")
    if block < 1:
        raise ConfigError(f"block must be at least 1 pair, got {block}")


def _outcomes(values: Sequence[int | bool], name: str) -> np.ndarray:
    array = np.asarray(values).reshape(-1)
    if not np.isin(array, (0, 1)).all():  # before any cast, which would turn 0.5 into 0
        odd = [v for v in array.tolist() if v not in (0, 1)]
        raise ConfigError(f"outcomes of {name} must be 0/1 or booleans, got {odd[:3]}")
    return array.astype(bool)


def sequential_test(
    a: Sequence[int | bool], b: Sequence[int | bool], alpha: float = 0.05, margin: float = 0.05, block: int = 10
) -> SequentialResult:
    """Look at pairs block, 2 * block, ... of (a_i, b_i) and stop at the first decision."""
    _check(alpha, margin, block)
    if len(a) != len(b):
        raise ConfigError(f"A and B must be paired episode by episode, but A has {len(a)} outcomes and B {len(b)}")
    runs = _run(_outcomes(a, "A")[None], _outcomes(b, "B")[None], alpha, margin, block)
    return _result(runs, int(runs.looks[0]) * block, alpha)


def _result(runs: _Runs, n_pairs: int, alpha: float) -> SequentialResult:
    """The first row of `runs` as a result, `n_pairs` the pairs it used."""
    decision = _DECISIONS[int(runs.decision[0])]
    return SequentialResult(
        decision=decision,
        n_pairs=n_pairs,
        n_discordant=int(runs.discordant[0]),
        b_wins=int(runs.b_wins[0]),
        e_value=float(np.exp(runs.log_e[0])),
        p_value=float(min(1.0, np.exp(-runs.max_log_e[0]))),
        interval=(float(runs.lo[0]), float(runs.hi[0])),
        stopped_at=None if decision == "undecided" else n_pairs,
        alpha=alpha,
    )


def sequential_tasks(
    pairs_by_task: Mapping[str, tuple[Sequence[int | bool], Sequence[int | bool]]],
    alpha: float = 0.05,
    margin: float = 0.05,
    block: int = 10,
    design: Design = "anytime",
) -> TaskComparison:
    """Each task at alpha / T, and all tasks pooled per episode index at alpha (a look every
    `block` indices). design "fixed": the fixed-budget test, each task's budget the pairs it
    has, the pooled one's every index."""

    def test(a: Sequence[int | bool], b: Sequence[int | bool], level: float, looks: int) -> SequentialResult:
        if design == "fixed":
            return fixed_budget_test(a, b, len(a), level, looks)
        return sequential_test(a, b, level, margin, looks)

    _check(alpha, margin, block)
    if not pairs_by_task:
        raise ConfigError("no tasks to compare")
    names = sorted(pairs_by_task)
    tasks: dict[str, SequentialResult] = {}
    for name in names:
        a, b = pairs_by_task[name]
        if len(a) != len(b):
            raise ConfigError(f"task {name!r}: A has {len(a)} outcomes and B {len(b)}; pair them episode by episode")
        tasks[name] = test(a, b, alpha / len(names), block)
    by_index = _by_index([pairs_by_task[name] for name in names])
    pooled = _pooled_fixed(by_index, alpha, block) if design == "fixed" else _pooled(by_index, alpha, margin, block)
    return TaskComparison(tasks, pooled)


@dataclass(frozen=True)
class _ByIndex:
    """The tasks' pairs by episode index (the seed they share): rows are tasks."""

    a: np.ndarray  # (tasks, longest), False past a task's end
    b: np.ndarray
    present: np.ndarray  # whether the task has a pair at that index

    @property
    def mean_d(self) -> np.ndarray:
        """Each index's mean over its tasks of b - a, in [-1, 1]."""
        d = (self.b.astype(int) - self.a.astype(int)).sum(axis=0)
        return d / np.maximum(self.present.sum(axis=0), 1)


def _by_index(pairs: Sequence[tuple[Sequence[int | bool], Sequence[int | bool]]]) -> _ByIndex:
    longest = max(len(a) for a, _ in pairs)
    shape = (len(pairs), longest)
    xa, xb, present = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for t, (a, b) in enumerate(pairs):
        xa[t, : len(a)], xb[t, : len(b)], present[t, : len(a)] = _outcomes(a, "A"), _outcomes(b, "B"), True
    return _ByIndex(xa, xb, present)


def _pooled(x: _ByIndex, alpha: float, margin: float, block: int) -> SequentialResult:
    """The betting test on the indices' mean differences: independent across indices,
    bounded, whatever ties the tasks of one index."""
    runs = _run_d(x.mean_d[None], (x.a != x.b).sum(axis=0)[None], (x.b & ~x.a).sum(axis=0)[None], alpha, margin, block)
    used = int(runs.looks[0]) * block
    return _result(runs, int(x.present[:, :used].sum()), alpha)


def _pooled_fixed(x: _ByIndex, alpha: float, block: int) -> SequentialResult:
    """The fixed design pooled: the exact group-sequential test of the walk of index sums
    S_i = sum over tasks of b - a, conditional on their sizes |S_i| (each step's sign a fair
    coin when A and B are exchangeable at each index), budget every index. The interval is
    the repeated confidence interval of q, the chance a nonzero S_i is positive, as the mean
    difference psi (2q - 1) with psi, the mean |S_i| / tasks, at Hoeffding 97.5% bounds."""
    s_i = (x.b.astype(int) - x.a.astype(int)).sum(axis=0)
    stop = _group_sequential_stop(np.abs(s_i)[None], (s_i > 0)[None], alpha, block, s_i.shape[0])
    if stop is None:
        return SequentialResult("undecided", 0, 0, 0, 1.0, 1.0, (-1.0, 1.0), None, alpha)
    used, decision, shares = stop
    psi = float(np.mean(np.abs(s_i[:used]) / np.maximum(x.present[:, :used].sum(axis=0), 1)))
    slack = math.sqrt(math.log(40) / (2 * used))
    pairs = int(x.present[:, :used].sum())
    return SequentialResult(
        decision=decision, n_pairs=pairs, n_discordant=int((x.a != x.b)[:, :used].sum()),
        b_wins=int((x.b & ~x.a)[:, :used].sum()), e_value=math.nan, p_value=math.nan,
        interval=_difference(shares, (max(0.0, psi - slack), min(1.0, psi + slack))),
        stopped_at=None if decision == "undecided" else pairs, alpha=alpha,
    )


def _decision_shares(
    a: np.ndarray, b: np.ndarray, design: Design, alpha: float, margin: float, block: int
) -> tuple[list[float], np.ndarray]:
    """The shares of the simulated comparisons (rows of `a` and `b`) left undecided and decided
    better, worse and equivalent, in that order, and the pairs each used; the fixed design's
    budget is all of a row's pairs."""
    if design == "fixed":
        n_sims, n_max = a.shape
        up, down, ends = _group_sequential(a != b, b & ~a, np.full(n_sims, 0.5), alpha, block, n_max)
        decided = up | down
        at = np.where(decided.any(axis=1), decided.argmax(axis=1), len(ends) - 1)
        rows = np.arange(n_sims)
        code = np.where(up[rows, at], 1, np.where(down[rows, at], 2, 0))
        share = [float(np.mean(code == k)) for k in range(4)]
        pairs = np.array(ends)[at]
    else:
        runs = _run(a, b, alpha, margin, block)
        share = [float(np.mean(runs.decision == k)) for k in range(4)]
        pairs = runs.looks * block
    return share, pairs


@dataclass(frozen=True)
class Simulation:
    """How the sequential test fared on simulated pairs, and fixed-n McNemar for scale."""

    p_a: float
    p_b: float
    rho: float
    n_max: int
    n_sims: int
    better: float  # share of comparisons decided "better"
    worse: float
    equivalent: float
    undecided: float
    mean_pairs: float  # pairs used, the whole n_max (in blocks) when undecided
    median_pairs: float
    fixed_power: float  # exact McNemar at n_max pairs, two-sided alpha
    fixed_n: int | None  # about the fewest pairs for exact McNemar to reach `power`; None if p_a == p_b

    @property
    def rejection_rate(self) -> float:
        """Share decided better or worse: the type-I error when p_a == p_b."""
        return self.better + self.worse

    @property
    def power(self) -> float | None:
        """Share decided in the true direction; None when the rates are equal."""
        if self.p_a == self.p_b:
            return None
        return self.better if self.p_b > self.p_a else self.worse


def discordance(p_a: float, p_b: float, rho: float) -> tuple[float, float]:
    """P(only A succeeds), P(only B succeeds) for the pairs `simulate` draws."""
    return (
        rho * max(0.0, p_a - p_b) + (1 - rho) * p_a * (1 - p_b),
        rho * max(0.0, p_b - p_a) + (1 - rho) * p_b * (1 - p_a),
    )


def fixed_n_for_power(p_only_a: float, p_only_b: float, alpha: float, power: float, limit: int = 20_000) -> int | None:
    """About the fewest pairs at which exact McNemar reaches `power` (None past `limit`).

    Exact power saws up and down with n; this walks from Connor's normal estimate down
    while the power holds, then up until it is reached (as `stats.episodes_needed_paired`
    does), so a lone sawtooth peak further below is not searched for.
    """
    psi, delta = p_only_a + p_only_b, abs(p_only_b - p_only_a)
    if delta == 0 or power <= 0:
        return None
    from scipy.stats import norm  # heavy: scipy.stats (~0.6 s to import)

    z_a, z_b = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(min(power, 1 - 1e-9)))
    n = max(1, math.ceil((z_a * math.sqrt(psi) + z_b * math.sqrt(max(0.0, psi - delta**2))) ** 2 / delta**2))
    while n > 1 and mcnemar_power(n - 1, p_only_a, p_only_b, alpha) >= power:
        n -= 1
    while mcnemar_power(n, p_only_a, p_only_b, alpha) < power:
        n += 1
        if n > limit:
            return None
    return n


def simulate(
    p_a: float,
    p_b: float,
    n_max: int,
    n_sims: int,
    alpha: float = 0.05,
    margin: float = 0.05,
    block: int = 10,
    rng: np.random.Generator | int | None = None,
    rho: float = 0.0,
    design: Design = "anytime",
) -> Simulation:
    """Run `sequential_test` (design "fixed": `fixed_budget_test`, n_max the budget) on n_sims
    simulated comparisons of n_max pairs each.

    With chance rho a pair shares one uniform draw (a = u < p_a, b = u < p_b: the most
    agreement the two rates allow), else the two are drawn independently.
    """
    _check(alpha, margin, block)
    if not (0 <= p_a <= 1 and 0 <= p_b <= 1 and 0 <= rho <= 1):
        raise ConfigError(f"p_a, p_b and rho must be in [0, 1], got {p_a}, {p_b}, {rho}")
    rng = np.random.default_rng(rng)
    u = rng.random((n_sims, n_max))
    v = np.where(rng.random((n_sims, n_max)) < rho, u, rng.random((n_sims, n_max)))
    share, pairs = _decision_shares(u < p_a, v < p_b, design, alpha, margin, block)
    only_a, only_b = discordance(p_a, p_b, rho)
    sim = Simulation(
        p_a, p_b, rho, n_max, n_sims, better=share[1], worse=share[2], equivalent=share[3], undecided=share[0],
        mean_pairs=float(pairs.mean()), median_pairs=float(np.median(pairs)),
        fixed_power=mcnemar_power(n_max, only_a, only_b, alpha) if only_a + only_b > 0 else 0.0, fixed_n=None,
    )  # fmt: skip
    if sim.power is None:
        return sim
    # a simulated power of 1 means "at least about 1 - 1 / n_sims"; asking McNemar for
    # exactly 1 would ask for a sample size that rounding alone decides
    target = min(sim.power, 1 - 0.5 / n_sims)
    return replace(sim, fixed_n=fixed_n_for_power(only_a, only_b, alpha, target))
