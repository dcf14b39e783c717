"""Issue 47's figures end to end, from the CLI: real `rollbench eval` runs of one policy on the
fake benchmark (a noisy expert, `--policy.action_noise`, whose noise and targets come from
each episode's seed, so every task's episode i shares seed + i and tasks' outcomes at one index
correlate), each run with its own `--seed` (runs' seeds 1000 apart: no episode is shared).

fixed-n (`--eval.n_episodes=N`, `--runs` R runs): every pair of runs compared as `rollbench
compare A B` compares them (report/compare.py's `compare_runs`, checked on a few pairs against
the CLI's printed text, which must be identical); the false "better"/"worse" of the pooled
overall, of each task (Holm across the tasks) and of any task. Beside them, the same pairs: the
same test with each task's episodes its own clusters (tasks as independent), and the overall
test before issue 47 (Boschloo on the pooled counts, stats.unpaired_test). The rates' binomial
interval takes the R (R - 1) / 2 pairs as independent, which they are not (each run is in R - 1
of them): the jackknife over runs gives the Monte Carlo standard error.

adaptive (`--eval.ci_width=W --eval.n_episodes=MAX`, `--adaptive-runs` runs): the coverage of
each run's `overall` `pc_success_ci95` (eval_info.json) of the true overall rate, the mean of
the tasks' true rates, estimated by one fixed-n run of `--truth-episodes` per task (with its
standard error, clustered on the episode index, and the coverage at the truth +-2 se); beside
it the interval with the tasks taken as independent (stopping/estimates.py's `mean_of_rates`
without outcomes), and the bias of `overall`. Then compare's false better/worse over disjoint
pairs of adaptive runs (runs 0-1, 2-3, ...), independent, so their binomial interval holds, and
B - A over its standard error (compare's, read off its interval; and the two runs' overall se's
of eval_info.json): its root mean square over the pairs is 1 when the standard error is right.

    python bench/pooled_cli.py [--mode both|fixed|adaptive] [--runs 40] [--adaptive-runs 600] [--tasks 3]
                               [--episodes 20] [--ci-width 0.2] [--max-episodes 100] [--truth-episodes 20000]
                               [--noise 1.3] [--max-steps 16] [--jobs 1] [--cli-checks 3] [--keep DIR]

The fake benchmark has three tasks (near, mid, far): `--tasks T` takes the first T. At noise 1.3
and 16 steps their rates are about 0.86, 0.61 and 0.08. Runs go into a temporary folder, or into
`--keep DIR`, where a finished run (eval_info.json, status complete) is reused, so a rerun of
the analysis reruns no evaluation. One run takes about 0.7 s of CPU (fixed, 20 per task) or
0.9 s (adaptive) on a 2-core machine, the truth's 20000 per task about 60-80 s, the analysis
about 1 min: some 12 minutes of CPU at the defaults. 300 adaptive runs (150 pairs) are too few
to tell 0.05 from 0.1 false decisions: the first 150 pairs here gave 17, the next 150 gave 5.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.stats import t as student

from rollbench import stats
from rollbench.report.compare import Comparison, compare_runs
from rollbench.report.compare_cmd import text
from rollbench.report.runs import LoadedRun, load_run
from rollbench.stopping import estimates as stopped
from rollbench.stopping.adaptive import StopRule

FAKE_TASKS = ("near", "mid", "far")
DECIDED = ("better", "worse")
#: seeds: run r of a kind starts at its base + SPACING r (more than any run's episodes per task)
SPACING = 1000
FIXED_BASE, ADAPTIVE_BASE, TRUTH_BASE = 1_000_000, 2_000_000, 9_000_000


# -- evaluations -------------------------------------------------------------------------


def eval_command(args: argparse.Namespace, tasks: Sequence[str], seed: int, n: int, out: Path,
                 ci_width: float | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "rollbench", "eval", "--env.type=fake", f"--env.task={','.join(tasks)}",
           f"--env.max_steps={args.max_steps}", "--policy.type=expert", f"--policy.action_noise={args.noise}",
           f"--seed={seed}", f"--eval.n_episodes={n}", "--eval.report=false", "--eval.max_episodes_rendered=0",
           "--workers=1", f"--output_dir={out}"]
    return cmd + ([f"--eval.ci_width={ci_width}"] if ci_width is not None else [])


def finished(out: Path) -> bool:
    try:
        return json.loads((out / "eval_info.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def run_evals(commands: Sequence[tuple[list[str], Path]], jobs: int, what: str) -> None:
    """Run the commands whose output dir holds no finished run, `jobs` at a time."""
    todo = [(cmd, out) for cmd, out in commands if not finished(out)]
    t0 = time.time()

    def one(item: tuple[list[str], Path]) -> None:
        cmd, out = item
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0 or not finished(out):
            raise RuntimeError(f"rc {r.returncode}: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    print(f"{what}: {len(todo)} evaluations run in {time.time() - t0:.0f} s wall, "
          f"{len(commands) - len(todo)} reused", flush=True)


def cli_matches(a: Path, b: Path, cmp: Comparison) -> bool:
    """`python -m rollbench compare A B` prints exactly the text of `cmp`."""
    r = subprocess.run([sys.executable, "-m", "rollbench", "compare", str(a), str(b)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=600)
    same = r.returncode == 0 and r.stdout.rstrip("\n") == text(cmp)
    if not same:
        print(f"  CLI differs on {a.name} vs {b.name} (rc {r.returncode}):\n{r.stdout}\n{r.stderr}\n--- here:\n{text(cmp)}")
    return same


def tasks_apart(run: LoadedRun) -> LoadedRun:
    """The run with each task's seeds made its own (seed * tasks + task), so that no two tasks
    share a cluster: compare's test as if the tasks were independent."""
    m = len(run.tasks)
    tasks = {key: replace(t, episodes=tuple(replace(e, seed=None if e.seed is None else e.seed * m + j)
                                            for e in t.episodes))
             for j, (key, t) in enumerate(run.tasks.items())}
    return replace(run, tasks=tasks)


# -- tables ------------------------------------------------------------------------------


def cp(k: int, n: int) -> str:
    lo, hi = stats.clopper_pearson(k, n, 0.05)
    return f"[{lo:.4f}, {hi:.4f}]"


def jackknife_se(decided: np.ndarray) -> float:
    """Monte Carlo se of the rate over all pairs i < j (upper triangle of `decided`), by
    leaving out one run at a time (a U-statistic: pairs sharing a run are not independent)."""
    r = decided.shape[0]
    sym = decided | decided.T
    total, pairs_left = decided[np.triu_indices(r, 1)].sum(), (r - 1) * (r - 2) / 2
    loo = (total - sym.sum(axis=1)) / pairs_left
    return float(math.sqrt((r - 1) / r * ((loo - loo.mean()) ** 2).sum()))


def pair_rows(rows: Sequence[tuple[str, np.ndarray]]) -> None:
    n = rows[0][1].shape[0]
    pairs = n * (n - 1) // 2
    print(f"{'decision':<58} {'false b/w':>9} {'rate':>7} {'binomial 95% CI':>17} {'jackknife se':>12}")
    for name, m in rows:
        k = int(m[np.triu_indices(n, 1)].sum())
        print(f"{name:<58} {f'{k}/{pairs}':>9} {k / pairs:7.4f} {cp(k, pairs):>17} {jackknife_se(m):12.4f}")


def count_rows(rows: Sequence[tuple[str, int, int]]) -> None:
    print(f"{'decision':<58} {'false b/w':>9} {'rate':>7} {'binomial 95% CI':>17}")
    for name, k, n in rows:
        print(f"{name:<58} {f'{k}/{n}':>9} {k / n:7.4f} {cp(k, n):>17}")


# -- fixed-n -----------------------------------------------------------------------------


def fixed(args: argparse.Namespace, root: Path, tasks: Sequence[str]) -> None:
    sig = f"fixed_{'-'.join(tasks)}_noise{args.noise}_steps{args.max_steps}_n{args.episodes}"
    dirs = [root / sig / f"seed{FIXED_BASE + SPACING * r}" for r in range(args.runs)]
    run_evals([(eval_command(args, tasks, FIXED_BASE + SPACING * r, args.episodes, d), d)
               for r, d in enumerate(dirs)], args.jobs, f"fixed-n ({args.runs} runs)")
    t0 = time.time()
    runs = [load_run(str(d), "run") for d in dirs]
    apart = [tasks_apart(r) for r in runs]
    r_n, alpha = len(runs), args.alpha
    pooled, indep, old, any_task = (np.zeros((r_n, r_n), bool) for _ in range(4))
    per_task = np.zeros((len(tasks), r_n, r_n), bool)
    first_decided: tuple[int, int] | None = None
    checks = []
    for i, j in itertools.combinations(range(r_n), 2):
        cmp = compare_runs(runs[i], runs[j], alpha)
        pooled[i, j] = cmp.overall.verdict in DECIDED
        for t, row in enumerate(cmp.tasks):
            per_task[t, i, j] = row.verdict in DECIDED
        any_task[i, j] = per_task[:, i, j].any()
        indep[i, j] = compare_runs(apart[i], apart[j], alpha).overall.verdict in DECIDED
        a, b = cmp.overall.a, cmp.overall.b
        old[i, j] = stats.unpaired_test(a.k, a.n, b.k, b.n)[1] < alpha
        if len(checks) < args.cli_checks or (pooled[i, j] and first_decided is None):
            checks.append((dirs[i], dirs[j], cmp))
            first_decided = (i, j) if pooled[i, j] else first_decided
    same = sum(cli_matches(a, b, c) for a, b, c in checks)
    print(f"\nfixed-n: {r_n} runs of {len(tasks)} tasks ({', '.join(tasks)}) x {args.episodes} episodes, expert with "
          f"action_noise {args.noise}, max_steps {args.max_steps}; all {r_n * (r_n - 1) // 2} pairs compared "
          f"(alpha {alpha}); the same policy, so every better/worse is false")
    pair_rows([
        ("overall, pooled (compare: t clustered by seed)", pooled),
        ("overall, the same test with tasks as independent", indep),
        ("overall before issue 47 (Boschloo on pooled counts)", old),
        (f"any task (Holm across {len(tasks)})", any_task),
        *((f"task {name} (Holm-adjusted)", per_task[t]) for t, name in enumerate(tasks)),
    ])
    print(f"`rollbench compare A B` printed the same text as compare_runs here on {same} of {len(checks)} pairs "
          f"checked{' (one of them decided overall)' if first_decided else ''}; analysis {time.time() - t0:.0f} s")


# -- adaptive ----------------------------------------------------------------------------


def truth(args: argparse.Namespace, root: Path, tasks: Sequence[str]) -> tuple[float, float, list[float], np.ndarray]:
    """(the mean of the tasks' rates, its se clustered on the episode index, each task's rate,
    the tasks' outcome correlations at one index) from one fixed-n run."""
    n = args.truth_episodes
    out = root / f"truth_{'-'.join(tasks)}_noise{args.noise}_steps{args.max_steps}_n{n}" / f"seed{TRUTH_BASE}"
    run_evals([(eval_command(args, tasks, TRUTH_BASE, n, out), out)], 1, f"truth ({n} episodes per task)")
    run = load_run(str(out), "truth")
    y = np.zeros((len(run.tasks), n))
    for t, task in enumerate(run.tasks.values()):
        if task.n != n:
            raise SystemExit(f"truth run: task {task.name} has {task.n} episodes of {n}")
        for e in task.episodes:
            y[t, e.index] = e.success
    per_index = y.mean(axis=0)
    corr = np.corrcoef(y) if len(tasks) > 1 else np.ones((1, 1))
    return float(per_index.mean()), float(per_index.std(ddof=1) / math.sqrt(n)), list(y.mean(axis=1)), corr


def estimates(run: LoadedRun, rule: StopRule) -> tuple[list[stopped.TaskEstimate], list[list[bool | None]]]:
    """Each task's rule-aware estimate and its counted outcomes by index, rebuilt from the
    episodes as eval_info.py builds them."""
    ests, outcomes = [], []
    for entry in run.info["per_task"]:
        task = run.tasks[(str(entry["task_group"]), int(entry["task_id"]))]
        seen: dict[int, bool | None] = {e.index: e.success for e in task.episodes}
        stop = entry.get("stop") or {}
        cut = stop.get("n_episodes")
        est = None if cut is None else stopped.task_estimate(rule.ci_width, rule.checkpoints(), seen, cut)
        est = est or stopped.fixed_estimate(task.k, task.n)
        if est is None:
            raise SystemExit(f"{run.root}: task {task.name} has no episode")
        ests.append(est)
        outcomes.append([seen.get(i) for i in range(cut if cut is not None else max(seen) + 1)])
    return ests, outcomes


def adaptive(args: argparse.Namespace, root: Path, tasks: Sequence[str]) -> None:
    true_mean, true_se, true_rates, corr = truth(args, root, tasks)
    sig = (f"adaptive_{'-'.join(tasks)}_noise{args.noise}_steps{args.max_steps}_w{args.ci_width}"
           f"_n{args.max_episodes}")
    dirs = [root / sig / f"seed{ADAPTIVE_BASE + SPACING * r}" for r in range(args.adaptive_runs)]
    run_evals([(eval_command(args, tasks, ADAPTIVE_BASE + SPACING * r, args.max_episodes, d, args.ci_width), d)
               for r, d in enumerate(dirs)], args.jobs, f"adaptive ({args.adaptive_runs} runs)")
    t0 = time.time()
    runs = [load_run(str(d), "run") for d in dirs]
    rule = StopRule(args.ci_width, 10, args.max_episodes)

    def inside(ci: Sequence[float], p: float) -> bool:
        return ci[0] <= 100 * p <= ci[1]

    covered = {d: 0 for d in (-2, 0, 2)}
    covered_indep = rebuilt_off = 0
    points, widths, episodes = [], [], []
    for run in runs:
        overall = run.info["overall"]
        ci = overall["pc_success_ci95"]
        for d in covered:
            covered[d] += inside(ci, true_mean + d * true_se)
        ests, outcomes = estimates(run, rule)
        mean, _, ci_new = stopped.mean_of_rates(ests, outcomes)
        rebuilt_off += not (math.isclose(100 * mean, overall["pc_success"], abs_tol=1e-6)
                            and all(math.isclose(100 * x, y, abs_tol=1e-6) for x, y in zip(ci_new, ci, strict=True)))
        _, _, ci_old = stopped.mean_of_rates(ests)
        covered_indep += inside([100 * ci_old[0], 100 * ci_old[1]], true_mean)
        points.append(overall["pc_success"] / 100)
        widths.append((ci[1] - ci[0]) / 100)
        episodes.append(overall["n_episodes"])
    n = len(runs)
    print(f"\nadaptive: --eval.ci_width={args.ci_width} --eval.n_episodes={args.max_episodes}, {n} runs of "
          f"{len(tasks)} tasks; truth from {args.truth_episodes} episodes per task: "
          + ", ".join(f"{name} {p:.4f}" for name, p in zip(tasks, true_rates, strict=True))
          + f"; overall {true_mean:.4f} (se {true_se:.4f})")
    if len(tasks) > 1:
        pairs = [f"{tasks[s]}-{tasks[t]} {corr[s, t]:+.3f}" for s, t in itertools.combinations(range(len(tasks)), 2)]
        print(f"tasks' outcome correlation at one episode index (truth run): {', '.join(pairs)}")
    print(f"mean episodes per run {np.mean(episodes):.1f} (at most {len(tasks) * args.max_episodes}); overall's "
          f"mean {np.mean(points):.4f} (bias {np.mean(points) - true_mean:+.4f}, se {np.std(points, ddof=1) / math.sqrt(n):.4f}); "
          f"mean width of its interval {np.mean(widths):.4f}")
    print(f"{'overall 95% interval':<58} {'covered':>9} {'rate':>7} {'binomial 95% CI':>17}")
    for name, k in (("eval_info.json's (clustered on the episode index)", covered[0]),
                    (f"  the same, truth - 2 se ({true_mean - 2 * true_se:.4f})", covered[-2]),
                    (f"  the same, truth + 2 se ({true_mean + 2 * true_se:.4f})", covered[2]),
                    ("tasks as independent (mean_of_rates without outcomes)", covered_indep)):
        print(f"{name:<58} {f'{k}/{n}':>9} {k / n:7.4f} {cp(k, n):>17}")
    print(f"eval_info.json's overall rebuilt here from the episodes: {n - rebuilt_off} of {n} runs identical")

    pooled = any_task = 0
    per_task = [0] * len(tasks)
    z_cmp, z_info = [], []  # B - A over its se: compare's (from its interval), and eval_info.json's overalls
    checks = []
    decided_checked = False
    for i in range(0, n - 1, 2):
        cmp = compare_runs(runs[i], runs[i + 1], args.alpha)
        pooled += cmp.overall.verdict in DECIDED
        decided = [row.verdict in DECIDED for row in cmp.tasks]
        any_task += any(decided)
        per_task = [x + d for x, d in zip(per_task, decided, strict=True)]
        o = cmp.overall
        seeds = {e.seed for run in (runs[i], runs[i + 1]) for t in run.tasks.values() for e in t.episodes}
        z_cmp.append(o.diff / ((o.ci[1] - o.ci[0]) / (2 * student.ppf(1 - args.alpha / 2, len(seeds) - 1))))
        se_a, se_b = (run.info["overall"]["pc_success_se"] for run in (runs[i], runs[i + 1]))
        z_info.append(o.diff / math.hypot(se_a, se_b))
        if len(checks) < args.cli_checks or (cmp.overall.verdict in DECIDED and not decided_checked):
            checks.append((dirs[i], dirs[i + 1], cmp))
            decided_checked = decided_checked or cmp.overall.verdict in DECIDED
    same = sum(cli_matches(a, b, c) for a, b, c in checks)
    m = n // 2
    print(f"\ncompare of {m} disjoint pairs of adaptive runs (runs 0-1, 2-3, ...; alpha {args.alpha})")
    count_rows([("overall (compare: t on the mean of task rates)", pooled, m),
                (f"any task (Holm across {len(tasks)})", any_task, m),
                *((f"task {name} (Holm-adjusted)", k, m) for name, k in zip(tasks, per_task, strict=True))])
    for name, z in (("compare's", np.array(z_cmp)), ("the two eval_info.json overall se's", np.array(z_info))):
        rms = float(np.sqrt(np.mean(z * z)))
        print(f"overall B - A over {name} standard error: root mean square {rms:.3f} over the {m} pairs (1 when the "
              f"se is right; Monte Carlo se about {rms / math.sqrt(2 * m):.3f}), |z| > 1.96 in {(abs(z) > 1.96).sum()}")
    print(f"`rollbench compare A B` printed the same text as compare_runs here on {same} of {len(checks)} pairs "
          f"checked{' (one of them decided overall)' if decided_checked else ''}; analysis {time.time() - t0:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["both", "fixed", "adaptive"], default="both")
    ap.add_argument("--runs", type=int, default=40, help="fixed-n runs (every pair compared)")
    ap.add_argument("--adaptive-runs", type=int, default=600, help="adaptive runs (coverage; disjoint pairs compared)")
    ap.add_argument("--tasks", type=int, default=3, help=f"the first T of the fake benchmark's {', '.join(FAKE_TASKS)}")
    ap.add_argument("--episodes", type=int, default=20, help="fixed-n: episodes per task")
    ap.add_argument("--ci-width", type=float, default=0.2)
    ap.add_argument("--max-episodes", type=int, default=100, help="adaptive: --eval.n_episodes")
    ap.add_argument("--truth-episodes", type=int, default=20000, help="per task, the run that estimates the truth")
    ap.add_argument("--noise", type=float, default=1.3, help="--policy.action_noise")
    ap.add_argument("--max-steps", type=int, default=16, help="--env.max_steps")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--jobs", type=int, default=1, help="evaluations at once (each --workers=1)")
    ap.add_argument("--cli-checks", type=int, default=3, help="pairs also compared by `rollbench compare` (a process each)")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep the runs here; finished runs found here are reused")
    args = ap.parse_args()
    if not 1 <= args.tasks <= len(FAKE_TASKS):
        ap.error(f"--tasks must be 1..{len(FAKE_TASKS)}: the fake benchmark has {len(FAKE_TASKS)} tasks")
    if args.runs < 3 or args.adaptive_runs < 2:
        ap.error("--runs must be >= 3 and --adaptive-runs >= 2")
    if max(args.episodes, args.max_episodes) >= SPACING or max(args.runs, args.adaptive_runs) * SPACING > 1_000_000:
        ap.error(f"runs' seeds are {SPACING} apart: episodes per task < {SPACING}, at most {1_000_000 // SPACING} runs")
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    tasks = FAKE_TASKS[: args.tasks]
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="pooled_cli_") as tmp:
        root = (args.keep or Path(tmp)).resolve()
        root.mkdir(parents=True, exist_ok=True)
        if args.mode in ("both", "fixed"):
            fixed(args, root, tasks)
        if args.mode in ("both", "adaptive"):
            adaptive(args, root, tasks)
    print(f"\nwall {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
