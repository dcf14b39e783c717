"""A robustness sweep as one run vs one run per condition, on the same episodes.

    .venv/bin/python bench/sweep.py [--workload mt10-expert|pusht-act] [--episodes N] [--repeats 3]
        [--workers W] [--json PATH]

Workloads (9 conditions each: the control and 8 levels):

- `mt10-expert` (default): MetaWorld MT10, the scripted expert, state observations; the
  sweep action.noise=0.1,0.3,0.5; action.latency=1,3,5; state.noise=0.01,0.03 (env-bound).
- `pusht-act`: PushT pixels (96x96), a tiny random-init LeRobot ACT (tests/lerobot_helpers.py),
  100 steps; image.noise=0.05,0.1; image.blur=1,2; image.occlusion=0.1,0.2; image.jpeg=20;
  image.shift=0.1 (policy-bound: here the shared policy calls matter).

`one run` is `rollbench eval --eval.perturb=SWEEP`. `9 runs` is what a user does without
sweeps: one run per condition, each of `--eval.n_episodes` episodes per task on the same
seeds. rollbench has no flag that runs a condition without its control, so each of these
runs is `--eval.perturb=SWEEP` with a `sitecustomize` hook (on PYTHONPATH, this file writes it)
that keeps only that condition in the plan: the units, seeds and perturbations are the
sweep's own. Each repeat runs `one run`, then the 9 runs one after the other, as subprocesses;
wall time includes every start-up (imports, workers, the model load), as a user sees it. The
table prints the medians over repeats and the ratio within each repeat (other work loads both
alike), and checks that both gave every (condition, task, seed) the same outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rollbench import perturb
from rollbench.results.log import read_records

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # lerobot_helpers, for pusht-act's checkpoint

SWEEPS = {
    "mt10-expert": "action.noise=0.1,0.3,0.5;action.latency=1,3,5;state.noise=0.01,0.03",
    "pusht-act": "image.noise=0.05,0.1;image.blur=1,2;image.occlusion=0.1,0.2;image.jpeg=20;image.shift=0.1",
}

HOOK = '''import os
_only = os.environ.get("BENCH_SWEEP_ONLY")
if _only is not None:  # bench/sweep.py: this run is one condition of the sweep, without its control
    from rollbench.config.eval import EvalConfig
    EvalConfig.conditions = property(lambda self: (_only,))
'''


def base_command(args: argparse.Namespace, root: Path) -> list[str]:
    cmd = [sys.executable, "-m", "rollbench", "eval", f"--eval.n_episodes={args.episodes}", "--eval.report=false",
           "--eval.max_episodes_rendered=0", f"--eval.perturb={SWEEPS[args.workload]}"]
    if args.workers:
        cmd.append(f"--workers={args.workers}")
    if args.workload == "mt10-expert":
        return [*cmd, "--env.type=metaworld", "--env.task=mt10", "--policy.type=expert"]
    ckpt = root / "act"
    if not ckpt.exists():
        from lerobot_helpers import make_checkpoint
        from rollbench.benchmarks.pusht import PushTConfig

        make_checkpoint(ckpt, PushTConfig(obs_type="pixels_agent_pos"))
    return [*cmd, "--env.type=pusht", "--env.obs_type=pixels_agent_pos", f"--policy.path={ckpt}",
            "--env.episode_length=100"]


def timed(cmd: list[str], out: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    res = subprocess.run([*cmd, f"--output_dir={out}"], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    return time.perf_counter() - start


def outcomes(dirs: list[Path]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """(condition, task group, task, seed) -> outcome, over the episode logs of `dirs`."""
    return {(r.condition, r.task_group, r.task, r.seed): r.outcome() for d in dirs for r in read_records(d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=sorted(SWEEPS), default="mt10-expert")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="--workers of every run (default: rollbench's)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    conditions = [c.id for c in perturb.parse(SWEEPS[args.workload])]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        root = Path(tmp)
        (root / "hook").mkdir()
        (root / "hook" / "sitecustomize.py").write_text(HOOK)
        cmd = base_command(args, root)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root / "hook"), os.environ.get("PYTHONPATH")])))
        for r in range(args.repeats):
            one = timed(cmd, root / f"one{r}", env)
            each = []
            for c, cid in enumerate(conditions):
                each.append(timed(cmd, root / f"sep{r}_{c}", {**env, "BENCH_SWEEP_ONLY": cid}))
            same = outcomes([root / f"one{r}"]) == outcomes([root / f"sep{r}_{c}" for c in range(len(conditions))])
            rows.append({"one_run_s": one, "separate_runs_s": sum(each), "slowest_separate_s": max(each),
                         "ratio": sum(each) / one, "same_episodes": same})
            print(f"repeat {r + 1}: one run {one:.1f} s, {len(conditions)} runs {sum(each):.1f} s "
                  f"({sum(each) / one:.2f}x), same episodes: {same}", flush=True)
    n = len(rows)
    summary = {
        "workload": args.workload, "sweep": SWEEPS[args.workload], "conditions": len(conditions),
        "episodes_per_task_and_condition": args.episodes, "repeats": n,
        "one_run_s": statistics.median(r["one_run_s"] for r in rows),
        "separate_runs_s": statistics.median(r["separate_runs_s"] for r in rows),
        "ratio": statistics.median(r["ratio"] for r in rows),
        "same_episodes": all(r["same_episodes"] for r in rows), "rows": rows,
    }
    print(f"\n{args.workload}: {len(conditions)} conditions x {args.episodes} episodes per task, median of {n}")
    print(f"  one run (--eval.perturb)     {summary['one_run_s']:7.1f} s")
    print(f"  {len(conditions)} runs, one per condition  {summary['separate_runs_s']:7.1f} s")
    print(f"  ratio (9 runs / one run)     {summary['ratio']:7.2f}x   same episodes: {summary['same_episodes']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
