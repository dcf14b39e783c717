"""`rollbench compare A B --sequential`: where an anytime-valid test would have stopped.

The episodes of A and B are paired by (task, seed) in A's episode order, up to the first
episode B lacks; each task's pairs go through `sequential.sequential_tasks` (each task at
alpha / T, all tasks pooled at alpha), looked at every `block` pairs. A task's verdict is
the one reached at its first deciding look, and the pairs it used are what a run stopped
there would have cost; a fixed-n comparison of the same runs uses every pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollbench.errors import ConfigError
from rollbench.report.runs import LoadedRun, TaskKey
from rollbench.stopping import sequential

HEADER = ("task", "pairs used", "A", "B", "B wins / discordant", "e-value", "B - A, points [anytime CS]", "decision")


@dataclass(frozen=True)
class SequentialComparison:
    names: dict[TaskKey, str]
    available: dict[TaskKey, int]  # pairs each task has
    result: sequential.TaskComparison
    outcomes: dict[TaskKey, tuple[list[bool], list[bool]]]
    alpha: float
    margin: float
    block: int
    design: sequential.Design = "anytime"

    def used(self, key: TaskKey) -> int:
        r = self.result.tasks[self.names[key]]
        return r.stopped_at if r.stopped_at is not None else self.available[key]

    def _row(self, name: str, r: sequential.SequentialResult, a: list[bool], b: list[bool], of: int) -> tuple[str, ...]:
        n = r.stopped_at if r.stopped_at is not None else of
        ka, kb = sum(a[:n]), sum(b[:n])
        lo, hi = r.interval
        return (name, f"{n} of {of}", f"{ka}/{n}", f"{kb}/{n}", f"{r.b_wins}/{r.n_discordant}", _e(r.e_value),
                f"{100 * (kb - ka) / max(n, 1):+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]", r.decision)

    def pooled_order(self) -> tuple[list[bool], list[bool]]:
        """The pairs in the order the pooled test takes them: episode 0 of every task (by
        name), then episode 1, ..."""
        by_name = {self.names[k]: v for k, v in self.outcomes.items()}
        names = sorted(by_name)
        longest = max(len(v[0]) for v in by_name.values())
        order = [(name, i) for i in range(longest) for name in names if i < len(by_name[name][0])]
        return [by_name[n][0][i] for n, i in order], [by_name[n][1][i] for n, i in order]

    def text(self) -> str:
        rows: list[tuple[str, ...]] = [HEADER]
        for key, name in self.names.items():
            a, b = self.outcomes[key]
            rows.append(self._row(name, self.result.tasks[name], a, b, self.available[key]))
        if len(self.names) > 1:
            pa, pb = self.pooled_order()
            rows.append(self._row("pooled", self.result.pooled, pa, pb, len(pa)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
        t = len(self.names)
        levels = f"each of {t} task{'s' * (t != 1)} at alpha/{t} = {self.alpha / t:.3g}, pooled at {self.alpha:g}"
        if self.design == "fixed":
            lines = [f"sequential comparison (fixed budget: the pairs each task has; an exact group-sequential McNemar "
                     f"test, O'Brien-Fleming spending, a look every {self.block} pairs; {levels}; interval: its repeated "
                     f"confidence interval; docs/compare.md)"]
            rows[0] = (*HEADER[:5], "e-value", "B - A, points [repeated CI]", "decision")
        else:
            lines = [f"sequential comparison (anytime-valid; a look every {self.block} pairs; {levels}; equivalent: the "
                     f"whole interval within +-{100 * self.margin:g} points; docs/compare.md)"]
        for j, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if j == 0 or (j == len(rows) - 2 and t > 1):
                lines.append("-" * sum(w + 2 for w in widths))
        used = sum(self.used(k) for k in self.names)
        total = sum(self.available.values())
        lines += ["", f"stopping each task at its decision uses {used} of {total} pairs per run "
                      f"({100 * (total - used) / max(total, 1):.0f}% fewer episodes than the fixed-n comparison above)"]
        undecided = [self.names[k] for k in self.names if self.result.tasks[self.names[k]].decision == "undecided"]
        if undecided:
            lines.append(f"undecided after all their pairs: {', '.join(undecided)} (more episodes would decide them)")
        return "\n".join(lines)


def paired_outcomes(a: LoadedRun, b: LoadedRun) -> dict[TaskKey, tuple[list[bool], list[bool]]]:
    """Per task both ran: (A's, B's) successes of the episodes of equal seeds, in A's episode
    order, up to the first of A's seeds that B did not run."""
    out = {}
    for key, ta in a.tasks.items():
        tb = b.tasks.get(key)
        if tb is None or not ta.n or not tb.n:
            continue
        if ta.seeds is None or tb.seeds is None:
            side = "A" if ta.seeds is None else "B"
            raise ConfigError(f"rollbench compare --sequential pairs episodes by seed, and {side}'s task {ta.name!r} "
                              f"records none; give the --seed it ran with as --seed_{side.lower()}=S")
        by_seed = {e.seed: e.success for e in tb.episodes}
        xa, xb = [], []
        for e in sorted(ta.episodes, key=lambda e: e.index):
            if e.seed not in by_seed:
                break
            xa.append(e.success)
            xb.append(by_seed[e.seed])
        if xa:
            out[key] = (xa, xb)
    return out


def _e(value: float) -> str:
    return "-" if value != value else f"{value:.3g}"  # NaN: the fixed-budget test has no e-value


def sequential_compare(
    a: LoadedRun, b: LoadedRun, alpha: float, margin: float, block: int, design: sequential.Design = "anytime"
) -> SequentialComparison:
    outcomes = paired_outcomes(a, b)
    if not outcomes:
        raise ConfigError("rollbench compare --sequential: A and B ran no episode of the same task with the same seed; "
                          "a sequential comparison needs paired episodes (both runs with the same --seed)")
    names = {key: a.tasks[key].name for key in outcomes}
    if len(set(names.values())) < len(names):
        names = {key: f"{key[0]}/{key[1]} {name}" for key, name in names.items()}
    result = sequential.sequential_tasks({names[k]: v for k, v in outcomes.items()}, alpha, margin, block, design)
    return SequentialComparison(
        names, {k: len(v[0]) for k, v in outcomes.items()}, result, outcomes, alpha, margin, block, design
    )
