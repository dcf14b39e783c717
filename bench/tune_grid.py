"""Is `rollbench tune` right? Its prediction and its choice against a grid search, in one run.

    .venv/bin/python bench/tune_grid.py --workload mt10-expert --repeats 3
    .venv/bin/python bench/tune_grid.py --workload pusht-act --repeats 1

1. `rollbench tune <flags>`: the recommended command, predicted env-steps/s and wall time.
2. The recommended command, run `--repeats` times: achieved env-steps/s as eval_info.json
   reports them (the episodes' steps over `overall.eval_s`, the first episode's start to
   the last one's end: what tune's `predicted_steps_per_s` predicts), and the wall time of
   the whole command, start-up included, as a user sees it (against `predicted_wall_s`).
3. A small grid of --workers x --slots_per_worker (the same flags otherwise), interleaved
   with the recommended command's repeats.

Prints the medians, predicted / achieved, and recommended / best of the grid (by wall time).
For many tune -> eval pairs on a noisy machine, see bench/tune_pairs.py.
Workloads: MetaWorld MT10 state with its scripted experts (10 episodes per task), and PushT
pixels with a random-init LeRobot ACT (tests/lerobot_helpers.py; 16 episodes). Videos are
off on both (`--eval.max_episodes_rendered=0`) unless `--videos K`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
BIN = Path(sys.executable).parent


def workload_flags(name: str, root: Path) -> tuple[list[str], list[tuple[int, int]]]:
    """(flags, grid of (workers, slots)) for a workload."""
    if name == "mt10-expert":
        flags = ["--env.type=metaworld", "--env.task=mt10", "--policy.type=expert", "--eval.n_episodes=10"]
        return flags, [(w, 1) for w in (1, 2, 3, 4)]
    if name == "pusht-act":
        from lerobot_helpers import make_checkpoint
        from rollbench.benchmarks.pusht import PushTConfig

        ckpt = make_checkpoint(root / "act", PushTConfig())
        flags = ["--env.type=pusht", "--policy.type=lerobot", f"--policy.path={ckpt}", "--eval.n_episodes=16"]
        return flags, [(w, k) for w in (1, 2, 4) for k in (1, 2, 4, 8) if w * k <= 16]
    raise SystemExit(f"--workload={name!r}: choose mt10-expert or pusht-act")


def run_eval(flags: list[str], out: Path) -> tuple[float, int, float]:
    """(wall of the whole command, steps, overall.eval_s)."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(BIN / "rollbench"), "eval", *flags, f"--output_dir={out}", "--resume=false"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rollbench eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    info = json.loads((out / "eval_info.json").read_text())
    return wall, sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"]), float(info["overall"]["eval_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="mt10-expert")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--videos", type=int, default=0, help="--eval.max_episodes_rendered")
    ap.add_argument("--budget", type=float, default=30.0, help="--tune.budget_s")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="tune_grid_") as tmp:
        root = Path(tmp)
        flags, grid = workload_flags(args.workload, root)
        flags.append(f"--eval.max_episodes_rendered={args.videos}")
        t0 = time.perf_counter()
        tune = subprocess.run([str(BIN / "rollbench"), "tune", *flags, f"--tune.budget_s={args.budget}",
                               f"--tune.output={root / 'tune.json'}"], capture_output=True, text=True)
        if tune.returncode != 0:
            raise SystemExit(f"rollbench tune failed:\n{tune.stderr[-3000:]}")
        tune_s = time.perf_counter() - t0
        data = json.loads((root / "tune.json").read_text())
        rec = data["recommendation"]
        recommended = shlex.split(data["command"])[2:]
        print(f"tune took {tune_s:.1f} s: {rec['bottleneck']}", file=sys.stderr)
        print(f"recommended: {' '.join(recommended)}", file=sys.stderr)
        variants: dict[str, list[str]] = {"recommended": recommended}
        for w, k in grid:
            variants[f"w{w} x k{k}"] = [*flags, f"--workers={w}", f"--slots_per_worker={k}"]
        walls: dict[str, list[float]] = {name: [] for name in variants}
        evals: dict[str, list[float]] = {name: [] for name in variants}
        steps: dict[str, int] = {}
        for r in range(args.repeats):
            for i, (name, vflags) in enumerate(variants.items()):
                wall, n, eval_s = run_eval(vflags, root / f"run{r}-{i}")
                walls[name].append(wall)
                evals[name].append(eval_s)
                steps[name] = n
                print(f"repeat {r} {name:12s} {wall:6.1f} s  {n / wall:8.1f} steps/s", file=sys.stderr)
        med = {name: statistics.median(v) for name, v in walls.items()}
        med_eval = {name: statistics.median(v) for name, v in evals.items()}
        print(f"workload {args.workload}: median of {args.repeats}; wall of the whole command (start-up included), "
              f"env-steps/s over eval_s (eval_info.json)")
        print(f"{'variant':14s} {'wall s':>8s} {'eval_s':>8s} {'env-steps/s':>12s}")
        for name in variants:
            print(f"{name:14s} {med[name]:8.1f} {med_eval[name]:8.1f} {steps[name] / med_eval[name]:12.1f}")
        achieved = steps["recommended"] / med_eval["recommended"]
        best = min((n for n in variants if n != "recommended"), key=lambda n: med[n])
        print(f"\npredicted {data['predicted_steps_per_s']:.1f} env-steps/s, wall {data['predicted_wall_s']:.1f} s; "
              f"achieved {achieved:.1f} env-steps/s, wall {med['recommended']:.1f} s")
        print(f"predicted / achieved throughput: {data['predicted_steps_per_s'] / achieved:.2f}; "
              f"predicted / achieved wall: {data['predicted_wall_s'] / med['recommended']:.2f}")
        print(f"recommended ({rec['workers']} workers x {rec['slots_per_worker']} slots) wall / best of grid "
              f"({best}) wall: {med['recommended'] / med[best]:.2f}")


if __name__ == "__main__":
    main()
