"""rollbench vs lerobot-eval on the same LeRobot checkpoint and the same episodes.

    .venv/bin/python bench/vs_lerobot.py [--episodes 16] [--batch-size 8] [--repeats 3] [--episode-length 300]

Workload: PushT pixels (96x96), a random-init ACT (resnet18 backbone, tiny transformer,
chunk 10) saved by tests/lerobot_helpers.py, or `--checkpoint DIR`. Each repeat runs
`lerobot-eval --eval.batch_size=B` and `rollbench eval` (its default scheduling) as
subprocesses; wall time includes start-up (imports, model load), as a user sees it.
env-steps/s counts the episodes' own steps (rollbench's n_steps; both tools run the same
seeds, so the same episodes), not the masked steps lerobot-eval's finished envs keep taking.
Both write videos of the first 10 episodes (lerobot-eval's 0.4.4 default, rollbench's
--eval.max_episodes_rendered default), so both pay the same rendering and encoding.
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


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=8, help="lerobot-eval --eval.batch_size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--episode-length", type=int, default=300, help="--env.episode_length (PushT's own is 300)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--checkpoint", type=Path, default=None, help="a LeRobot checkpoint dir (default: a tiny random ACT)")
    ap.add_argument("--rollbench-args", default="", help="extra rollbench flags, space separated")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="vs_lerobot_") as tmp:
        root = Path(tmp)
        ckpt = args.checkpoint
        if ckpt is None:
            from lerobot_helpers import make_checkpoint
            from rollbench.benchmarks.pusht import PushTConfig

            ckpt = make_checkpoint(root / "act", PushTConfig())
        common_env = ["--env.type=pusht", f"--env.episode_length={args.episode_length}", f"--seed={args.seed}"]
        times: dict[str, list[float]] = {"lerobot-eval": [], "rollbench": []}
        steps = 0
        for r in range(args.repeats):
            le_out, rb_out = root / f"le{r}", root / f"rb{r}"
            times["lerobot-eval"].append(run([
                str(BIN / "lerobot-eval"), f"--policy.path={ckpt}", "--policy.device=cpu", *common_env,
                f"--eval.n_episodes={args.episodes}", f"--eval.batch_size={args.batch_size}", f"--output_dir={le_out}",
            ]))
            times["rollbench"].append(run([
                str(BIN / "rollbench"), "eval", "--policy.type=lerobot", f"--policy.path={ckpt}", *common_env,
                f"--eval.n_episodes={args.episodes}", f"--output_dir={rb_out}", *args.rollbench_args.split(),
            ]))
            info = json.loads((rb_out / "eval_info.json").read_text())
            steps = sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"])
            mode = info["mode"]
            print(f"repeat {r}: lerobot-eval {times['lerobot-eval'][-1]:.1f} s, rollbench ({mode}) {times['rollbench'][-1]:.1f} s", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"workload: PushT pixels, {ckpt.name}, {args.episodes} episodes x <= {args.episode_length} steps "
              f"({steps} env steps), median of {args.repeats}")
        for name, wall in med.items():
            print(f"{name:13s} wall {wall:7.1f} s   {steps / wall:7.1f} env-steps/s")
        print(f"speed-up (lerobot-eval wall / rollbench wall): {med['lerobot-eval'] / med['rollbench']:.2f}x")


if __name__ == "__main__":
    main()
