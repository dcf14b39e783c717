"""rollbench vs lerobot-eval on the same LeRobot checkpoint and the same episodes.

    .venv/bin/python bench/vs_lerobot.py [--workload pusht|mt10] [--episodes N] [--batch-size B]
        [--repeats 3] [--episode-length L] [--checkpoint DIR] [--rollbench-args "..."]

Workloads (a random-init ACT: resnet18 backbone, tiny transformer, chunk 10, saved by
tests/lerobot_helpers.py, or `--checkpoint DIR`):

- `pusht` (default): PushT pixels (96x96), 16 episodes of 300 steps, lerobot-eval
  `--eval.batch_size=8`.
- `mt10`: MetaWorld MT10 pixels (`pixels_agent_pos`, 480x480: the only size lerobot-eval's
  MetaWorld renders), 2 episodes per task, `--eval.batch_size=2`, 50 steps. LeRobot's
  MetaWorld env ignores `--env.episode_length` (always 500 steps, ~28 min for lerobot-eval
  here), so lerobot-eval runs with its rollout capped at the same length in its own process
  (`lerobot_helpers.capped_lerobot_eval`; nothing else changes).

Each repeat runs lerobot-eval and `rollbench eval` (its default scheduling) as
subprocesses, one after the other; wall time includes start-up (imports, model load), as a
user sees it. env-steps/s counts the episodes' own steps (rollbench's n_steps; both tools
run the same seeds, so on PushT the same episodes), not the masked steps lerobot-eval's
finished envs keep taking. Both write videos of the first 10 episodes of every task, every
step (lerobot-eval's 0.4.4 default; rollbench is given `--eval.max_episodes_rendered=10
--eval.video_fps=1000`, since its own defaults film less).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
BIN = Path(sys.executable).parent

# workload -> defaults: episodes (per task), lerobot-eval batch size, episode length
WORKLOADS = {"pusht": (16, 8, 300), "mt10": (2, 2, 50)}


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def make_checkpoint(workload: str, out: Path) -> Path:
    from lerobot_helpers import make_checkpoint

    if workload == "pusht":
        from rollbench.benchmarks.pusht import PushTConfig

        return make_checkpoint(out, PushTConfig())
    from rollbench.benchmarks.metaworld import MetaWorldConfig

    return make_checkpoint(out, MetaWorldConfig(obs_type="pixels_agent_pos"), action_mean=0.0, action_std=1.0)


def commands(args: argparse.Namespace, ckpt: Path, le_out: Path, rb_out: Path) -> tuple[list[str], list[str]]:
    """(lerobot-eval, rollbench eval) command lines for one repeat."""
    shared = [f"--seed={args.seed}", f"--eval.n_episodes={args.episodes}"]
    le_flags = [f"--policy.path={ckpt}", "--policy.device=cpu", *shared, f"--eval.batch_size={args.batch_size}", f"--output_dir={le_out}"]
    # film as lerobot-eval does (10 episodes per task, every step), not rollbench's cheaper defaults
    films = ["--eval.max_episodes_rendered=10", "--eval.video_fps=1000"]
    rb = [str(BIN / "rollbench"), "eval", "--policy.type=lerobot", f"--policy.path={ckpt}", *shared, *films,
          f"--output_dir={rb_out}"]
    if args.workload == "pusht":
        env = ["--env.type=pusht", f"--env.episode_length={args.episode_length}"]
        return [str(BIN / "lerobot-eval"), *env, *le_flags], [*rb, *env, *args.rollbench_args.split()]
    from metaworld.env_dict import MT10_V3

    from lerobot_helpers import capped_lerobot_eval

    tasks = "--env.task=" + ",".join(MT10_V3)  # LeRobot's MetaWorld knows no "mt10" group
    le = capped_lerobot_eval(args.episode_length, True, "--env.type=metaworld", tasks, *le_flags)
    env = [
        "--env.type=metaworld", tasks, "--env.obs_type=pixels_agent_pos", "--env.observation_width=480",
        "--env.observation_height=480", f"--env.episode_length={args.episode_length}",
    ]
    return le, [*rb, *env, *args.rollbench_args.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="pusht")
    ap.add_argument("--episodes", type=int, default=None, help="episodes per task (pusht 16, mt10 2)")
    ap.add_argument("--batch-size", type=int, default=None, help="lerobot-eval --eval.batch_size (pusht 8, mt10 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--episode-length", type=int, default=None, help="--env.episode_length (pusht 300, its own; mt10 50)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--checkpoint", type=Path, default=None, help="a LeRobot checkpoint dir (default: a tiny random ACT)")
    ap.add_argument("--rollbench-args", default="", help="extra rollbench flags, space separated")
    args = ap.parse_args()
    episodes, batch_size, length = WORKLOADS[args.workload]
    args.episodes = args.episodes or episodes
    args.batch_size = args.batch_size or batch_size
    args.episode_length = args.episode_length or length
    if args.workload == "mt10":
        from rollbench.rendering import apply_backend, choose_backend

        apply_backend(choose_backend("auto"))  # lerobot-eval renders with whatever MUJOCO_GL says

    with tempfile.TemporaryDirectory(prefix="vs_lerobot_") as tmp:
        root = Path(tmp)
        ckpt = args.checkpoint or make_checkpoint(args.workload, root / "act")
        times: dict[str, list[float]] = {"lerobot-eval": [], "rollbench": []}
        steps = 0
        for r in range(args.repeats):
            le_out, rb_out = root / f"le{r}", root / f"rb{r}"
            le_cmd, rb_cmd = commands(args, ckpt, le_out, rb_out)
            times["lerobot-eval"].append(run(le_cmd))
            times["rollbench"].append(run(rb_cmd))
            info = json.loads((rb_out / "eval_info.json").read_text())
            steps = sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"])
            mode = info["mode"]
            print(f"repeat {r}: lerobot-eval {times['lerobot-eval'][-1]:.1f} s, rollbench ({mode}) {times['rollbench'][-1]:.1f} s", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in times.items()}
        n_tasks = len(info["per_task"])
        print(f"workload: {args.workload} pixels, {ckpt.name}, {n_tasks} task(s) x {args.episodes} episodes x <= "
              f"{args.episode_length} steps ({steps} env steps), median of {args.repeats}")
        for name, wall in med.items():
            print(f"{name:13s} wall {wall:7.1f} s   {steps / wall:7.1f} env-steps/s   (runs: {', '.join(f'{t:.1f}' for t in times[name])})")
        print(f"speed-up (lerobot-eval wall / rollbench wall): {med['lerobot-eval'] / med['rollbench']:.2f}x")


if __name__ == "__main__":
    main()
