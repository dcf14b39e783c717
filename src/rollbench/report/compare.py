"""Is run B better than run A, on which tasks, and can the data tell?

    A, B (eval_info.json) ─▶ common tasks ─▶ per task: rates, B-A with its interval, a test
                                          ─▶ Holm across tasks ─▶ verdicts, episodes needed, warnings

A task is compared paired when both runs ran the same units (task, seed): then only the
units whose outcome differs count (exact McNemar, with the exact conditional interval that
agrees with it), which sees a difference with far fewer episodes. Otherwise the two samples
are independent (Boschloo). The verdict names a difference only where the test, after Holm's
correction, supports it; where it does not, it says how many episodes per task would (power
80% at the observed rates).

Across tasks the episode, not the task, is the independent unit: every task's episode i runs
with seed + i, so outcomes at one seed are correlated across tasks. The pooled test sums each
seed's paired differences over the tasks and tests those sums (an exact sign-flip test: exact
McNemar when there is one task); its interval, and every test of adaptive runs, take a
variance clustered on the seed (Liang & Zeger 1986; Cameron & Miller 2015).

A task an adaptive run stopped (--eval.ci_width, --eval.versus) is read as that run's
eval_info.json holds it: the rule's rate and interval, and a variance under the rule at a
shrunk rate (stopping/estimates.py), never the plug-in k/n(1-k/n)/n that is 0 at 0/n and n/n.

Two sweeps (--eval.perturb) are compared as above on their controls, and then condition by
condition (pairs: condition, task, episode), all tasks pooled, Holm across the conditions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rollbench import stats
from rollbench.report import conditions
from rollbench.report.runs import Episode, LoadedRun, TaskKey
from rollbench.stats import Z95, wilson
from rollbench.stopping import estimates as stopped

POWER = 0.8


@dataclass(frozen=True)
class Rate:
    """A run's success on a task (or overall): k of n, and where the run's own estimate is
    not k/n with its Wilson interval (an adaptive run's stopped task, its overall), that."""

    k: int
    n: int
    own: float | None = None  # percent
    own_ci: tuple[float, float] | None = None  # percent

    @property
    def pct(self) -> float:
        return self.own if self.own is not None else 100.0 * self.k / self.n

    @property
    def ci(self) -> tuple[float, float]:
        if self.own_ci is not None:
            return self.own_ci
        lo, hi = wilson(self.k, self.n) or (0.0, 1.0)
        return 100 * lo, 100 * hi


@dataclass(frozen=True)
class Row:
    """One task (or overall): both rates, B - A, the test and what it lets us say."""

    name: str
    a: Rate
    b: Rate
    paired: stats.Paired | None  # None: independent samples
    ci: tuple[float, float]  # of B - A, percentage points, at 1 - alpha (agrees with the test's p)
    test: str
    p: float
    p_adj: float  # Holm-adjusted across tasks (overall: p itself)
    needed: int | None  # episodes per task for 80% power; None when decided or rates are equal
    alpha: float

    @property
    def diff(self) -> float:
        return self.b.pct - self.a.pct

    @property
    def verdict(self) -> str:
        if self.p_adj < self.alpha:
            return "better" if self.diff > 0 else "worse"
        return "no difference" if self.a.pct == self.b.pct else "not significant"


@dataclass
class Comparison:
    a: LoadedRun
    b: LoadedRun
    tasks: list[Row]
    overall: Row
    alpha: float
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: two sweeps: each common condition (the control first), all tasks pooled, Holm across them
    conditions: list[Row] = field(default_factory=list)

    @property
    def b_worse(self) -> bool:
        """B significantly worse overall, on any task, or under any condition both sweeps ran
        (each family after Holm): what --fail-if-worse gates."""
        return any(r.verdict == "worse" for r in [self.overall, *self.tasks, *self.conditions])

    @property
    def level(self) -> str:
        """The intervals' of B - A: 1 - alpha, so that they exclude 0 where the test decides."""
        return f"{1 - self.alpha:.0%}"

    def verdicts(self) -> list[str]:
        overall = _overall_sentence(self.overall, len(self.tasks), self.level)
        out = [overall] if len(self.tasks) == 1 else [overall, _task_sentence(self.tasks, self.alpha)]
        return out + ([_condition_sentence(self.conditions, self.alpha)] if self.conditions else [])


# -- one run's episodes of one task, as a variance sees them ---------------------------


@dataclass(frozen=True)
class _Cell:
    clusters: tuple[Hashable, ...]  # each episode's seed; ("A", i) where the run records none
    successes: tuple[bool, ...]
    rate: float  # the run's estimate: k/n, or the rule's unbiased rate
    variance: float  # of that estimate, at a shrunk rate (under the run's stop rule): never 0
    own: bool  # a rule-aware estimate from the run's eval_info.json

    @property
    def plug_in(self) -> float:
        p = sum(self.successes) / len(self.successes)
        return p * (1 - p) / len(self.successes)


def _shrunk(k: int, n: int) -> float:
    s = (k + 1) / (n + 2)  # a task at 0/10 has no spread at its own rate, but its rate is not known to be 0
    return s * (1 - s) / n


def _rule_variance(run: LoadedRun, episodes: Sequence[Episode], stop: dict[str, Any]) -> float | None:
    """The variance, under --eval.ci_width, of the rule's unbiased rate of a task it stopped:
    what stopping/estimates.py gave eval_info.json's overall (None: no such rule or not
    reproducible here, e.g. --seeds' round robin)."""
    rule = run.info.get("adaptive")
    n_stop = stop.get("n_episodes")
    if not isinstance(rule, dict) or not rule.get("ci_width") or rule.get("seeds") or not isinstance(n_stop, int):
        return None
    try:
        block, most = int(rule["block"]), int(rule["max_episodes"])
        checkpoints = sorted({*range(block, most, block), most})
        seen = {e.index: e.success for e in episodes}
        reached = [cp for cp in checkpoints if cp <= n_stop]
        data_at = [sum(i in seen for i in range(cp)) for cp in reached]
        if not reached or data_at[-1] == 0:
            return None
        s = stopped.sampling(float(rule["ci_width"]), checkpoints, data_at)
        k = sum(seen[i] for i in seen if i < n_stop)
        return stopped.variance(s, (k + 1) / (data_at[-1] + 2))
    except (KeyError, TypeError, ValueError):
        return None


def _entries(run: LoadedRun) -> dict[TaskKey, dict[str, Any]]:
    out = {}
    for t in run.info.get("per_task") or []:
        try:
            out[(str(t["task_group"]), int(t["task_id"]))] = t
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _cell(side: str, run: LoadedRun, key: TaskKey, entry: dict[str, Any] | None) -> _Cell:
    """`entry`: the task's per_task entry in the run's eval_info.json, None to ignore it."""
    task = run.tasks[key]
    k, n = task.k, task.n
    clusters = tuple(e.seed if e.seed is not None else (side, e.index) for e in task.episodes)
    successes = tuple(e.success for e in task.episodes)
    stop = (entry or {}).get("stop")
    if not isinstance(stop, dict) or task.ci95 is None:
        return _Cell(clusters, successes, k / n, _shrunk(k, n), False)
    unbiased = stop.get("pc_success_unbiased")
    rate = float(unbiased) / 100 if isinstance(unbiased, (int, float)) else k / n
    variance = _rule_variance(run, task.episodes, stop) if isinstance(unbiased, (int, float)) else None
    return _Cell(clusters, successes, rate, _shrunk(k, n) if variance is None else max(variance, 1e-12), True)


def _clustered(terms: Sequence[tuple[float, _Cell]], paired: Sequence[tuple[float, stats.Paired | None]] = ()
               ) -> tuple[float, float, int]:
    """(sum of weight x rate, its variance clustered on the seed, the number of seeds).
    `terms`: (weight, cell), A's then B's of each task in `paired`'s order, when it is given.

    Each episode adds weight * (y - its cell's k/n) / n to its seed's total; the variance is
    the sum of the squared totals (with the G / (G - 1) small-sample factor), so outcomes at
    one seed may be correlated across tasks and across the runs. That sum's within-task part
    is the plug-in one, 0 at 0/n, n/n or no discordant pair; it is raised to the task's own:
    a paired task's (`paired`: weight, table; both cells plain) at a shrunk share of
    discordant pairs, else each cell's (the rule's variance, or the binomial one, at a shrunk
    rate)."""
    totals: dict[Hashable, float] = defaultdict(float)
    extra = 0.0
    tables = dict(enumerate(paired))
    for j, (w, cell) in enumerate(terms):
        n, p = len(cell.successes), sum(cell.successes) / len(cell.successes)
        for c, y in zip(cell.clusters, cell.successes, strict=True):
            totals[c] += w * (y - p) / n
        if tables.get(j // 2, (0.0, None))[1] is None:
            extra += w * w * max(0.0, cell.variance - cell.plug_in)
    for w, t in paired:
        if t is not None:
            extra += w * w * max(0.0, _paired_shrunk(t) - _paired_plug_in(t))
    g = len(totals)
    var = (sum(x * x for x in totals.values()) + extra) * (g / (g - 1) if g > 1 else 1.0)
    return sum(w * cell.rate for w, cell in terms), var, g


def _paired_plug_in(t: stats.Paired) -> float:
    psi, delta = (t.only_a + t.only_b) / t.n, (t.only_b - t.only_a) / t.n
    return (psi - delta * delta) / t.n


def _paired_shrunk(t: stats.Paired) -> float:
    """The variance of a paired task's B - A at a shrunk share of discordant pairs: identical
    outcomes (none discordant) do not make it 0. Always above 0: |delta| < psi < 1."""
    psi, delta = (t.only_a + t.only_b + 1) / (t.n + 2), (t.only_b - t.only_a) / (t.n + 2)
    return (psi - delta * delta) / t.n


def _t_test(diff: float, var: float, clusters: int, alpha: float) -> tuple[tuple[float, float], float]:
    """(the 1 - alpha interval of B - A in points, the two-sided p) of a t test on `clusters` - 1
    degrees of freedom: the interval excludes 0 exactly when p < alpha."""
    from scipy.stats import t as student  # heavy: scipy.stats (~0.6 s to import)

    df = max(1, clusters - 1)
    se = math.sqrt(var)
    half = float(student.ppf(1 - alpha / 2, df)) * se
    if se == 0:  # cannot happen with the shrunk variances; kept total
        return (100 * diff, 100 * diff), 1.0 if diff == 0 else 0.0
    p = float(2 * student.sf(abs(diff) / se, df))
    return (max(-100.0, 100 * (diff - half)), min(100.0, 100 * (diff + half))), p


def _pair(ea: Sequence[Episode], eb: Sequence[Episode]) -> stats.Paired | None:
    """The paired table when both runs ran exactly the same seeds of this task, else None."""
    sa = {e.seed: e.success for e in ea}
    sb = {e.seed: e.success for e in eb}
    if None in sa or None in sb or len(sa) != len(ea) or len(sb) != len(eb) or sa.keys() != sb.keys() or not sa:
        return None
    return stats.Paired.of(sa, sb)


def _test(a: Rate, b: Rate, paired: stats.Paired | None, alpha: float) -> tuple[tuple[float, float], str, float]:
    if paired is not None:
        lo, hi = stats.mcnemar_interval(paired, alpha)
        return (100 * lo, 100 * hi), "exact McNemar", stats.mcnemar_exact(paired)
    lo, hi = stats.newcombe_unpaired(a.k, a.n, b.k, b.n)
    test, p = stats.unpaired_test(a.k, a.n, b.k, b.n)
    return (100 * lo, 100 * hi), test, p


def _needed(a: Rate, b: Rate, paired: stats.Paired | None, alpha: float, tasks: int) -> int | None:
    """Episodes per task for 80% power, or None; `tasks` > 1 spreads a pooled total over them."""
    if paired is not None:
        total = stats.episodes_needed_paired(paired, alpha, POWER)
    else:
        total = stats.episodes_needed_unpaired(a.k / a.n, b.k / b.n, alpha, POWER)
    return None if total is None else -(-total // tasks)


def compare_runs(a: LoadedRun, b: LoadedRun, alpha: float = 0.05) -> Comparison:
    """Compare every task both runs evaluated, and all of them pooled; two sweeps also
    condition by condition."""
    cmp = _compare(a, b, alpha)
    _compare_conditions(cmp)
    return cmp


@dataclass(frozen=True)
class _Task:
    """A common task as the overall row needs it: both cells and the paired table."""

    a: _Cell
    b: _Cell
    paired: stats.Paired | None


#: a task's row before Holm: name, A's and B's rates, the paired table, B - A's interval, test, p
_Draft = tuple[str, Rate, Rate, stats.Paired | None, tuple[float, float], str, float]


def _compare(a: LoadedRun, b: LoadedRun, alpha: float, rule_aware: bool = True) -> Comparison:
    """`rule_aware`: read a stopped task's rate, interval and variance from eval_info.json
    (False for a sweep's other conditions, whose entries there are the control's)."""
    keys: list[TaskKey] = [k for k in a.tasks if k in b.tasks and a.tasks[k].n and b.tasks[k].n]
    if not keys:
        raise ValueError("no task with episodes in both runs")
    drafts: list[_Draft] = []
    tasks: list[_Task] = []
    entries = [_entries(run) if rule_aware else {} for run in (a, b)]
    for key in keys:
        draft, task = _draft(a, b, key, entries, alpha)
        drafts.append(draft)
        tasks.append(task)
    rows = _holm_rows(drafts, alpha)
    # tasks of different lengths (adaptive runs): pooling would weigh the long ones more
    unequal = len({r.a.n for r in rows} | {r.b.n for r in rows}) > 1
    adaptive = any(t.a.own or t.b.own for t in tasks)
    if len(rows) == 1:
        overall = replace(rows[0], name="overall")
    elif unequal or adaptive:
        overall = _mean_of_tasks(rows, tasks, (a, b) if rule_aware else None, keys, alpha)
    else:
        overall = _pooled(rows, tasks, alpha)
    cmp = Comparison(a, b, rows, overall, alpha)
    if len(rows) > 1 and (unequal or adaptive):
        cmp.notes.append(
            "overall: the mean of the tasks' rates (each task weighs the same), since the tasks ran different "
            "numbers of episodes or were stopped by a rule (an adaptive run's overall is its eval_info.json's); "
            "its test is a t test on the mean of the per-task differences, its variance clustered on the seed"
        )
    _check(cmp, keys)
    return cmp


def _draft(a: LoadedRun, b: LoadedRun, key: TaskKey, entries: list[dict[TaskKey, dict[str, Any]]],
           alpha: float) -> tuple[_Draft, _Task]:
    """One common task's row before Holm, and the task as the overall row needs it. `entries`:
    A's and B's per_task entries of eval_info.json (empty: ignored)."""
    ta, tb = a.tasks[key], b.tasks[key]
    ca, cb = _cell("A", a, key, entries[0].get(key)), _cell("B", b, key, entries[1].get(key))
    ra, rb = (Rate(t.k, t.n, 100 * c.rate, _pct(t.ci95)) if c.own else Rate(t.k, t.n)
              for t, c in ((ta, ca), (tb, cb)))
    paired = _pair(ta.episodes, tb.episodes)
    task = _Task(ca, cb, paired)
    if ca.own or cb.own:  # stopped by a rule: the rule's rates and variances, clustered on the seed
        diff, var, g = _clustered([(-1.0, ca), (1.0, cb)], [(1.0, _plain_pair(paired, ca, cb))])
        ci, p = _t_test(diff, var, g, alpha)
        return (ta.name, ra, rb, paired, ci, "t, rule-aware rates", p), task
    return (ta.name, ra, rb, paired, *_test(ra, rb, paired, alpha)), task


def _holm_rows(drafts: list[_Draft], alpha: float) -> list[Row]:
    """The tasks' rows, their p Holm-adjusted across the tasks, with the episodes an undecided
    task would need."""
    adjusted = stats.holm([d[6] for d in drafts])
    rows = []
    for (name, ra, rb, paired, ci, test, p), p_adj in zip(drafts, adjusted, strict=True):
        # Holm's strictest step is alpha / m: a task sized for it is decided whatever the others do
        needed = None if p_adj < alpha else _needed(ra, rb, paired, alpha / len(drafts), 1)
        rows.append(Row(name, ra, rb, paired, ci, test, p, p_adj, needed, alpha))
    return rows


def _pct(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if ci is None else (100 * ci[0], 100 * ci[1])


def _plain_pair(paired: stats.Paired | None, a: _Cell, b: _Cell) -> stats.Paired | None:
    """The paired table whose variance `_clustered` takes for the task's, when neither cell
    has a rule's own variance (then each cell's is taken)."""
    return None if a.own or b.own else paired


def _compare_conditions(cmp: Comparison) -> None:
    """Two sweeps: each condition both ran, its episodes paired with the same condition's in
    the other run; a sweep against a plain run: the control only, said in a note."""
    ids = {side: conditions.condition_ids(run) for side, run in (("A", cmp.a), ("B", cmp.b))}
    if ids["A"] is None and ids["B"] is None:
        return
    if ids["A"] is None or ids["B"] is None:
        side, other = ("A", "B") if ids["A"] is not None else ("B", "A")
        cmp.notes.append(f"{side} is a sweep (--eval.perturb, {len(ids[side] or []) - 1} conditions) and {other} is not: "
                         f"only the control is compared")
        return
    ida, idb = ids["A"] or [], ids["B"] or []
    for side, mine, theirs in (("A", ida, idb), ("B", idb, ida)):
        only = [c for c in mine if c not in theirs]
        if only:
            cmp.warnings.append(f"conditions only in {side}, left out: {', '.join(only)}")
    common = [c for c in ida if c in idb]
    parts = {side: conditions.split(run) for side, run in (("A", cmp.a), ("B", cmp.b))}
    missing = [side for side, p in parts.items() if p is None]
    if missing:
        cmp.notes.append(f"{' and '.join(missing)} has no episode log beside its eval_info.json: its conditions' episodes "
                         f"are unknown, so only the control is compared")
        return
    pa, pb = parts["A"] or {}, parts["B"] or {}
    drafts = [replace(cmp.overall, name="control")]
    for cid in common[1:] if common[:1] == [""] else common:
        try:
            row = _compare(pa[cid], pb[cid], cmp.alpha, rule_aware=False).overall
        except ValueError:
            cmp.notes.append(f"condition {cid}: no task with episodes in both runs, left out")
            continue
        drafts.append(replace(row, name=cid))
    adjusted = stats.holm([r.p for r in drafts])
    cmp.conditions = [replace(r, p_adj=p) for r, p in zip(drafts, adjusted, strict=True)]


def _pooled(rows: list[Row], tasks: list[_Task], alpha: float) -> Row:
    """One rate per run over all tasks, as eval_info's `overall` (every task ran as many
    episodes). Paired on every task: the exact sign-flip test of each seed's B - A summed
    over the tasks (the seed, not the task, is independent); else a t test. The interval:
    pooled B - A with its variance clustered on the seed."""
    ra = Rate(sum(r.a.k for r in rows), sum(r.a.n for r in rows))
    rb = Rate(sum(r.b.k for r in rows), sum(r.b.n for r in rows))
    pool: stats.Paired | None = stats.Paired(0, 0, 0, 0)
    for r in rows:
        # one unpaired task unpairs the pool
        pool = None if pool is None or r.paired is None else pool + r.paired
    terms: list[tuple[float, _Cell]] = []
    for r, x in zip(rows, tasks, strict=True):
        terms += [(-r.a.n / ra.n, x.a), (r.b.n / rb.n, x.b)]
    diff, var, g = _clustered(terms, [(r.a.n / ra.n, _plain_pair(x.paired, x.a, x.b)) for r, x in zip(rows, tasks, strict=True)])
    ci, p = _t_test(diff, var, g, alpha)
    test = "t, clustered by seed"
    if pool is not None:
        by_seed: dict[Hashable, int] = defaultdict(int)
        for t in tasks:
            for c, ya, yb in zip(t.a.clusters, t.a.successes, t.b.successes, strict=True):
                by_seed[c] += int(yb) - int(ya)
        p, test = stats.sign_flip_p(list(by_seed.values())), "exact McNemar by seed"
    needed = None if p < alpha else _needed(ra, rb, pool, alpha, len(rows))
    return Row("overall", ra, rb, pool, ci, test, p, p, needed, alpha)


def _run_overall(run: LoadedRun | None, keys: list[TaskKey], cells: list[_Cell], rate: Rate) -> tuple[Rate, float | None]:
    """One run's overall in the mean-of-tasks view, and the variance of its mean when it is
    the file's own: its eval_info.json's when the run's every task is compared and the file
    has a rule-aware overall (an adaptive run), else the mean of the cells' rates with a 95%
    interval clustered on the seed (and None)."""
    t = len(cells)
    mean, var, _ = _clustered([(1 / t, c) for c in cells])
    overall = (run.info.get("overall") if run is not None else None) or {}
    pc, ci, se = overall.get("pc_success"), overall.get("pc_success_ci95"), overall.get("pc_success_se")
    # the same mean as the file's (all its tasks, the same rates): its own interval beside it
    if (run is not None and "pc_success_of" in overall and set(keys) == set(run.tasks) and isinstance(pc, (int, float))
            and math.isclose(pc, 100 * mean, abs_tol=1e-6) and isinstance(ci, list) and len(ci) == 2):
        own_var = (se / 100) ** 2 if isinstance(se, (int, float)) else None
        return replace(rate, own=float(pc), own_ci=(float(ci[0]), float(ci[1]))), own_var
    sd = math.sqrt(var)
    return replace(rate, own=100 * mean, own_ci=(100 * max(0.0, mean - Z95 * sd), 100 * min(1.0, mean + Z95 * sd))), None


def _mean_of_tasks(rows: list[Row], tasks: list[_Task], runs: tuple[LoadedRun, LoadedRun] | None, keys: list[TaskKey],
                   alpha: float) -> Row:
    """B - A as the mean over tasks of each task's difference of rates (the rule's where a
    rule stopped it), with a t interval and test from a variance clustered on the seed whose
    within-task parts are the tasks' own (never the plug-in 0 at 0/n or n/n)."""
    t = len(rows)
    run_a, run_b = runs or (None, None)  # None: a sweep's condition, whose file's overall is the control's
    ra, var_a = _run_overall(run_a, keys, [x.a for x in tasks], Rate(sum(r.a.k for r in rows), sum(r.a.n for r in rows)))
    rb, var_b = _run_overall(run_b, keys, [x.b for x in tasks], Rate(sum(r.b.k for r in rows), sum(r.b.n for r in rows)))
    terms = [(s / t, cell) for x in tasks for s, cell in ((-1.0, x.a), (1.0, x.b))]
    diff, var, g = _clustered(terms, [(1 / t, _plain_pair(x.paired, x.a, x.b)) for x in tasks])
    if var_a is not None and var_b is not None and all(x.paired is None for x in tasks):
        # two adaptive runs on their own seeds: each file's variance of its mean (the tasks'
        # exact variances under the rule, their covariance clustered on the index and never
        # below 0) is wider than the plain clustered sum's, which gave 22 false decisions in
        # 300 pairs of runs (bench/pooled_cli.py; 16 with the files')
        var = max(var, var_a + var_b)
    ci, p = _t_test(diff, var, g, alpha)
    return Row("overall", ra, rb, None, ci, "t, mean of task rates", p, p, None, alpha)


def _points(x: float) -> str:
    return f"{x:+.1f}"


def _overall_sentence(r: Row, tasks: int, level: str = "95%") -> str:
    rates = f"A {r.a.pct:.1f}%, B {r.b.pct:.1f}%"
    p = stats.fmt_p(r.p)
    detail = (f"B - A {_points(r.diff)} points, {level} CI {_points(r.ci[0])} to {_points(r.ci[1])}; "
              f"{r.test} p {p[0] + ' ' + p[1:] if p.startswith('<') else '= ' + p}")
    if r.verdict in ("better", "worse"):
        return f"B is {r.verdict} than A overall: {rates} ({detail})."
    if r.verdict == "no difference":
        return (f"No difference observed overall: both succeed in {r.a.pct:.1f}% ({detail}). The data rule out "
                f"differences outside that interval, not a smaller one inside it: more episodes narrow it, and "
                f"`rollbench compare --sequential --margin=M` tests equivalence within M.")
    per_task = f" per task ({r.needed * tasks} in all)" if tasks > 1 and r.needed else ""
    more = ""
    if r.needed is not None:
        have = r.a.n // tasks
        more = (f" At these rates about {r.needed} episodes{per_task} would detect a difference of this size with "
                f"{POWER:.0%} power (now {have}{' per task' if tasks > 1 else ''}).")
    return (f"No significant difference overall: {rates} ({detail}). The data cannot tell whether B is "
            f"{'better' if r.diff > 0 else 'worse'}.{more}")


def _task_sentence(rows: Sequence[Row], alpha: float) -> str:
    m = len(rows)
    n_better = sum(r.verdict == "better" for r in rows)
    n_worse = sum(r.verdict == "worse" for r in rows)
    rest = m - n_better - n_worse
    head = f"Per task (Holm-corrected across {m} tasks, α = {alpha:g}): "
    if not n_better and not n_worse:
        text = f"{head}no significant difference on any of the {m} tasks."
    else:
        parts = [f"{kind} on {n}" for kind, n in (("better", n_better), ("worse", n_worse)) if n]
        parts[0] = parts[0] + f" of {m} tasks"
        if rest:
            parts.append(f"no significant difference on {rest}")
        text = head + "B is " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + "."
    undecided = [r.needed for r in rows if r.needed is not None]
    if undecided:
        span = str(min(undecided)) if min(undecided) == max(undecided) else f"{min(undecided)}–{max(undecided)}"
        text += (f" Deciding the {len(undecided)} undecided task{'s' * (len(undecided) != 1)} with a difference would "
                 f"take about {span} episodes per task ({POWER:.0%} power at the observed rates; now "
                 f"{max(r.a.n for r in rows)}).")
    return text


def _condition_sentence(rows: Sequence[Row], alpha: float) -> str:
    head = f"Per condition (all tasks pooled, Holm-corrected across {len(rows)} conditions, α = {alpha:g}): "
    named = {v: [r.name for r in rows if r.verdict == v] for v in ("better", "worse")}
    if not named["better"] and not named["worse"]:
        return f"{head}no significant difference under any condition."
    parts = [f"B is {v} under {', '.join(names)}" for v, names in named.items() if names]
    rest = len(rows) - len(named["better"]) - len(named["worse"])
    return head + "; ".join(parts) + (f"; no significant difference under the other {rest}." if rest else ".")


def _span(seeds: list[int] | None) -> str:
    if not seeds:
        return "none recorded"
    return f"{min(seeds)}..{max(seeds)}" if len(seeds) > 1 else str(seeds[0])


def _check(cmp: Comparison, keys: list[TaskKey]) -> None:
    """What makes A and B less comparable than they look: the warnings and notes."""
    a, b, warn = cmp.a, cmp.b, cmp.warnings
    _check_sides(cmp)
    _check_settings(cmp)
    longest = [max((e.n_steps for e in ep if not e.success and e.n_steps), default=None)
               for ep in ([e for k in keys for e in run.tasks[k].episodes] for run in (a, b))]
    if None not in longest and longest[0] != longest[1]:
        warn.append(f"failed episodes last up to {longest[0]} steps in A and {longest[1]} in B: the step limits may differ")
    counts = [(r.name, r.a.n, r.b.n) for r in cmp.tasks if r.a.n != r.b.n]
    if counts:
        name, na, nb = counts[0]
        warn.append(f"episode counts differ on {len(counts)} of {len(cmp.tasks)} tasks (e.g. {name}: A {na}, B {nb})")
    _check_seeds(cmp, keys)


def _check_sides(cmp: Comparison) -> None:
    """Warns, for each run, of its tasks the other lacks, of its failed or missing units, and of
    missing package versions or config."""
    for side, run, other in (("A", cmp.a, cmp.b), ("B", cmp.b, cmp.a)):
        only = [run.tasks[k].name for k in run.tasks if k not in other.tasks]
        if only:
            cmp.warnings.append(f"tasks only in {side}, left out: {', '.join(only)}")
        failed = sum(t.n_failed for t in run.tasks.values())
        if run.info.get("status") == "partial" or failed:
            cmp.warnings.append(f"{side} is partial ({failed} failed units, {len(run.info.get('missing_units') or [])} missing): they are left out")
        if run.versions is None or run.config is None:
            cmp.warnings.append(f"{side} ({run.producer}) records no package versions or config: cannot check the benchmark "
                                "version or the episode length against the other run")


def _check_settings(cmp: Comparison) -> None:
    """Warns when the runs' package versions or benchmark settings differ."""
    a, b, warn = cmp.a, cmp.b, cmp.warnings
    if a.versions and b.versions:
        diffs = [f"{k} {a.versions[k]} (A) vs {b.versions[k]} (B)" for k in sorted(a.versions.keys() & b.versions.keys())
                 if a.versions[k] != b.versions[k]]
        if diffs:
            warn.append("package versions differ: " + "; ".join(diffs))
    env_a, env_b = (a.config or {}).get("env"), (b.config or {}).get("env")
    if isinstance(env_a, dict) and isinstance(env_b, dict):
        diffs = [f"env.{k}: {env_a.get(k)!r} (A) vs {env_b.get(k)!r} (B)" for k in sorted(env_a.keys() | env_b.keys())
                 if k != "task" and env_a.get(k) != env_b.get(k)]
        if diffs:
            warn.append("benchmark settings differ (episode length, observations, ...): " + "; ".join(diffs))


def _check_seeds(cmp: Comparison, keys: list[TaskKey]) -> None:
    """Warns when tasks compared unpaired ran different seeds, and notes each run that records
    no seeds (its tasks are then compared unpaired)."""
    a, b = cmp.a, cmp.b
    # a task a rule stopped is tested on its rule-aware rates, whatever the seeds (shared ones: clustered)
    unpaired = [(k, a.tasks[k].seeds, b.tasks[k].seeds) for k, r in zip(keys, cmp.tasks, strict=True)
                if r.paired is None and not r.test.startswith("t,")]
    mismatched = [(k, sa, sb) for k, sa, sb in unpaired if sa is not None and sb is not None]
    if mismatched:
        k, sa, sb = mismatched[0]
        cmp.warnings.append(f"seeds differ on {len(mismatched)} of {len(keys)} tasks (e.g. {a.tasks[k].name}: A {_span(sa)}, "
                            f"B {_span(sb)}): those are compared unpaired (Boschloo), which needs more episodes to see a difference")
    for side, run in (("A", a), ("B", b)):
        if any(run.tasks[k].seeds is None for k in keys):
            cmp.notes.append(f"{side} records no seeds ({run.producer}): its tasks are compared unpaired. If it ran with "
                             f"the same --seed as the other run, pass --seed_{side.lower()}=SEED (episode i had seed SEED + i) to pair them.")
