"""Is run B better than run A, on which tasks, and can the data tell?

    A, B (eval_info.json) ─▶ common tasks ─▶ per task: rates, B-A with its interval, exact test
                                          ─▶ Holm across tasks ─▶ verdicts, episodes needed, warnings

A task is compared paired when both runs ran the same units (task, seed): then only the
units whose outcome differs count (exact McNemar), which sees a difference with far fewer
episodes. Otherwise the two samples are independent (Boschloo). The verdict names a
difference only where the test, after Holm's correction, supports it; where it does not,
it says how many episodes per task would (power 80% at the observed rates).

Two sweeps (--eval.perturb) are compared as above on their controls, and then condition by
condition (pairs: condition, task, episode), all tasks pooled, Holm across the conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rollbench.report import conditions, stats
from rollbench.report.runs import Episode, LoadedRun, TaskKey
from rollbench.results.summary import Z95, wilson

POWER = 0.8


@dataclass(frozen=True)
class Rate:
    k: int
    n: int

    @property
    def pct(self) -> float:
        return 100.0 * self.k / self.n

    @property
    def ci(self) -> tuple[float, float]:
        lo, hi = wilson(self.k, self.n) or (0.0, 1.0)
        return 100 * lo, 100 * hi


@dataclass(frozen=True)
class MeanRate(Rate):
    """The mean of tasks' rates (each task weighs the same), with the pooled counts beside it."""

    mean: float = 0.0  # percent
    se: float = 0.0  # its standard error, percent

    @property
    def pct(self) -> float:
        return self.mean

    @property
    def ci(self) -> tuple[float, float]:
        return max(0.0, self.mean - Z95 * self.se), min(100.0, self.mean + Z95 * self.se)


@dataclass(frozen=True)
class Row:
    """One task (or overall): both rates, B - A, the test and what it lets us say."""

    name: str
    a: Rate
    b: Rate
    paired: stats.Paired | None  # None: independent samples
    ci: tuple[float, float]  # of B - A, percentage points
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

    def verdicts(self) -> list[str]:
        overall = _overall_sentence(self.overall, len(self.tasks))
        out = [overall] if len(self.tasks) == 1 else [overall, _task_sentence(self.tasks, self.alpha)]
        return out + ([_condition_sentence(self.conditions, self.alpha)] if self.conditions else [])


def _pair(ea: Sequence[Episode], eb: Sequence[Episode]) -> stats.Paired | None:
    """The paired table when both runs ran exactly the same seeds of this task, else None."""
    sa = {e.seed: e.success for e in ea}
    sb = {e.seed: e.success for e in eb}
    if None in sa or None in sb or len(sa) != len(ea) or len(sb) != len(eb) or sa.keys() != sb.keys() or not sa:
        return None
    cells = [0, 0, 0, 0]
    for seed, won_a in sa.items():
        cells[(0 if won_a else 2) + (0 if sb[seed] else 1)] += 1
    both, only_a, only_b, neither = cells
    return stats.Paired(both, only_a, only_b, neither)


def _test(a: Rate, b: Rate, paired: stats.Paired | None) -> tuple[tuple[float, float], str, float]:
    if paired is not None:
        lo, hi = stats.newcombe_paired(paired)
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


def _compare(a: LoadedRun, b: LoadedRun, alpha: float) -> Comparison:
    keys: list[TaskKey] = [k for k in a.tasks if k in b.tasks and a.tasks[k].n and b.tasks[k].n]
    if not keys:
        raise ValueError("no task with episodes in both runs")
    drafts = []
    for key in keys:
        ta, tb = a.tasks[key], b.tasks[key]
        ra, rb = Rate(ta.k, ta.n), Rate(tb.k, tb.n)
        paired = _pair(ta.episodes, tb.episodes)
        drafts.append((ta.name, ra, rb, paired, *_test(ra, rb, paired)))
    adjusted = stats.holm([d[6] for d in drafts])
    rows = []
    for (name, ra, rb, paired, ci, test, p), p_adj in zip(drafts, adjusted, strict=True):
        # Holm's strictest step is alpha / m: a task sized for it is decided whatever the others do
        needed = None if p_adj < alpha else _needed(ra, rb, paired, alpha / len(drafts), 1)
        rows.append(Row(name, ra, rb, paired, ci, test, p, p_adj, needed, alpha))
    # tasks of different lengths (adaptive runs): pooling would weigh the long ones more
    unequal = len({r.a.n for r in rows} | {r.b.n for r in rows}) > 1
    cmp = Comparison(a, b, rows, _mean_of_tasks(rows, alpha) if unequal else _pooled(rows, alpha), alpha)
    if unequal:
        cmp.notes.append(
            "overall: the mean of the tasks' rates (each task weighs the same), since the tasks ran different "
            "numbers of episodes; its test is a z-test on the mean of the per-task differences"
        )
    _check(cmp, keys)
    return cmp


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
            row = _compare(pa[cid], pb[cid], cmp.alpha).overall
        except ValueError:
            cmp.notes.append(f"condition {cid}: no task with episodes in both runs, left out")
            continue
        drafts.append(replace(row, name=cid))
    adjusted = stats.holm([r.p for r in drafts])
    cmp.conditions = [replace(r, p_adj=p) for r, p in zip(drafts, adjusted, strict=True)]


def _pooled(rows: list[Row], alpha: float) -> Row:
    """One rate per run over all tasks, as eval_info's `overall`. Unpaired, a binomial test on
    pooled counts is conservative when tasks' rates differ (a sum of binomials varies less than
    one binomial of the same mean), so it never overclaims."""
    ra = Rate(sum(r.a.k for r in rows), sum(r.a.n for r in rows))
    rb = Rate(sum(r.b.k for r in rows), sum(r.b.n for r in rows))
    pool: stats.Paired | None = stats.Paired(0, 0, 0, 0)
    for r in rows:
        # McNemar over all units only when every task is paired; one unpaired task unpairs the pool
        pool = None if pool is None or r.paired is None else pool + r.paired
    ci, test, p = _test(ra, rb, pool)
    needed = None if p < alpha else _needed(ra, rb, pool, alpha, len(rows))
    return Row("overall", ra, rb, pool, ci, test, p, p, needed, alpha)


def _mean_of_tasks(rows: list[Row], alpha: float) -> Row:
    """B - A as the mean over tasks of each task's difference, with a normal interval and test
    from the per-task variances (paired: of the paired differences; else of the two rates)."""
    from scipy.stats import norm  # heavy: scipy.stats (~0.6 s to import)

    t = len(rows)
    var_a = var_b = var_d = 0.0
    for r in rows:
        pa, pb = r.a.k / r.a.n, r.b.k / r.b.n
        va, vb = pa * (1 - pa) / r.a.n, pb * (1 - pb) / r.b.n
        var_a, var_b = var_a + va, var_b + vb
        if r.paired is not None:
            only_a, only_b = r.paired.only_a / r.paired.n, r.paired.only_b / r.paired.n
            var_d += (only_a + only_b - (only_b - only_a) ** 2) / r.paired.n
        else:
            var_d += va + vb
    mean_a = 100 * sum(r.a.k / r.a.n for r in rows) / t
    mean_b = 100 * sum(r.b.k / r.b.n for r in rows) / t
    ra = MeanRate(sum(r.a.k for r in rows), sum(r.a.n for r in rows), mean_a, 100 * var_a**0.5 / t)
    rb = MeanRate(sum(r.b.k for r in rows), sum(r.b.n for r in rows), mean_b, 100 * var_b**0.5 / t)
    diff, se = mean_b - mean_a, 100 * var_d**0.5 / t
    ci = (max(-100.0, diff - Z95 * se), min(100.0, diff + Z95 * se))
    p = 1.0 if se == 0 else float(2 * norm.sf(abs(diff) / se))
    if se == 0 and diff != 0:
        p = 0.0
    return Row("overall", ra, rb, None, ci, "z, mean of task rates", p, p, None, alpha)


def _points(x: float) -> str:
    return f"{x:+.1f}"


def _overall_sentence(r: Row, tasks: int) -> str:
    rates = f"A {r.a.pct:.1f}%, B {r.b.pct:.1f}%"
    p = stats.fmt_p(r.p)
    detail = (f"B - A {_points(r.diff)} points, 95% CI {_points(r.ci[0])} to {_points(r.ci[1])}; "
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
    for side, run, other in (("A", a, b), ("B", b, a)):
        only = [run.tasks[k].name for k in run.tasks if k not in other.tasks]
        if only:
            warn.append(f"tasks only in {side}, left out: {', '.join(only)}")
        failed = sum(t.n_failed for t in run.tasks.values())
        if run.info.get("status") == "partial" or failed:
            warn.append(f"{side} is partial ({failed} failed units, {len(run.info.get('missing_units') or [])} missing): they are left out")
        if run.versions is None or run.config is None:
            warn.append(f"{side} ({run.producer}) records no package versions or config: cannot check the benchmark "
                        "version or the episode length against the other run")
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
    longest = [max((e.n_steps for e in ep if not e.success and e.n_steps), default=None)
               for ep in ([e for k in keys for e in run.tasks[k].episodes] for run in (a, b))]
    if None not in longest and longest[0] != longest[1]:
        warn.append(f"failed episodes last up to {longest[0]} steps in A and {longest[1]} in B: the step limits may differ")
    counts = [(r.name, r.a.n, r.b.n) for r in cmp.tasks if r.a.n != r.b.n]
    if counts:
        name, na, nb = counts[0]
        warn.append(f"episode counts differ on {len(counts)} of {len(cmp.tasks)} tasks (e.g. {name}: A {na}, B {nb})")
    unpaired = [(k, a.tasks[k].seeds, b.tasks[k].seeds) for k, r in zip(keys, cmp.tasks, strict=True) if r.paired is None]
    mismatched = [(k, sa, sb) for k, sa, sb in unpaired if sa is not None and sb is not None]
    if mismatched:
        k, sa, sb = mismatched[0]
        warn.append(f"seeds differ on {len(mismatched)} of {len(keys)} tasks (e.g. {a.tasks[k].name}: A {_span(sa)}, "
                    f"B {_span(sb)}): those are compared unpaired (Boschloo), which needs more episodes to see a difference")
    for side, run in (("A", a), ("B", b)):
        if any(run.tasks[k].seeds is None for k in keys):
            cmp.notes.append(f"{side} records no seeds ({run.producer}): its tasks are compared unpaired. If it ran with "
                             f"the same --seed as the other run, pass --seed_{side.lower()}=SEED (episode i had seed SEED + i) to pair them.")
