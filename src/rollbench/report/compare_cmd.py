"""`rollbench compare A B`: the comparison as a plain-text table, an optional page, an exit code."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from rollbench import stats
from rollbench.errors import ConfigError, did_you_mean
from rollbench.report import plots
from rollbench.report.compare import Comparison, Rate, Row, compare_runs
from rollbench.report.html import esc, page, table
from rollbench.report.runs import LoadedRun, command_line, load_run
from rollbench.results.store import write_text_atomic
from rollbench.writable import output_file

COMPARE_HELP = """usage: rollbench compare A B [--html=OUT] [--fail-if-worse] [--alpha=0.05] [--seed_a=S] [--seed_b=S]
                         [--sequential [--margin=0.05] [--block=10] [--design=anytime|fixed]]

Is B better than A, on which tasks, and can the data tell? A and B are output directories
of `rollbench eval` or `lerobot-eval`, or their eval_info.json files. For every task both
ran, and for all of them pooled: each success rate with its 95% Wilson interval (a task an
adaptive run stopped: the run's own rate and exact interval), B - A with a 1 - alpha interval
that agrees with its test: exact McNemar with its exact conditional interval when both ran
the same units (task, seed), else Boschloo beside Newcombe's interval; Holm-corrected across
tasks. Pooled over tasks, the seed is the independent unit (every task's episode i ran with
seed + i): an exact sign-flip test of each seed's B - A summed over the tasks, or a t test
with a variance clustered on the seed (adaptive runs: on the mean of the tasks' rule-aware
rates, whose overall is each run's eval_info.json's). The verdict calls a difference only
where the test supports it, and says how many episodes per task would decide the rest.
Warns when the runs differ in package versions, benchmark settings, seeds, episode
counts or step limits. Two sweeps (--eval.perturb) are also compared condition by
condition (pairs: condition, task, seed; all tasks pooled; Holm across conditions).

  --html=OUT         also write the comparison as a self-contained page
  --fail-if-worse    exit 1 when B is significantly worse than A, overall, on any task, or
                     under any condition two sweeps share (after Holm): a regression gate
                     for CI (--fail_if_worse works too)
  --alpha=A          significance level (default 0.05)
  --seed_a=S, --seed_b=S
                     for a run that records no seeds (lerobot-eval): the --seed it ran with;
                     episode i of every task then had seed S + i, so its episodes can be
                     paired with the other run's
  --sequential       also test sequentially, as if the pairs (same task, same seed) had been
                     looked at every --block pairs: an anytime-valid test that stops at the
                     first look where B is better, worse, or equivalent within --margin;
                     says where each task would have stopped (docs/compare.md)
  --margin=M         --sequential: equivalence margin of B - A, as a fraction (default 0.05)
  --block=K          --sequential: pairs between two looks (default 10)
  --design=D         --sequential: anytime (default: stop at any look, equivalence too, no
                     budget needed) or fixed (the pairs the runs have are the budget: an
                     exact group-sequential McNemar test with the fixed-n test's power,
                     better or worse only)

exit codes: 0 compared, 1 B is worse (with --fail-if-worse), 2 bad arguments"""

HEADER = ("task", "A", "B", "B - A, points [95% CI]", "test", "p", "p Holm", "verdict", "n for 80% power")


def _header(cmp: Comparison) -> tuple[str, ...]:
    """HEADER with the level of the intervals of B - A (1 - alpha: they agree with the tests)."""
    return (*HEADER[:3], f"B - A, points [{cmp.level} CI]", *HEADER[4:])


def _rate(r: Rate) -> str:
    lo, hi = r.ci
    return f"{r.k}/{r.n} {r.pct:.0f}% [{lo:.0f}, {hi:.0f}]"


def _cells(r: Row, overall: bool = False) -> tuple[str, ...]:
    diff = f"{r.diff:+.1f} [{r.ci[0]:+.1f}, {r.ci[1]:+.1f}]"
    by_seed = " by seed" if r.test.endswith("by seed") else ""
    test = f"McNemar ({r.paired.n} pairs){by_seed}" if r.paired and "McNemar" in r.test else r.test
    needed = "-" if r.needed is None else f"{r.needed}{' per task' if overall else ''}"
    return (r.name, _rate(r.a), _rate(r.b), diff, test, stats.fmt_p(r.p), "-" if overall else stats.fmt_p(r.p_adj),
            r.verdict, needed)


def text(cmp: Comparison) -> str:
    rows = [_header(cmp), *(_cells(r) for r in cmp.tasks)]
    if len(cmp.tasks) > 1:
        rows.append(_cells(cmp.overall, overall=True))
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [f"A: {cmp.a.path.parent}  ({cmp.a.describe()}, {cmp.a.producer})",
             f"B: {cmp.b.path.parent}  ({cmp.b.describe()}, {cmp.b.producer})", ""]
    for j, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if j == 0 or (j == len(rows) - 2 and len(cmp.tasks) > 1):
            lines.append("-" * sum(w + 2 for w in widths))
    lines += condition_lines(cmp)
    lines += ["", *cmp.verdicts()]
    lines += per_seed_lines(cmp.a, cmp.b)
    for title, items in (("warnings", cmp.warnings), ("notes", cmp.notes)):
        if items:
            lines += ["", f"{title}:", *(f"  - {w}" for w in items)]
    return "\n".join(lines)


def _condition_cells(r: Row) -> tuple[str, ...]:
    cells = list(_cells(r, overall=True))
    cells[6] = stats.fmt_p(r.p_adj)
    return tuple(cells)


def condition_lines(cmp: Comparison) -> list[str]:
    """Two sweeps: one line per common condition (all tasks pooled; the control's is the
    overall line above), Holm across the conditions."""
    if not cmp.conditions:
        return []
    rows = [("condition", *_header(cmp)[1:]), *(_condition_cells(r) for r in cmp.conditions)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["", f"per condition (--eval.perturb; all tasks pooled, pairs: condition, task, episode; "
                 f"p Holm across the {len(cmp.conditions)} conditions):"]
    for j, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if j == 0:
            lines.append("-" * sum(w + 2 for w in widths))
    return lines


def per_seed_lines(a: LoadedRun, b: LoadedRun) -> list[str]:
    """Runs with --seeds: each run's overall success per seed and their spread, beside what
    episode noise alone gives (the tests above pool every seed's episodes, paired by seed)."""
    lines = []
    for side, run in (("A", a), ("B", b)):
        per_seed, across = run.info.get("per_seed"), run.info.get("across_seeds")
        if not isinstance(per_seed, list) or not isinstance(across, dict):
            continue
        rates = ", ".join(f"{x['seed']}: {'-' if x['pc_success'] is None else format(x['pc_success'], '.1f')}%" for x in per_seed)
        std, noise = across.get("pc_success_std"), across.get("pc_success_std_from_noise")
        spread = "" if std is None else f"; spread sd {std:.1f}" + ("" if noise is None else f" (episode noise alone: {noise:.1f})")
        lines.append(f"{side} per seed: {rates}{spread}")
    return ["", *lines] if lines else []


def _run_block(side: str, run: LoadedRun) -> Iterator[str]:
    yield f"<h3>{side}: {esc(run.describe())}</h3><p class=\"muted\">{esc(run.path)} · {esc(run.producer)}</p>"
    cmd = command_line(run.info)
    if cmd:
        yield f"<pre>{esc(cmd[0])}</pre>"


def html_page(cmp: Comparison) -> str:
    verdict_class = {"better": "ok", "worse": "bad"}

    def marked(r: Row, cells: tuple[str, ...]) -> list[str]:
        """The row's cells, escaped, its verdict coloured."""
        c = [esc(x) for x in cells]
        c[7] = f'<span class="{verdict_class.get(r.verdict, "muted")}">{c[7]}</span>'
        return c

    body = [f"<h1>B: {esc(cmp.b.describe())} against A: {esc(cmp.a.describe())}</h1>"]
    body += [f'<p class="verdict">{esc(v)}</p>' for v in cmp.verdicts()]
    body += [f'<p class="warn">{esc(w)}</p>' for w in cmp.warnings]
    body += [f'<p class="muted">{esc(n)}</p>' for n in cmp.notes]
    body.append("<h2>B - A per task</h2>")
    body.append(plots.differences([plots.Difference(r.name, r.diff, r.ci[0], r.ci[1], r.verdict) for r in cmp.tasks]))
    rows = [*cmp.tasks, cmp.overall] if len(cmp.tasks) > 1 else cmp.tasks
    body.append(table(_header(cmp), [marked(r, _cells(r, overall=r is cmp.overall)) for r in rows], raw=True))
    if cmp.conditions:
        body.append("<h2>B - A per condition</h2>")
        body.append(f'<p class="muted">--eval.perturb: each condition\'s episodes of every task, paired with the same '
                    f"condition's in the other run; p Holm across the {len(cmp.conditions)} conditions.</p>")
        body.append(plots.differences([plots.Difference(r.name, r.diff, r.ci[0], r.ci[1], r.verdict) for r in cmp.conditions]))
        body.append(table(("condition", *_header(cmp)[1:]), [marked(r, _condition_cells(r)) for r in cmp.conditions], raw=True))
    body.append("<h2>Runs</h2>")
    body += [*_run_block("A", cmp.a), *_run_block("B", cmp.b)]
    return page(f"rollbench compare: B {cmp.b.describe()} against A {cmp.a.describe()}", body)


def _bool(flag: str) -> Callable[[str], bool]:
    def parse(value: str) -> bool:
        v = value.strip().lower()
        if v in ("true", "1", "yes"):
            return True
        if v in ("false", "0", "no"):
            return False
        raise ConfigError(f"--{flag}={value!r} is not allowed; it must be true or false")

    return parse


def _fraction(flag: str, meaning: str) -> Callable[[str], float]:
    """A parser of a number strictly between 0 and 1 for --`flag`; `meaning` says what it is."""

    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = -1.0
        if not 0 < x < 1:
            raise ConfigError(f"--{flag}={value!r} is not allowed; it must be a number between 0 and 1{meaning}")
        return x

    return parse


def _seed(flag: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"--{flag}={value!r} is not allowed; it must be a whole number (the --seed that run used)") from None

    return parse


def _design(value: str) -> str:
    if value not in ("anytime", "fixed"):
        raise ConfigError(f"--design={value!r} is not allowed; it must be anytime (stop at any look, equivalence too) "
                          f"or fixed (the runs' pairs are the budget: a group-sequential McNemar test)")
    return value


def _block(value: str) -> int:
    try:
        block = int(value)
    except ValueError:
        block = 0
    if block < 1:
        raise ConfigError(f"--block={value!r} is not allowed; it must be a whole number >= 1 (pairs between two looks)")
    return block


PARSERS: dict[str, Callable[[str], Any]] = {
    "html": functools.partial(output_file, "--html"), "fail-if-worse": _bool("fail-if-worse"), "fail_if_worse": _bool("fail_if_worse"),
    "alpha": _fraction("alpha", ", e.g. 0.05"), "seed_a": _seed("seed_a"), "seed_b": _seed("seed_b"),
    "sequential": _bool("sequential"), "block": _block, "design": _design,
    "margin": _fraction("margin", " (a difference of success rates, e.g. 0.05 = 5 points)"),
}


def compare_main(positional: list[str], flags: dict[str, Any]) -> int:
    """`rollbench compare A B [flags]`: prints the comparison; 1 if --fail-if-worse and B is worse."""
    opts: dict[str, Any] = {}
    for key, value in flags.items():
        if key not in PARSERS:
            hint = did_you_mean(key, PARSERS, "--{}".format)
            raise ConfigError(f"unknown flag --{key} for rollbench compare.{hint} Flags: --html, --fail-if-worse, --alpha, "
                              f"--seed_a, --seed_b, --sequential, --margin, --block, --design")
        opts[key.replace("-", "_")] = PARSERS[key](str(value))
    if len(positional) != 2:
        raise ConfigError(f"rollbench compare takes two runs, A and B (got {len(positional)}); usage: rollbench compare A B")
    a = load_run(positional[0], "rollbench compare A", opts.get("seed_a"))
    b = load_run(positional[1], "rollbench compare B", opts.get("seed_b"))
    try:
        cmp = compare_runs(a, b, opts.get("alpha", 0.05))
    except ValueError:
        raise ConfigError(
            f"rollbench compare: A={positional[0]!r} and B={positional[1]!r} share no task with episodes "
            f"(A: {', '.join(t.name for t in a.tasks.values()) or 'none'}; B: {', '.join(t.name for t in b.tasks.values()) or 'none'})"
        ) from None
    if not opts.get("sequential") and ("margin" in opts or "block" in opts or "design" in opts):
        raise ConfigError("--margin, --block and --design belong to a sequential comparison; add --sequential")
    if opts.get("design") == "fixed" and "margin" in opts:
        raise ConfigError("--margin is the anytime design's equivalence margin; --design=fixed decides better or worse only")
    seq = None
    if opts.get("sequential"):
        # lazy: --sequential only; every command's --help imports this module (~15 ms saved)
        from rollbench.report.sequential_cmd import sequential_compare

        seq = sequential_compare(
            a, b, opts.get("alpha", 0.05), opts.get("margin", 0.05), opts.get("block", 10), opts.get("design", "anytime")
        )
    print(text(cmp))
    if seq is not None:
        print("\n" + seq.text())
    if "html" in opts:
        write_text_atomic(opts["html"], html_page(cmp))
        print(f"\ncomparison page: {opts['html']}")
    return 1 if opts.get("fail_if_worse") and cmp.b_worse else 0
