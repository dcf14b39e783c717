"""rollbench (continuous, lockstep) vs lerobot-eval on the same LeRobot checkpoint and episodes.

    .venv/bin/python bench/vs_lerobot.py [--workload pusht|mt10] [--policy act|diffusion|smolvla]
        [--modes continuous,lockstep,lerobot-eval] [--episodes N] [--batch-size B] [--repeats 3]
        [--episode-length L] [--device cpu|cuda] [--workers W] [--checkpoint DIR]
        [--rollbench-args "..."] [--variant NAME="..."]... [--lerobot-eval-args "..."] [--json PATH]
        [--tasks N] [--no-videos] [--lerobot-eval-without-datasets] [--save-checkpoint DIR]

Policies (random init, built offline by tests/lerobot_helpers.py and tests/vla_helpers.py, or
`--checkpoint DIR`, whose type `--policy` then only names):

- `act` (default): resnet18 backbone, tiny transformer, chunk 10, all 10 executed.
- `diffusion`: resnet18 + spatial softmax, 2 observations of history, horizon 8, 4 actions
  executed per sample of 4 denoising steps.
- `smolvla`: a tiny SmolVLM backbone (64x64 images, 2 layers), chunk 8, 4 executed, 4
  flow-matching steps. Every process runs with HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1.
  On MetaWorld its action stats are PushT's (mean 256, std 100): its actions saturate at the
  env's [-1, 1] clip, the same for every mode.

Workloads:

- `pusht` (default): PushT pixels (96x96), 16 episodes of 300 steps, lerobot-eval
  `--eval.batch_size=8`.
- `mt10`: MetaWorld MT10 pixels (`pixels_agent_pos`, 480x480: the only size lerobot-eval's
  MetaWorld renders), 2 episodes per task, `--eval.batch_size=2`, 50 steps. LeRobot's
  MetaWorld env ignores `--env.episode_length` (always 500 steps, ~28 min for lerobot-eval
  here), so lerobot-eval runs with its rollout capped at the same length in its own process
  (`lerobot_helpers.capped_lerobot_eval`; nothing else changes).

`--tasks N` runs MT10's first N tasks only. `--save-checkpoint DIR` builds the policy into DIR
and exits (bench/gpu.sh builds each policy once, then passes `--checkpoint DIR` to every run).

Modes (`--modes`, comma separated; a repeat runs them in that order, the next one in reverse,
so that no run always goes first): `continuous` and `lockstep` are `rollbench eval
--eval.mode=...` at rollbench's defaults otherwise (lockstep's
batch is min(50, episodes per task), not lerobot-eval's `--batch-size`; `--workers` sets
`--workers` for both); `lerobot-eval` is LeRobot's own. Sampling policies run with rollbench's
default `--policy.seeding=episode` (each episode's noise from its own seed).

`--variant NAME="FLAGS"` (repeatable) adds, next to each rollbench mode, a run of that
mode with FLAGS added to `--rollbench-args`, shown as `MODE[NAME]` (e.g. `--variant
slots8=--slots_per_worker=8`): settings compared side by side in the same repeats, with
`x base` the median over repeats of the mode's wall over the variant's.

Each repeat runs every mode once, as subprocesses, one after the other, and the ratios are
taken within the repeat (other work on the machine loads all of a repeat's runs alike); the
table shows the medians over repeats. Wall time includes start-up (imports, model load), as
a user sees it; CPU s is user + system time of all the run's processes (sampled from /proc
every 0.1 s: bench/throughput.py's CpuMeter); `cores %` is CPU s over wall x the cores this
process may use: how close the run came to the machine's ceiling. env-steps/s counts the episodes' own steps
(rollbench's n_steps, the same for every mode on these workloads, where a random policy never
succeeds), not the masked steps lerobot-eval's finished envs keep taking. Rows per call are counted in every process by a
`sitecustomize` hook (PYTHONPATH; a few microseconds per call): `rows/call` is the mean rows
per policy call (rollbench's `StepContext.act`, lerobot-eval's `select_action`: its batch,
finished envs included); `rows/net` the mean rows per network call (ACT's
`predict_action_chunk`, Diffusion's `conditional_sample`, SmolVLA's `sample_actions`). Every
mode films the first 10 episodes of every task, every step (lerobot-eval's 0.4.4 default;
rollbench is given `--eval.max_episodes_rendered=10 --eval.video_fps=1000`, since its own
defaults film less). `--no-videos` (mt10): no mode films (rollbench
`--eval.max_episodes_rendered=0`; lerobot-eval's `max_episodes_rendered` set to 0 in its process).

`--lerobot-eval-without-datasets`: LeRobot 0.6.1's lerobot-eval imports `LeRobotDataset` at
module level, and `lerobot.datasets` requires HF `datasets` (with pandas) and PyAV to import,
though an evaluation uses it only with `--eval.recording=true`. Where those are not installed
(the GPU machine: their wheels do not fit what bench/gpu.sh may carry), lerobot-eval's process
gets a stand-in `lerobot.datasets` whose `LeRobotDataset` raises if used; nothing an episode
computes changes, and lerobot-eval's start-up loses those imports (~1-2 s), so its wall is, if
anything, shorter than a full install's. The JSON says which (`lerobot_eval_datasets`).
Episodes per hour are the run's episodes (tasks x episodes) over its wall, start-up included.

Measured on 2 quiet CPU cores (2026-12-05, nothing else running; bench/gpu.sh is the GPU
counterpart), median of 3, x lerobot-eval (continuous / lockstep): PushT Diffusion 1.19x /
1.45x, SmolVLA 1.88x / 1.87x; MT10 pixels (2 per task x 20 steps) Diffusion 1.72x / 2.03x,
SmolVLA 2.54x / 2.39x (docs/lerobot.md, "Speed"). Under load (another job's tests, load 3-6)
the ratios follow the load more than either tool: lerobot-eval's torch threads spin against
it (Diffusion on PushT took lerobot-eval 37, 45 and 233 s in three repeats). Diffusion cannot
reach 2x on PushT here: both tools do the same work (per chunk of 4 steps, resnet18 on 2
frames per episode, 4 U-Net steps; the PushT steps, renders and videos) and lerobot-eval
already keeps ~1.5 cores busy (56 CPU s in 38 s), so 2 cores bound rollbench near 1.4-1.5x.
Batch size for a policy-bound run (issue 36, item 7), LeRobot 0.6.1 (`.venv312`), PushT ACT,
2 quiet cores, median of 3: continuous at the default 4 slots per worker 22.7 s, 4 rows per call,
77% of the cores, 1.99x lerobot-eval (44.2 s, 8 rows per call, 60%); at
`--slots_per_worker=8` 22.3 s, 8 rows per call, 78%, 2.15x (lerobot-eval 47.8 s in that run).
Doubling the rows per call changes nothing measurable here: ACT calls its network once per
chunk of 10 steps, and the missing ~22% of the cores is start-up (imports and the model load,
~7 s on one core) before the workers run, not small batches.
Diffusion (same item, `--variant slots8=--slots_per_worker=8`, 2 cores shared with other tests,
load 3-8): default over 8 slots 1.03x wall (median of 14 pairs, 0.74-1.48x), 4% fewer CPU s at 8
rows; 2 slots 1.3-1.4x slower. Not beyond the noise: the default stays (docs/architecture.md,
"Scheduling").
A cProfile of continuous's driver (2 workers x 4 slots, 4 rows per call: one worker's slots,
the two workers alternate) spent 22 s in the policy (16.5 s resnet18 encoding both history
frames again every chunk, as LeRobot does; 3.8 s U-Net), 16 s waiting for the workers (11-12
CPU s each: PushT steps, renders, videos), 8 s starting (imports 7 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollbench.config.env import BenchmarkConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
BIN = Path(sys.executable).parent
#: cores this process may run on: the ceiling of "cores %" (CPU s over wall x cores)
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

from import_hook import AFTER_IMPORT  # noqa: E402  (bench/, on sys.path above)

# workload -> defaults: episodes (per task), lerobot-eval batch size, episode length
WORKLOADS = {"pusht": (16, 8, 300), "mt10": (2, 2, 50)}
POLICIES = ("act", "diffusion", "smolvla")
MODES = ("continuous", "lockstep", "lerobot-eval")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Loaded at start-up by every Python process of a run (PYTHONPATH): when one of the modules
# below is imported, its methods are wrapped to append "<tag> <rows>" per call to
# $VS_LEROBOT_ROWS. Lazy (a meta path finder), so a process imports nothing it would not.
ROWS_HOOK = AFTER_IMPORT + '''
import os

def _lead(batch):
    for v in (batch.values() if isinstance(batch, dict) else [batch]):
        if getattr(v, "shape", None):
            return int(v.shape[0])
    return -1

def _arg(i, name):
    return lambda a, k: k[name] if name in k else a[i]

_batch = _arg(1, "batch")
_WRAP = {
    "rollbench.episode.context": [("StepContext", "act", "act", lambda a, k: len(_arg(3, "slots")(a, k)))],
    "lerobot.policies.act.modeling_act": [
        ("ACTPolicy", "select_action", "select_action", lambda a, k: _lead(_batch(a, k))),
        ("ACTPolicy", "predict_action_chunk", "net", lambda a, k: _lead(_batch(a, k))),
    ],
    "lerobot.policies.diffusion.modeling_diffusion": [
        ("DiffusionPolicy", "select_action", "select_action", lambda a, k: _lead(_batch(a, k))),
        ("DiffusionModel", "conditional_sample", "net", _arg(1, "batch_size")),
    ],
    "lerobot.policies.smolvla.modeling_smolvla": [
        ("SmolVLAPolicy", "select_action", "select_action", lambda a, k: _lead(_batch(a, k))),
        ("VLAFlowMatching", "sample_actions", "net", lambda a, k: _lead(_arg(5, "state")(a, k))),
    ],
}
_fd = []

def _log(tag, rows):
    if not _fd:
        _fd.append(os.open(os.environ["VS_LEROBOT_ROWS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    os.write(_fd[0], f"{tag} {rows}\\n".encode())

def _counted(fn, tag, rows):
    def counted(*a, **k):
        _log(tag, rows(a, k))
        return fn(*a, **k)
    return counted

def _patch(name):
    def patch(module):
        for cls, method, tag, rows in _WRAP[name]:
            owner = getattr(module, cls)
            setattr(owner, method, _counted(getattr(owner, method), tag, rows))
    return patch

if os.environ.get("VS_LEROBOT_ROWS"):
    after_import({name: _patch(name) for name in _WRAP})
'''


# Prepended to lerobot-eval's launcher under --lerobot-eval-without-datasets: a `lerobot.datasets`
# that imports nothing (its submodules stay importable from the real directory) and a
# `LeRobotDataset` that says what it needs if recording ever asks for it.
DATASETS_STANDIN = """
import importlib.util, sys, types
from pathlib import Path
if importlib.util.find_spec("datasets") is None or importlib.util.find_spec("av") is None:
    import lerobot
    _pkg = types.ModuleType("lerobot.datasets")
    _pkg.__path__ = [str(Path(lerobot.__file__).parent / "datasets")]
    _mod = types.ModuleType("lerobot.datasets.lerobot_dataset")
    def _refuse(*args, **kwargs):
        raise RuntimeError("bench/vs_lerobot.py --lerobot-eval-without-datasets: LeRobotDataset "
                           "(--eval.recording) needs `pip install 'lerobot[dataset]'`")
    _mod.LeRobotDataset = type("LeRobotDataset", (), {"__init__": _refuse, "create": staticmethod(_refuse)})
    _pkg.lerobot_dataset = _mod
    sys.modules.update({"lerobot.datasets": _pkg, "lerobot.datasets.lerobot_dataset": _mod})
    lerobot.datasets = _pkg
"""


def script(name: str) -> str:
    """A console script of this interpreter's environment, else the one on PATH (pip --target's bin/)."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"vs_lerobot.py: no `{name}` beside {sys.executable} or on PATH: install it there")
    return str(found)


@dataclass(frozen=True)
class Run:
    """One mode's run in one repeat."""

    wall: float
    cpu: float
    rows: dict[str, tuple[int, int]]  # tag -> (calls, rows)
    steps: int | None  # the episodes' env steps (rollbench's n_steps); None for lerobot-eval

    def mean_rows(self, tag: str) -> float | None:
        calls, rows = self.rows.get(tag, (0, 0))
        return rows / calls if calls else None


def run(cmd: list[str], env: dict[str, str], rows_log: Path) -> tuple[float, float, dict[str, tuple[int, int]]]:
    """(wall s, CPU s of all its processes, {tag: (calls, rows)}) of one command."""
    from throughput import CpuMeter

    with CpuMeter() as meter:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, "VS_LEROBOT_ROWS": str(rows_log)})
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in rows_log.read_text().splitlines() if rows_log.exists() else []:
        tag, rows = line.split()
        counts[tag][0] += 1
        counts[tag][1] += int(rows)
    return wall, meter.cpu_s, {tag: (c, r) for tag, (c, r) in counts.items()}


def benchmark_config(workload: str) -> BenchmarkConfig:
    if workload == "pusht":
        from rollbench.benchmarks.pusht import PushTConfig

        return PushTConfig()
    from rollbench.benchmarks.metaworld import MetaWorldConfig

    return MetaWorldConfig(obs_type="pixels_agent_pos")


def make_checkpoint(policy: str, workload: str, out: Path) -> Path:
    bench = benchmark_config(workload)
    if policy == "smolvla":
        from vla_helpers import make_smolvla_checkpoint

        return make_smolvla_checkpoint(out, bench)
    from lerobot_helpers import make_checkpoint

    # MetaWorld's actions are in [-1, 1]: stats that keep a random policy's actions there
    scale = {"action_mean": 0.0, "action_std": 1.0} if workload == "mt10" else {}
    return make_checkpoint(out, bench, policy_type=policy, **scale)


def base_mode(label: str) -> str:
    """The mode a run label names: `continuous[slots8]` -> `continuous`."""
    return label.split("[", 1)[0]


def labels(args: argparse.Namespace) -> dict[str, str]:
    """Every run of a repeat, in run order (each rollbench mode followed by its variants): label -> its variant's flags."""
    out = {}
    for mode in args.modes:
        out[mode] = ""
        if mode != "lerobot-eval":
            out.update({f"{mode}[{name}]": flags for name, flags in args.variants.items()})
    return out


def commands(args: argparse.Namespace, ckpt: Path, out: Path) -> dict[str, list[str]]:
    """run label -> its command line for one repeat, writing into out/<label>."""
    shared = [f"--seed={args.seed}", f"--eval.n_episodes={args.episodes}", f"--policy.device={args.device}"]
    # sync envs, as 0.4.4's default: lerobot-eval 0.6 defaults to async ones, which crash by themselves on PushT
    le_flags = [f"--policy.path={ckpt}", *shared, f"--eval.batch_size={args.batch_size}", "--eval.use_async_envs=false",
                f"--output_dir={out / 'lerobot-eval'}",
                *args.lerobot_eval_args.split()]
    # film as lerobot-eval does (10 episodes per task, every step), not rollbench's cheaper defaults
    films = ["--eval.max_episodes_rendered=10", "--eval.video_fps=1000"]
    if args.no_videos:
        films = ["--eval.max_episodes_rendered=0"]
    workers = [f"--workers={args.workers}"] if args.workers else []
    if args.workload == "pusht":
        env = ["--env.type=pusht", f"--env.episode_length={args.episode_length}"]
        le = [script("lerobot-eval"), *env, *le_flags]
    else:
        from metaworld.env_dict import MT10_V3

        from lerobot_helpers import capped_lerobot_eval

        tasks = "--env.task=" + ",".join(list(MT10_V3)[: args.tasks])  # LeRobot's MetaWorld knows no "mt10" group
        le = capped_lerobot_eval(args.episode_length, not args.no_videos, "--env.type=metaworld", tasks, *le_flags)
        if args.lerobot_eval_without_datasets:
            le[2] = DATASETS_STANDIN + le[2]  # [python, "-c", launcher, ...]
        env = [
            "--env.type=metaworld", tasks, "--env.obs_type=pixels_agent_pos", "--env.observation_width=480",
            "--env.observation_height=480", f"--env.episode_length={args.episode_length}",
        ]
    cmds = {}
    for label, flags in labels(args).items():
        mode = base_mode(label)
        cmds[label] = le if mode == "lerobot-eval" else [
            script("rollbench"), "eval", "--policy.type=lerobot", f"--policy.path={ckpt}", *shared, *films, *workers, *env,
            f"--eval.mode={mode}", f"--output_dir={out / label}", *args.rollbench_args.split(), *flags.split(),
        ]
    return cmds


def run_repeat(args: argparse.Namespace, ckpt: Path, out: Path, env: dict[str, str], reverse: bool) -> dict[str, Run]:
    """Every run of one repeat, in `labels` order or (`reverse`) the other way round."""
    out.mkdir(parents=True)
    runs = {}
    cmds = list(commands(args, ckpt, out).items())
    for label, cmd in reversed(cmds) if reverse else cmds:
        wall, cpu, rows = run(cmd, env, out / f"{label}.rows")
        steps = None
        if (mode := base_mode(label)) != "lerobot-eval":
            info = json.loads((out / label / "eval_info.json").read_text())
            if info["mode"] != mode:
                raise SystemExit(f"rollbench ran {info['mode']} mode when asked for {mode}")
            steps = sum(sum(t["metrics"]["n_steps"]) for t in info["per_task"])
        runs[label] = Run(wall, cpu, rows, steps)
        print(f"  {label}: {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)  # kept if a later run fails
    return runs


def summarize(args: argparse.Namespace, ckpt: Path, repeats: list[dict[str, Run]]) -> dict[str, Any]:
    """Medians over repeats; ratios taken within each repeat (what --json writes)."""
    counted = {r.steps for rep in repeats for r in rep.values() if r.steps is not None}
    n_tasks = args.tasks if args.workload == "mt10" else 1
    out: dict[str, Any] = {
        "workload": args.workload, "policy": args.policy, "checkpoint": str(ckpt), "device": args.device,
        "workers": args.workers, "tasks": n_tasks, "episodes": args.episodes, "episode_length": args.episode_length,
        "videos": not args.no_videos, "variants": args.variants,
        "lerobot_eval_datasets": "stand-in" if args.lerobot_eval_without_datasets and not _datasets_installed() else "real",
        "repeats": len(repeats), "env_steps": max(counted) if counted else n_tasks * args.episodes * args.episode_length,
        "env_steps_counted": sorted(counted), "modes": {},
    }
    for mode in labels(args):
        runs = [rep[mode] for rep in repeats]
        wall = statistics.median(r.wall for r in runs)
        ratio = None
        if "lerobot-eval" in args.modes and mode != "lerobot-eval":
            ratio = statistics.median(rep["lerobot-eval"].wall / rep[mode].wall for rep in repeats)
        over_base = None
        if base_mode(mode) != mode:
            over_base = statistics.median(rep[base_mode(mode)].wall / rep[mode].wall for rep in repeats)
        out["modes"][mode] = {
            "wall_s": wall, "walls_s": [r.wall for r in runs], "cpu_s": statistics.median(r.cpu for r in runs),
            "env_steps_per_s": out["env_steps"] / wall,
            "episodes_per_hour": n_tasks * args.episodes / wall * 3600,
            # the machine's ceiling: what share of its cores the run kept busy (CPU s over wall x cores)
            "utilisation": statistics.median(r.cpu / (r.wall * CORES) for r in runs),
            "rows_per_call": _median([r.mean_rows("select_action" if mode == "lerobot-eval" else "act") for r in runs]),
            "rows_per_net_call": _median([r.mean_rows("net") for r in runs]),
            "x_lerobot_eval": ratio,
            "x_base": over_base,
        }
    if "continuous" in args.modes and "lockstep" in args.modes:
        out["lockstep_over_continuous"] = statistics.median(rep["lockstep"].wall / rep["continuous"].wall for rep in repeats)
    return out


def print_table(s: dict[str, Any]) -> None:
    exact = "" if s["env_steps_counted"] else ", at most"
    print(f"workload: {s['workload']} pixels, {s['policy']} ({Path(s['checkpoint']).name}), {s['tasks']} task(s) x "
          f"{s['episodes']} episodes x <= {s['episode_length']} steps ({s['env_steps']} env steps{exact}), device "
          f"{s['device']}, median of {s['repeats']}")
    if len(s["env_steps_counted"]) > 1:
        print(f"note: rollbench modes counted different env steps: {s['env_steps_counted']}")
    width = max(13, *map(len, s["modes"]))
    print(f"{'mode':{width}s} {'wall s':>7s} {'CPU s':>7s} {'cores %':>7s} {'env-steps/s':>11s} {'rows/call':>9s} {'rows/net':>8s} "
          f"{'x lerobot-eval':>14s} {'x base':>6s}   runs (wall s)")
    for mode, m in s["modes"].items():
        ratio = "-" if m["x_lerobot_eval"] is None else f"{m['x_lerobot_eval']:.2f}x"
        over_base = "-" if m["x_base"] is None else f"{m['x_base']:.2f}x"
        print(f"{mode:{width}s} {m['wall_s']:7.1f} {m['cpu_s']:7.1f} {100 * m['utilisation']:7.0f} {m['env_steps_per_s']:11.1f} "
              f"{_num(m['rows_per_call']):>9s} "
              f"{_num(m['rows_per_net_call']):>8s} {ratio:>14s} {over_base:>6s}   {', '.join(f'{w:.1f}' for w in m['walls_s'])}")
    if "lockstep_over_continuous" in s:
        print(f"continuous vs lockstep (lockstep wall / continuous wall): {s['lockstep_over_continuous']:.2f}x")


def _datasets_installed() -> bool:
    """Whether lerobot.datasets can import for real (what DATASETS_STANDIN tests in lerobot-eval's process)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("datasets", "av"))


def _median(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="pusht")
    ap.add_argument("--policy", choices=POLICIES, default="act", help="the random-init policy type (default act)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma separated, in run order (default {','.join(MODES)})")
    ap.add_argument("--episodes", type=int, default=None, help="episodes per task (pusht 16, mt10 2)")
    ap.add_argument("--batch-size", type=int, default=None, help="lerobot-eval --eval.batch_size (pusht 8, mt10 2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--episode-length", type=int, default=None, help="--env.episode_length (pusht 300, its own; mt10 50)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--device", default="cpu", help="--policy.device for every mode (default cpu)")
    ap.add_argument("--workers", type=int, default=None, help="rollbench --workers (default: rollbench's choice)")
    ap.add_argument("--checkpoint", type=Path, default=None, help="a LeRobot checkpoint dir (default: a tiny random --policy)")
    ap.add_argument("--rollbench-args", default="", help="extra rollbench flags, space separated")
    ap.add_argument("--variant", action="append", default=[], metavar='NAME="FLAGS"',
                    help="also run each rollbench mode with these extra flags, as MODE[NAME] (repeatable)")
    ap.add_argument("--lerobot-eval-args", default="", help="extra lerobot-eval flags, space separated")
    ap.add_argument("--json", type=Path, default=None, help="also write the results (medians, ratios, every run) here")
    ap.add_argument("--tasks", type=int, default=10, help="mt10: run its first N tasks (default 10)")
    ap.add_argument("--no-videos", action="store_true", help="mt10: no mode films (default: 10 episodes per task)")
    ap.add_argument("--lerobot-eval-without-datasets", action="store_true",
                    help="mt10: a stand-in for lerobot.datasets in lerobot-eval's process (see above)")
    ap.add_argument("--save-checkpoint", type=Path, default=None, help="build the --policy checkpoint into DIR and exit")
    args = ap.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown or not args.modes:
        ap.error(f"--modes: unknown {unknown or 'none given'}; known: {', '.join(MODES)}")
    args.variants = {}
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        if not name or not flags or not name.replace("-", "").replace("_", "").isalnum() or name in args.variants:
            ap.error(f"--variant: {variant!r} is not NAME=FLAGS with a new NAME of letters, digits, - or _")
        args.variants[name] = flags
    episodes, batch_size, length = WORKLOADS[args.workload]
    args.episodes = args.episodes or episodes
    args.batch_size = args.batch_size or batch_size
    args.episode_length = args.episode_length or length
    if not 1 <= args.tasks <= 10:
        ap.error(f"--tasks: {args.tasks} is not a number of MT10 tasks (1 to 10)")
    mt10_only = [flag for flag, on in (("--tasks", args.tasks != 10), ("--no-videos", args.no_videos),
                 ("--lerobot-eval-without-datasets", args.lerobot_eval_without_datasets)) if on]
    if mt10_only and args.workload != "mt10":
        ap.error(f"{', '.join(mt10_only)}: for --workload mt10 only (got {args.workload})")
    if args.workload == "mt10":
        from rollbench.rendering import apply_backend, choose_backend

        apply_backend(choose_backend("auto"))  # lerobot-eval renders with whatever MUJOCO_GL says
    os.environ.update(OFFLINE)  # SmolVLA's backbone and tokenizer are local directories
    if args.save_checkpoint:
        print(make_checkpoint(args.policy, args.workload, args.save_checkpoint))
        return

    with tempfile.TemporaryDirectory(prefix="vs_lerobot_") as tmp:
        root = Path(tmp)
        ckpt = args.checkpoint or make_checkpoint(args.policy, args.workload, root / args.policy)
        hook = root / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(ROWS_HOOK)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)}
        repeats = []
        for r in range(args.repeats):
            repeats.append(run_repeat(args, ckpt, root / f"r{r}", env, reverse=r % 2 == 1))
            print(f"repeat {r}: " + ", ".join(f"{m} {run.wall:.1f} s" for m, run in repeats[-1].items()), file=sys.stderr)
        summary = summarize(args, ckpt, repeats)
    print_table(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
